//! The [`engram_core::store::SummaryStore`] methods that are the same statements on both
//! backends: writing a summary under its claim, reading summaries, their sources and a
//! conversation's levels. Search and vectors go through [`super::store::Native`] with the
//! messages' code ([`super::store::Transcript`]).

use engram_core::error::{Error, Result};
use engram_core::model::{ConversationId, Summary, SummaryId, TenantId};
use engram_core::store::{NewSummary, SummaryClaim, TranscriptFilter};
use uuid::Uuid;

use super::Arg::{Id, Int, OptId, OptText, OptTs, OptVector, Owned, Text, Ts};
use super::rows::{self, Columns};
use super::{Arg, Backend, limit};

/// A summary's columns but the backend's own ([`Backend::summary_index`]).
const INSERT_COLS: &str = "tenant_id, id, user_id, conversation_id, parent_id, depth, kind, \
     content, message_count, earliest_at, latest_at, embedding, embedding_model, model, created_at";

/// Write a summary, its sources and vector in one transaction if its claim holds.
pub(crate) async fn insert<B: Backend>(b: &B, tenant: &TenantId, new: &NewSummary) -> Result<bool> {
    let s = &new.summary;
    let t = tenant.as_str();
    let mut tx = b.begin_write().await?;
    // The claim first: it locks what the summary takes (the conversation row, or the
    // children), so a second run waits for the first and then finds the claim gone.
    let claimed = match new.claim {
        SummaryClaim::Messages { after_seq, through_seq } => {
            B::tx_run(
                &mut tx,
                "UPDATE conversations SET summarized_seq = ? \
             WHERE tenant_id = ? AND id = ? AND summarized_seq = ?",
                &[Int(through_seq), Text(t), Text(s.conversation_id.as_str()), Int(after_seq)],
            )
            .await
            .map_err(B::fault)?
                == 1
        }
        SummaryClaim::Children => {
            let sql = format!(
                "UPDATE summaries SET parent_id = ? WHERE tenant_id = ? AND parent_id IS NULL \
                 AND conversation_id = ? AND id{}",
                B::IN_LIST
            );
            let args = [
                Id(s.id.0),
                Text(t),
                Text(s.conversation_id.as_str()),
                Arg::Ids(new.sources.clone()),
            ];
            let n = B::tx_run(&mut tx, &sql, &args).await.map_err(B::fault)?;
            n == new.sources.len() as u64
        }
    };
    if !claimed {
        return Ok(false); // dropped: rolls back
    }
    let (cols, values, index) = B::summary_index(&s.content);
    let marks = vec!["?"; INSERT_COLS.split(", ").count()].join(", ");
    let sql = format!("INSERT INTO summaries ({INSERT_COLS}{cols}) VALUES ({marks}{values})");
    let (model, vector) = match &new.embedding {
        Some((m, v)) => (Some(m.as_str()), Some(v.as_slice())),
        None => (None, None),
    };
    let mut args = vec![
        Text(t),
        Id(s.id.0),
        Text(s.user_id.as_str()),
        Text(s.conversation_id.as_str()),
        OptId(s.parent_id.map(|p| p.0)),
        Int(s.depth),
        Text(s.kind.as_str()),
        Text(&s.content),
        Int(s.message_count),
        OptTs(Some(s.earliest_at)),
        OptTs(Some(s.latest_at)),
        OptVector(vector),
        OptText(model),
        OptText(s.model.as_deref()),
        Ts(s.created_at),
    ];
    args.extend(index);
    B::tx_run(&mut tx, &sql, &args).await.map_err(B::fault)?;
    for (i, source) in new.sources.iter().enumerate() {
        B::tx_run(
            &mut tx,
            "INSERT INTO summary_sources (tenant_id, summary_id, source_id, ordinal) VALUES (?, ?, ?, ?)",
            &[Text(t), Owned(s.id.to_string()), Owned(source.to_string()), Int(i as i64)],
        )
        .await
        .map_err(B::fault)?;
    }
    B::commit(tx).await?;
    Ok(true)
}

