//! The store conformance suite: every test of the `Store` contract is written once, as an
//! async function taking `Arc<dyn Store>` (or two, for "two processes on one database"), and
//! runs against a fresh SQLite data dir AND a fresh PostgreSQL database.
//!
//! PostgreSQL comes from `ENGRAM_TEST_DATABASE_URL` (`scripts/pg.sh start` prints one); when
//! it is unset the PostgreSQL tests FAIL with instructions: nothing is skipped. Where the two
//! backends behave differently, the contract (`engram_core::store`) is wrong or incomplete.

mod backfill;
mod backup;
mod concurrency;
mod conversations;
mod erase;
mod extraction;
mod harness;
mod jobs;
mod memories;
mod message_vectors;
mod pg_only;
mod search;
mod state;
mod summaries;
mod tls;
mod unavailable;

/// One `#[tokio::test]` per case and backend: `single` cases get one store, `pair` cases
/// get the store and a second one opened on the same data (a second process).
macro_rules! backend {
    ($backend:expr; single: [$($m:ident::$name:ident),* $(,)?]; pair: [$($pm:ident::$pname:ident),* $(,)?] $(;)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let _w = crate::harness::watchdog(concat!(module_path!(), "::", stringify!($name)));
                let f = crate::harness::Fixture::new($backend).await;
                crate::$m::$name(f.store.clone()).await;
                f.finish().await;
            }
        )*
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $pname() {
                let _w = crate::harness::watchdog(concat!(module_path!(), "::", stringify!($pname)));
                let mut f = crate::harness::Fixture::new($backend).await;
                let other = f.reopen().await;
                crate::$pm::$pname(f.store.clone(), other).await;
                f.finish().await;
            }
        )*
    };
}

macro_rules! conformance {
    ($($body:tt)*) => {
        mod sqlite {
            backend!(crate::harness::Backend::Sqlite; $($body)*);
        }
        mod postgres {
            backend!(crate::harness::Backend::Postgres; $($body)*);
        }
    };
}

conformance! {
    single: [
        backup::backup_restore_into_another_tenant,
        backup::restore_refuses_what_it_cannot_read_back,
        memories::tenant_isolation,
        memories::supersede_forget_purge_history,
        memories::history_keeps_the_order_of_one_instant,
        memories::source_rating_filters_and_activity,
        memories::list_pagination_and_filters,
        memories::profile_touch_rate,
        memories::rows_needing_vectors_and_set_vectors,
        memories::dimension_refusal,
        memories::round_trip_and_unknown_ids,
        search::vector_search_equals_brute_force,
        search::vector_search_of_a_large_scope_equals_brute_force,
        search::text_search_keywords_any_language,
        search::text_search_drops_common_terms,
        search::keyword_matches_never_depend_on_other_scopes,
        search::a_query_of_common_words_alone_finds_their_rows,
        search::text_search_matches_word_forms,
        search::keyword_search_forgives_a_typo,
        search::text_search_never_a_syntax_error,
        search::messages_are_found_by_their_context,
        conversations::append_seq_ownership,
        conversations::append_with_its_jobs,
        conversations::listing_agents_and_conversations,
        conversations::conversations_to_compact_are_the_agents_over_its_threshold,
        conversations::recalls,
        conversations::context_sessions,
        conversations::agents,
        conversations::batched_reads,
        conversations::api_keys,
        conversations::ui_sessions,
        conversations::speakers_are_recorded_per_user,
        conversations::message_dates_are_recorded_per_user,
        message_vectors::message_vectors_needed_by_seq_and_model,
        message_vectors::message_vectors_set_per_tenant,
        message_vectors::message_vectors_set_many_in_one_call,
        message_vectors::message_vectors_search_exact_top_k,
        message_vectors::message_vectors_search_equals_brute_force,
        message_vectors::message_vectors_erased_with_the_user,
        message_vectors::message_search_time_window,
        erase::erase_user_removes_only_that_user,
        summaries::summaries_are_written_once_under_their_claim,
        summaries::summaries_are_searched_reembedded_and_erased,
        jobs::enqueue_dedup_and_claim_order,
        jobs::lease_expiry_reclaims,
        jobs::lock_key_is_exclusive,
        jobs::retry_backoff_fail_list,
        jobs::claim_only_the_kinds_asked_for,
        jobs::complete_jobs_marks_a_group_done,
        jobs::claim_jobs_takes_a_group_by_the_claim_rules,
        jobs::finished_jobs_are_pruned_oldest_first,
        state::state_is_kept_per_address_and_expires,
        state::state_lists_deletes_and_sweeps,
        extraction::apply_extraction_is_atomic,
    ];
    pair: [
        erase::erasure_then_new_facts_seen_by_another_process,
        concurrency::concurrent_claims_never_hand_out_a_job_twice,
        concurrency::concurrent_appends_get_consecutive_seqs,
        concurrency::concurrent_supersedes_have_one_winner,
        concurrency::racing_inserts_keep_one_profile_value_and_one_unique_fact,
        concurrency::writes_of_one_process_are_seen_by_the_other,
        concurrency::purge_is_one_step_for_every_process,
        message_vectors::message_vectors_of_one_process_are_seen_by_the_other,
    ];
}
