//! Consolidation (pass 2), the part without I/O: the prompt that shows the judge each new
//! fact with its stored neighbours under short integer ids (the LLM never sees a real id),
//! and the plan that turns the judge's decisions into adds, supersessions, forgets and
//! confirmations. `extract.rs` does the I/O around it (neighbour search, the LLM call, the
//! one transaction).
//!
//! Rules of the plan: a candidate without a decision is added (only candidates with stored
//! neighbours are judged); each stored fact is changed at most once per window (the first
//! decision that names it wins; later ones naming it are dropped); a fact is confirmed at
//! most once and never when this window also changes it.

use std::collections::HashMap;

use super::parse::Judgement;
use crate::model::MemoryId;

/// The judge's prompt for `to_judge` (candidate index, its neighbours as `(id, content)`) and
/// the real id behind each short id (`short_ids[n - 1]` is `[n]`).
pub fn prompt(
    to_judge: &[(usize, Vec<(MemoryId, String)>)],
    contents: &[String],
) -> (String, Vec<MemoryId>) {
    let mut short_ids: Vec<MemoryId> = Vec::new();
    let mut prompt = String::new();
    for (n, (i, neighbours)) in to_judge.iter().enumerate() {
        prompt.push_str(&format!("NEW FACT {}: {}\nEXISTING FACTS:\n", n + 1, contents[*i]));
        for (id, content) in neighbours {
            let short = match short_ids.iter().position(|s| s == id) {
                Some(p) => p + 1,
                None => {
                    short_ids.push(*id);
                    short_ids.len()
                }
            };
            prompt.push_str(&format!("[{short}] {content}\n"));
        }
        prompt.push('\n');
    }
    (prompt, short_ids)
}

/// What a window's consolidation decided, before anything is written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Candidates stored as new facts.
    pub adds: Vec<usize>,
    /// `(candidate, old fact)`: the candidate supersedes the old fact.
    pub updates: Vec<(usize, MemoryId)>,
    /// Old facts forgotten (superseded by nothing).
    pub deletes: Vec<MemoryId>,
    /// Old facts restated (confirmed), beyond those already confirmed.
    pub confirms: Vec<MemoryId>,
}

/// Turn decisions into a plan. `accepted`: candidates that passed the in-window and stored
/// duplicate checks, in order; `judgements`: the judge's decision per candidate index;
/// `short_ids`: see [`prompt`] (every short id in a judgement is within it: the parser
/// checks); `confirmed`: facts already confirmed by the duplicate check.
pub fn plan(
    accepted: &[usize],
    judgements: &HashMap<usize, Judgement>,
    short_ids: &[MemoryId],
    confirmed: &[MemoryId],
) -> Plan {
    let mut p = Plan::default();
    let mut touched: Vec<MemoryId> = Vec::new();
    let id = |short: usize| short.checked_sub(1).and_then(|s| short_ids.get(s)).copied();
    for &i in accepted {
        match judgements.get(&i).copied().unwrap_or(Judgement::Add) {
            Judgement::Add => p.adds.push(i),
            Judgement::Update(short) => {
                let Some(old) = id(short) else { continue };
                if !touched.contains(&old) {
                    touched.push(old);
                    p.updates.push((i, old));
                }
            }
            Judgement::Delete(short) => {
                let Some(old) = id(short) else { continue };
                if !touched.contains(&old) {
                    touched.push(old);
                    p.deletes.push(old);
                }
            }
            Judgement::None(Some(short)) => {
                let Some(old) = id(short) else { continue };
                if !confirmed.contains(&old) && !p.confirms.contains(&old) {
                    p.confirms.push(old);
                }
            }
            Judgement::None(None) => {}
        }
    }
    // A fact changed in this window is not also confirmed.
    p.confirms.retain(|c| !touched.contains(c));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<MemoryId> {
        (0..n).map(|_| MemoryId::new()).collect()
    }

    #[test]
    fn the_prompt_numbers_each_neighbour_once() {
        let [a, b] = ids(2)[..] else { unreachable!() };
        let contents = vec!["The user lives in Pune.".to_string(), "The user has a cat.".into()];
        let to_judge = vec![
            (0, vec![(a, "The user lives in Mumbai.".to_string()), (b, "The user moved.".into())]),
            (1, vec![(b, "The user moved.".to_string())]),
        ];
        let (text, short) = prompt(&to_judge, &contents);
        assert_eq!(short, [a, b]);
        assert!(text.contains("NEW FACT 1: The user lives in Pune.\nEXISTING FACTS:\n[1] The user lives in Mumbai.\n[2] The user moved.\n"), "{text}");
        assert!(
            text.contains(
                "NEW FACT 2: The user has a cat.\nEXISTING FACTS:\n[2] The user moved.\n"
            ),
            "{text}"
        );
        assert!(!text.contains(&a.to_string()), "a real id reached the prompt");
    }

    #[test]
    fn each_old_fact_changes_once_and_is_not_also_confirmed() {
        let short = ids(3);
        let j: HashMap<usize, Judgement> = [
            (0, Judgement::Update(1)),
            (1, Judgement::Delete(1)),     // the same old fact: dropped
            (2, Judgement::None(Some(1))), // confirms a fact this window changes: dropped
            (3, Judgement::None(Some(2))),
            (4, Judgement::None(Some(2))), // confirmed once
            (5, Judgement::Delete(3)),
            (6, Judgement::None(None)),
        ]
        .into_iter()
        .collect();
        let p = plan(&[0, 1, 2, 3, 4, 5, 6, 7], &j, &short, &[]);
        assert_eq!(p.adds, [7], "no decision: added");
        assert_eq!(p.updates, [(0, short[0])]);
        assert_eq!(p.deletes, [short[2]]);
        assert_eq!(p.confirms, [short[1]]);
    }

    #[test]
    fn already_confirmed_facts_and_unknown_short_ids_are_left_alone() {
        let short = ids(1);
        let j: HashMap<usize, Judgement> =
            [(0, Judgement::None(Some(1))), (1, Judgement::Update(9)), (2, Judgement::Delete(0))]
                .into_iter()
                .collect();
        let p = plan(&[0, 1, 2], &j, &short, &[short[0]]);
        assert_eq!(p, Plan::default());
    }
}
