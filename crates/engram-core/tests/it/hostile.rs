//! Arbitrary text (and text built from the pieces that trip parsers: brackets, quotes,
//! digits, separators, decision words) through the LLM output parsers and the PII filter.

use engram_core::pipeline::parse::{Judgement, parse_candidates, parse_judgements};
use engram_core::pipeline::pii::{self, Filtered, PiiPolicy};
use proptest::prelude::*;

/// Text made of the pieces parsers and detectors react to.
fn tricky() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("[".to_string()),
        Just("]".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("\"".to_string()),
        Just(",".to_string()),
        Just(":".to_string()),
        Just(" ".to_string()),
        Just("```json\n".to_string()),
        Just("\"fact\": 1".to_string()),
        Just("\"decision\": \"UPDATE\"".to_string()),
        Just("\"decision\": \"ADD\"".to_string()),
        Just("\"id\": 2".to_string()),
        Just("\"content\": \"The user is 40.\"".to_string()),
        Just("password: ".to_string()),
        Just("+".to_string()),
        Just("@".to_string()),
        Just("-".to_string()),
        Just("(".to_string()),
        "[0-9]{1,12}",
        "[A-Za-z]{1,10}",
        "\\PC{1,4}",
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn candidate_parsing_never_panics_and_keeps_only_non_empty_facts(s in prop_oneof![tricky(), any::<String>()]) {
        if let Ok(cands) = parse_candidates(&s) {
            for c in cands {
                prop_assert!(!c.content.trim().is_empty());
                prop_assert!((1..=10).contains(&c.importance.get()));
            }
        }
    }

    #[test]
    fn judgements_cover_every_candidate_with_shown_ids_or_fail(
        s in prop_oneof![tricky(), any::<String>()], n in 1usize..5, ids in 0usize..4,
    ) {
        if let Ok(j) = parse_judgements(&s, n, ids) {
            prop_assert_eq!(j.len(), n);
            for d in j {
                match d {
                    Judgement::Add | Judgement::None(None) => {}
                    Judgement::Update(i) | Judgement::Delete(i) | Judgement::None(Some(i)) => {
                        prop_assert!((1..=ids).contains(&i), "id {} of {}", i, ids);
                    }
                }
            }
        }
    }

    #[test]
    fn pii_redaction_is_stable_and_reported(s in prop_oneof![tricky(), any::<String>()]) {
        match pii::filter(&s, PiiPolicy::Redact) {
            Filtered::Keep { text, redacted } => {
                prop_assert_eq!(redacted.is_empty(), text == s);
                prop_assert_eq!(text.matches("[REDACTED:").count() - s.matches("[REDACTED:").count(), redacted.len());
                // Nothing left to find in what was kept, other than what the input held
                // next to the replaced parts: a second pass changes nothing new.
                if let Filtered::Keep { text: again, .. } = pii::filter(&text, PiiPolicy::Redact) {
                    prop_assert_eq!(again.matches("[REDACTED:").count() >= text.matches("[REDACTED:").count(), true);
                }
            }
            Filtered::Rejected(k) => prop_assert!(false, "redact rejected: {:?}", k),
        }
        let found = pii::find(&s);
        for w in found.windows(2) {
            prop_assert!(w[0].1 <= w[1].0, "overlapping findings {:?}", found);
        }
        for (a, b, _) in &found {
            prop_assert!(s.is_char_boundary(*a) && s.is_char_boundary(*b));
        }
        match pii::filter(&s, PiiPolicy::Reject) {
            Filtered::Rejected(k) => prop_assert_eq!(k.len(), found.len()),
            Filtered::Keep { text, .. } => { prop_assert!(found.is_empty()); prop_assert_eq!(text, s); }
        }
    }
}
