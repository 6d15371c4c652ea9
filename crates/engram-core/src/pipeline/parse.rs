//! Robust parsing of LLM output.
//!
//! Models wrap JSON in markdown fences, add a sentence before or after it, return one object
//! instead of an array, wrap the array in `{"facts": [...]}`, quote numbers, or invent
//! categories. All of that is repaired here. What cannot be repaired (no JSON at all, a
//! decision naming an id that was never shown) is an error the job runner retries and then
//! reports; it never panics and never writes half a batch.

use serde_json::Value;

use crate::model::{Category, Importance};

/// A fact proposed by the extractor.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub content: String,
    pub category: Category,
    pub importance: Importance,
}

/// A consolidation decision for one candidate; ids are the short integers shown to the LLM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judgement {
    Add,
    Update(usize),
    Delete(usize),
    /// Already known; the id is the existing fact (if given).
    None(Option<usize>),
}

/// Find the first JSON value in `text` (after stripping fences and leading prose); trailing
/// text is ignored.
pub fn first_json(text: &str) -> Option<Value> {
    let start = text.find(['[', '{'])?;
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) => Some(v),
        // A value that does not parse from the first bracket: try from the next one (e.g. a
        // prose "[note]" before the real array).
        _ => first_json(&text[start + 1..]),
    }
}

/// The complete items of a JSON array that was cut off (an answer that hit the model's
/// output limit: `[{"content": "a"}, {"content": "b", "categ`): those before the cut, from
/// the first `[` of `text`. None when not even one item is whole.
fn complete_items(text: &str) -> Option<Value> {
    let start = text.find('[')?;
    let mut rest = &text[start + 1..];
    let mut items = Vec::new();
    loop {
        rest = rest.trim_start();
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                items.push(v);
                rest = rest[stream.byte_offset()..].trim_start();
            }
            _ => break,
        }
        match rest.strip_prefix(',') {
            Some(r) => rest = r,
            None => break,
        }
    }
    (!items.is_empty()).then_some(Value::Array(items))
}

