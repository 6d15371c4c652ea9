//! testkit: helpers for engram's tests. Not published.
//!
//! The main piece is [`ScriptedLlm`], a real HTTP server on `127.0.0.1:<random port>` that
//! speaks the two LLM protocols engram's providers use, so that tests exercise the real
//! HTTP clients (conventions item 12: external services are replaced by a local server,
//! not a trait fake):
//!
//! - OpenAI chat completions, `POST /v1/chat/completions` (also `/chat/completions`);
//! - Anthropic Messages, `POST /v1/messages`.
//!
//! A test scripts the answers with [`Rule`]s (what to match, what to answer) and reads back
//! every request the server received as a [`RecordedRequest`]:
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use testkit::{Match, Rule, ScriptedLlm};
//!
//! let llm = ScriptedLlm::start().await;
//! llm.on(Rule::user_contains("Postgres")
//!     .reply(r#"[{"content":"The user uses Postgres.","category":"fact","importance":6}]"#));
//! // Newest rule first: the next request gets one 429, then falls through to the rule above.
//! llm.on(Rule::any().status(429).retry_after(1).times(1));
//! let base = llm.base_url(); // give this to the provider under test
//! # let _ = base;
//! let extractions = llm.calls_matching(&Match::any().system_contains("extract"));
//! # let _ = extractions;
//! llm.wait_for(&Match::any(), 2, Duration::from_secs(10)).await;
//! # }
//! ```
//!
//! Modules:
//! - [`rule`]: [`Rule`] (conditions + action + `times`/`delay`) and [`Match`] (conditions,
//!   also used to query recordings).
//! - [`request`]: [`RecordedRequest`], the parsed view of one request, and [`Protocol`].
//! - [`protocol`]: the wire shapes of answers and errors, request validation, token counts.
//! - [`server`]: [`ScriptedLlm`], the server and its handle.
//!
//! Design decisions:
//! - **Rules are tried newest first**, so a rule added later overrides or pre-empts older
//!   ones (a transient `times(1)` failure added after a reply rule fires first, then falls
//!   through to it). A default rule ([`ScriptedLlm::set_default`]) is tried last. When
//!   nothing matches, the server answers **500 with a body saying no rule matched** (and
//!   prints it to stderr), so a missing script fails the test visibly instead of hanging.
//! - The server runs **on its own thread with its own tokio runtime**: it works from sync
//!   and async tests alike, keeps answering while the test's runtime is blocked, and its
//!   delays run in real time even if the test pauses tokio's clock.
//! - Requests are validated like the real APIs do where it is cheap (JSON body, `model`,
//!   non-empty `messages`, Anthropic's `max_tokens`, `anthropic-version` and `x-api-key`,
//!   no streaming), so a provider that sends a broken request fails here too.

pub mod protocol;
pub mod request;
pub mod rule;
pub mod server;

pub use request::{Message, Protocol, RecordedRequest};
pub use rule::{Match, Rule, RuleHandle};
pub use server::ScriptedLlm;
