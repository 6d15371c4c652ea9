//! `--dump-corpus`: everything an offline experiment on the messages corpus needs.
//!
//! One JSON line per turn (`kind: "turn"`: `sample`, dia_id `d`, `session`, `content` as
//! sent, `doc` the vector of its embedding document — the turn after the two before it in
//! its session, `pipeline::messages::document_of` — and `alone` the vector of the turn by
//! itself) and one per question (`kind: "q"`: `sample`, `q`, `cat`, `ev`, `qv` the query
//! vector, `text` the store's keyword list 200 deep as `[dia_id, score]`), for experiments on
//! candidate generation that the fused hits of `--dump-hits` cannot answer.

use std::io::Write;
use std::path::Path;

use engram_core::model::UserId;
use engram_core::pipeline::messages::document_of;
use engram_core::store::TranscriptFilter;

use super::{Conversation, Ctx, principal};

/// Candidates of the dumped keyword list.
const DEEP: usize = 200;

fn rounded(v: &[f32]) -> Vec<f64> {
    v.iter().map(|x| (f64::from(*x) * 1e5).round() / 1e5).collect()
}

pub async fn run(ctx: &Ctx<'_>, path: &Path) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (c, pristine) in ctx.convs.iter().zip(ctx.pristine) {
        turns(ctx, c, &mut f).await?;
        let (_tmp, engine) = pristine.open_copy(ctx.scratch, ctx.embedder, ctx.cfg.clone()).await?;
        let store = engine.services().store().clone();
        let tenant = principal().tenant;
        let filter = TranscriptFilter {
            user: UserId::parse(c.sample_id.clone())?,
            since: None,
            until: None,
            pooled: false,
        };
        let texts: Vec<String> = c.queries.iter().map(|q| q.text.clone()).collect();
        let qvs = ctx.embedder.embed(&texts).await?;
        let names: Vec<String> = c
            .messages
            .iter()
            .filter_map(|m| engram_core::speaker::label(&m.plain).map(str::to_string))
            .collect();
        let unnamed: Vec<String> = texts.iter().map(|t| without(t, &names)).collect();
        let uvs = ctx.embedder.embed(&unnamed).await?;
        for ((q, qv), uv) in c.queries.iter().zip(qvs).zip(uvs) {
            let list = store.text_search_messages(&tenant, &filter, &q.text, DEEP).await?;
            let ids: Vec<_> = list.iter().map(|(id, _)| *id).collect();
            let rows = store.get_messages(&tenant, &ids).await?;
            let text: Vec<serde_json::Value> = list
                .iter()
                .filter_map(|(id, s)| {
                    let m = rows.iter().find(|m| m.id == *id)?;
                    let d = m.metadata.get("dia_id")?.as_str()?;
                    Some(serde_json::json!([d, s]))
                })
                .collect();
            let line = serde_json::json!({"kind": "q", "sample": c.sample_id, "q": q.text,
                "cat": q.category, "ev": q.evidence, "qv": rounded(&qv), "uv": rounded(&uv), "text": text});
            writeln!(f, "{line}")?;
        }
    }
    f.flush()?;
    Ok(())
}

async fn turns(ctx: &Ctx<'_>, c: &Conversation, f: &mut impl Write) -> anyhow::Result<()> {
    let mut docs = Vec::new();
    let mut alone = Vec::new();
    let mut bare = Vec::new();
    let strip = |t: &str| match engram_core::speaker::label(t) {
        Some(l) => t[l.len() + 2..].to_string(),
        None => t.to_string(),
    };
    for (i, m) in c.messages.iter().enumerate() {
        let before: Vec<&str> = (i.saturating_sub(2)..i)
            .filter(|&j| c.messages[j].session == m.session)
            .map(|j| c.messages[j].plain.as_str())
            .collect();
        docs.push(document_of(&before, &m.plain));
        alone.push(m.plain.clone());
        let stripped: Vec<String> = before.iter().map(|t| strip(t)).collect();
        let refs: Vec<&str> = stripped.iter().map(String::as_str).collect();
        bare.push(document_of(&refs, &strip(&m.plain)));
    }
    let dv = ctx.embedder.embed(&docs).await?;
    let av = ctx.embedder.embed(&alone).await?;
    let bv = ctx.embedder.embed(&bare).await?;
    for (i, m) in c.messages.iter().enumerate() {
        let line = serde_json::json!({"kind": "turn", "sample": c.sample_id, "d": c.turns[i].0,
            "session": m.session, "date": m.date, "content": m.plain,
            "doc": rounded(&dv[i]), "alone": rounded(&av[i]), "bare": rounded(&bv[i])});
        writeln!(f, "{line}")?;
    }
    Ok(())
}

/// `query` without the speakers' names (and their possessive `'s`).
fn without(query: &str, names: &[String]) -> String {
    query
        .split(' ')
        .filter(|w| {
            let w = w.trim_end_matches(|c: char| !c.is_alphanumeric());
            let w = w.strip_suffix("'s").unwrap_or(w);
            !names.iter().any(|n| n == w)
        })
        .collect::<Vec<_>>()
        .join(" ")
}