/// Parse the extractor's answer into candidates. An answer cut off inside its list keeps
/// the facts that were written whole; the one cut is dropped, never completed.
pub fn parse_candidates(text: &str) -> Result<Vec<Candidate>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("the LLM returned an empty answer".into());
    }
    // The value at the first bracket whole, else the whole items of a list cut there, else
    // the first value that parses further on (a prose "[note]" before the list).
    let at_first = || {
        let start = trimmed.find(['[', '{'])?;
        serde_json::Deserializer::from_str(&trimmed[start..]).into_iter::<Value>().next()?.ok()
    };
    let value = at_first()
        .or_else(|| complete_items(trimmed))
        .or_else(|| first_json(trimmed))
        .ok_or_else(|| {
            if trimmed.contains(['[', '{']) {
                format!("the JSON of the LLM answer is cut off or malformed: {}", preview(trimmed))
            } else {
                format!("no JSON in the LLM answer: {}", preview(trimmed))
            }
        })?;
    let items = match value {
        Value::Array(a) => a,
        Value::Object(ref o) => {
            match ["facts", "memories", "items", "results", "data"].iter().find_map(|k| o.get(*k)) {
                Some(Value::Array(a)) => a.clone(),
                _ => vec![value],
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            return Err(format!("the LLM answer is not a list of facts: {}", preview(trimmed)));
        }
    };
    let mut out = Vec::new();
    for item in items {
        let (content, category, importance) = match &item {
            Value::String(s) => (s.clone(), None, None),
            Value::Object(o) => {
                let content = ["content", "fact", "text", "memory"]
                    .iter()
                    .find_map(|k| o.get(*k).and_then(Value::as_str))
                    .unwrap_or_default()
                    .to_string();
                (
                    content,
                    o.get("category").and_then(Value::as_str).map(str::to_string),
                    o.get("importance").cloned(),
                )
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => continue,
        };
        let content = content.trim().to_string();
        if content.is_empty() {
            continue;
        }
        let category = category
            .and_then(|c| Category::parse(c.trim().to_lowercase().as_str()).ok())
            .unwrap_or(Category::General);
        let importance = match importance {
            Some(Value::Number(n)) => {
                n.as_f64().map_or(Importance::DEFAULT, |f| Importance::clamped(f.round() as i64))
            }
            Some(Value::String(s)) => s
                .trim()
                .parse::<f64>()
                .map_or(Importance::DEFAULT, |f| Importance::clamped(f.round() as i64)),
            _ => Importance::DEFAULT,
        };
        if !out.iter().any(|c: &Candidate| c.content == content) {
            out.push(Candidate { content, category, importance });
        }
    }
    Ok(out)
}

/// Parse the consolidator's answer for `n` candidates (numbered from 1) when ids `1..=ids`
/// were shown. Repaired: fences, prose around the JSON, a wrapper object, ids as strings
/// (`"[1]"`), lower case. Never guessed (issue 10): an answer whose JSON is not a list of
/// decision objects (`I think fact 1 is an UPDATE of [1]` holds only `[1]`), an item without
/// a decision, a candidate without a decision, or an id that was never shown is an error,
/// which fails the attempt so the job retries it.
pub fn parse_judgements(text: &str, n: usize, ids: usize) -> Result<Vec<Judgement>, String> {
    let value =
        first_json(text).ok_or_else(|| format!("no JSON in the LLM answer: {}", preview(text)))?;
    let items = match value {
        Value::Array(a) => a,
        Value::Object(ref o) => {
            match ["decisions", "results", "items"].iter().find_map(|k| o.get(*k)) {
                Some(Value::Array(a)) => a.clone(),
                _ => vec![value],
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            return Err(format!("the LLM answer is not a list of decisions: {}", preview(text)));
        }
    };
    let mut out: Vec<Option<Judgement>> = vec![None; n];
    for (pos, item) in items.iter().enumerate() {
        let Value::Object(o) = item else {
            return Err(format!("the LLM answer is not a list of decisions: {}", preview(text)));
        };
        let fact =
            o.get("fact").or_else(|| o.get("candidate")).and_then(as_index).unwrap_or(pos + 1);
        if fact == 0 || fact > n {
            return Err(format!("decision for fact {fact}, but only {n} were given"));
        }
        let Some(decision) = o.get("decision").or_else(|| o.get("event")).and_then(Value::as_str)
        else {
            return Err(format!("the LLM gave no decision for fact {fact}: {}", preview(text)));
        };
        let id = o.get("id").and_then(as_index);
        let check = |id: Option<usize>| -> Result<usize, String> {
            match id {
                Some(i) if (1..=ids).contains(&i) => Ok(i),
                Some(i) => {
                    Err(format!("the LLM named fact id {i}, which was never shown (1..={ids})"))
                }
                None => Err(format!("decision {decision} for fact {fact} names no id")),
            }
        };
        out[fact - 1] = Some(match decision.trim().to_uppercase().as_str() {
            "ADD" => Judgement::Add,
            "UPDATE" => Judgement::Update(check(id)?),
            "DELETE" => Judgement::Delete(check(id)?),
            "NONE" | "NOOP" => Judgement::None(match id {
                Some(_) => Some(check(id)?),
                None => None,
            }),
            other => return Err(format!("unknown decision '{other}'")),
        });
    }
    out.into_iter()
        .enumerate()
        .map(|(i, j)| j.ok_or_else(|| format!("the LLM gave no decision for fact {}", i + 1)))
        .collect()
}

fn as_index(v: &Value) -> Option<usize> {
    match v {
        Value::Number(n) => n.as_u64().map(|u| u as usize),
        Value::String(s) => s.trim().trim_start_matches('[').trim_end_matches(']').parse().ok(),
        Value::Null | Value::Bool(_) | Value::Array(_) | Value::Object(_) => None,
    }
}

fn preview(s: &str) -> String {
    let p: String = s.chars().take(120).collect();
    if p.len() < s.len() { format!("{p}…") } else { p }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(text: &str) -> Vec<String> {
        parse_candidates(text).unwrap().into_iter().map(|c| c.content).collect()
    }

    #[test]
    fn repairs_fences_prose_single_objects_and_wrappers() {
        let fenced = "Sure! Here you go:\n```json\n[{\"content\": \"The user lives in Rome.\", \"category\": \"fact\", \"importance\": 7}]\n```\nHope it helps.";
        assert_eq!(contents(fenced), ["The user lives in Rome."]);
        assert_eq!(
            contents(
                r#"{"content": "The user likes tea.", "category": "preference", "importance": 3}"#
            ),
            ["The user likes tea."]
        );
        assert_eq!(
            contents(r#"{"facts": ["The user has a dog.", "The user has a cat."]}"#),
            ["The user has a dog.", "The user has a cat."]
        );
        assert_eq!(contents("[]"), Vec::<String>::new());
        assert_eq!(contents("Nothing to extract: []"), Vec::<String>::new());
    }

    #[test]
    fn repairs_types_categories_and_importance() {
        let c = parse_candidates(r#"[{"content": " The user swims. ", "category": "Hobby", "importance": "12"}, {"content": "", "importance": 3}, {"fact": "The user is 40.", "category": "FACT", "importance": 0.4}]"#).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].content.as_str(), c[0].category, c[0].importance.get()),
            ("The user swims.", Category::General, 10)
        );
        assert_eq!((c[1].category, c[1].importance.get()), (Category::Fact, 1));
    }

    #[test]
    fn an_answer_cut_off_keeps_its_whole_facts() {
        let cut = r#"[{"content": "The user lives in Rome.", "importance": 7}, "The user has a cat.", {"content": "The user wor"#;
        assert_eq!(contents(cut), ["The user lives in Rome.", "The user has a cat."]);
        let wrapped = r#"```json
{"facts": [{"content": "The user swims."}, {"content": "The user"#;
        assert_eq!(contents(wrapped), ["The user swims."]);
    }

    #[test]
    fn hopeless_output_is_an_error_not_a_panic() {
        assert!(parse_candidates("I cannot help with that.").is_err());
        assert!(parse_candidates("").is_err());
        assert!(parse_candidates("[{\"content\": \"unterminated").is_err());
        let cut =
            r#"Sure! Here are facts: [{"content": "x", "category": "banana", "importance": 99"#;
        assert!(parse_candidates(cut).unwrap_err().contains("cut off"), "a clear message");
        assert!(parse_candidates("42").is_err());
    }

    #[test]
    fn judgements_are_repaired_never_guessed() {
        let j = parse_judgements(
            r#"[{"fact": 2, "decision": "update", "id": "[1]"}, {"fact": 1, "decision": "add"}]"#,
            2,
            1,
        )
        .unwrap();
        assert_eq!(j, [Judgement::Add, Judgement::Update(1)]);
        // Issue 10: prose holding a bracket, a missing decision, an item without one.
        for garbage in [
            "I think fact 1 is an UPDATE of [1]",
            r#"[{"fact": 2, "decision": "update", "id": 1}]"#,
            r#"[{"fact": 1, "id": 1}, {"fact": 2, "decision": "ADD"}]"#,
            r#"["UPDATE", "ADD"]"#,
            r#"{"decision": "ADD"}"#,
        ] {
            assert!(parse_judgements(garbage, 2, 1).is_err(), "{garbage}");
        }
        assert!(parse_judgements(r#"[{"fact": 1, "decision": "UPDATE", "id": 7}]"#, 1, 3).is_err());
        assert!(parse_judgements(r#"[{"fact": 3, "decision": "ADD"}]"#, 2, 3).is_err());
        let j = parse_judgements(
            r#"```[{"fact":1,"decision":"NONE","id":2},{"fact":2,"decision":"DELETE","id":1}]```"#,
            2,
            2,
        )
        .unwrap();
        assert_eq!(j, [Judgement::None(Some(2)), Judgement::Delete(1)]);
    }
}