pub(crate) async fn get<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: SummaryId,
) -> Result<Option<Summary>> {
    let sql = "SELECT * FROM summaries WHERE tenant_id = ? AND id = ?";
    let row = b.read_opt(sql, &[Text(tenant.as_str()), Id(id.0)]).await?;
    row.as_ref().map(rows::summary).transpose()
}

pub(crate) async fn get_many<B: Backend>(
    b: &B,
    tenant: &TenantId,
    ids: &[SummaryId],
) -> Result<Vec<Summary>> {
    if ids.is_empty() {
        return Ok(vec![]);
    }
    let ids = Arg::Ids(ids.iter().map(|i| i.0).collect());
    super::by_ids(b, "SELECT * FROM summaries", tenant.as_str(), ids, rows::summary).await
}

pub(crate) async fn sources<B: Backend>(
    b: &B,
    tenant: &TenantId,
    id: SummaryId,
) -> Result<Vec<Uuid>> {
    let sql = "SELECT source_id FROM summary_sources WHERE tenant_id = ? AND summary_id = ? \
               ORDER BY ordinal";
    let rows = b.read_all(sql, &[Text(tenant.as_str()), Owned(id.to_string())]).await?;
    rows.iter()
        .map(|r| {
            let s = r.text("source_id")?;
            Uuid::parse_str(&s)
                .map_err(|_| Error::internal(format!("summary source '{s}' is not a UUID")))
        })
        .collect()
}

pub(crate) async fn of_conversation<B: Backend>(
    b: &B,
    tenant: &TenantId,
    conversation: &ConversationId,
    depth: Option<i64>,
    unparented: bool,
) -> Result<Vec<Summary>> {
    let mut sql = "SELECT * FROM summaries WHERE tenant_id = ? AND conversation_id = ?".to_string();
    let mut args = vec![Text(tenant.as_str()), Text(conversation.as_str())];
    if let Some(d) = depth {
        sql.push_str(" AND depth = ?");
        args.push(Int(d));
    }
    if unparented {
        sql.push_str(" AND parent_id IS NULL");
    }
    sql.push_str(" ORDER BY earliest_at, depth, id");
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(rows::summary).collect()
}

/// [`SummaryStore::summaries_in`].
///
/// [`SummaryStore::summaries_in`]: engram_core::store::SummaryStore::summaries_in
pub(crate) async fn in_window<B: Backend>(
    b: &B,
    tenant: &TenantId,
    f: &TranscriptFilter,
    n: usize,
) -> Result<Vec<Summary>> {
    let mut sql = "SELECT * FROM summaries WHERE tenant_id = ? AND user_id = ?".to_string();
    let mut args = vec![Text(tenant.as_str()), Text(f.user.as_str())];
    if let Some(t) = f.since {
        sql.push_str(" AND latest_at >= ?");
        args.push(Ts(t));
    }
    if let Some(t) = f.until {
        sql.push_str(" AND earliest_at < ?");
        args.push(Ts(t));
    }
    sql.push_str(&format!(
        " ORDER BY depth, latest_at - earliest_at, earliest_at, id LIMIT {}",
        limit(n)
    ));
    let rows = b.read_all(&sql, &args).await?;
    rows.iter().map(rows::summary).collect()
}

pub(crate) async fn needing_vectors<B: Backend>(
    b: &B,
    tenant: &TenantId,
    model_id: &str,
    n: usize,
) -> Result<Vec<(SummaryId, String)>> {
    let sql = format!(
        "SELECT id, content FROM summaries WHERE tenant_id = ? \
         AND (embedding IS NULL OR embedding_model IS DISTINCT FROM ?) ORDER BY id LIMIT {}",
        limit(n)
    );
    let rows = b.read_all(&sql, &[Text(tenant.as_str()), Text(model_id)]).await?;
    rows.iter().map(|r| Ok((SummaryId(r.id("id")?), r.text("content")?))).collect()
}
