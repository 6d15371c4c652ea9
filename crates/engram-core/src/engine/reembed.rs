//! Re-embedding every row of a store after a model change.

use std::sync::Arc;

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::pipeline::messages::embed_conversations;
use crate::store::Store;

use super::{Engine, ReembedReport};

impl Engine {
    /// Re-embed every memory, transcript message and summary of every tenant with `embedder`
    /// (after a model change; messages appended before message embeddings existed are
    /// embedded too), then record the new embedding space. Resumable: rows already carrying
    /// the new model's vector are skipped, and the space changes only once every row is
    /// done. Run it with no server on the store. Returns the numbers of rows embedded;
    /// `progress` gets the running totals after every batch.
    pub async fn reembed(
        store: &Arc<dyn Store>,
        embedder: &Arc<dyn Embedder>,
        batch: usize,
        progress: &(dyn Fn(&ReembedReport) + Send + Sync),
    ) -> Result<ReembedReport> {
        let model = embedder.model_id().to_string();
        let mut report = ReembedReport::default();
        // Run with no server: no request to give way to.
        let idle = crate::priority::RequestsInFlight::default();
        for tenant in store.list_tenants().await? {
            loop {
                let rows = store.rows_needing_vectors(&tenant, &model, batch.max(1)).await?;
                if rows.is_empty() {
                    break;
                }
                let texts: Vec<String> = rows.iter().map(|(_, c)| c.clone()).collect();
                let vectors = embedder.embed_background(&texts).await?;
                check(embedder, rows.len(), &vectors)?;
                report.memories += rows.len();
                store
                    .set_vectors(
                        &tenant,
                        &model,
                        rows.into_iter().map(|(id, _)| id).zip(vectors).collect(),
                    )
                    .await?;
                progress(&report);
            }
            loop {
                let rows = store.summaries_needing_vectors(&tenant, &model, batch.max(1)).await?;
                if rows.is_empty() {
                    break;
                }
                let texts: Vec<String> = rows.iter().map(|(_, c)| c.clone()).collect();
                let vectors = embedder.embed_background(&texts).await?;
                check(embedder, rows.len(), &vectors)?;
                report.summaries += rows.len();
                let rows = rows.into_iter().map(|(id, _)| id).zip(vectors).collect();
                store.set_summary_vectors(&tenant, &model, rows).await?;
                progress(&report);
            }
            loop {
                let convs =
                    store.conversations_needing_message_vectors(&tenant, &model, 100).await?;
                if convs.is_empty() {
                    break;
                }
                let mut n = 0;
                for group in convs.chunks(crate::jobs::LANE_JOBS) {
                    let group: Vec<_> = group.iter().map(|c| (tenant.clone(), c.clone())).collect();
                    for r in embed_conversations(store, embedder, &idle, &group).await {
                        n += r?;
                    }
                }
                if n == 0 {
                    break; // nothing embeddable left (cannot loop forever)
                }
                report.messages += n;
                progress(&report);
            }
        }
        store.reset_embedding_space(&model, embedder.dims()).await?;
        Ok(report)
    }
}

/// Refuse vectors of the wrong count or dimension.
fn check(embedder: &Arc<dyn Embedder>, rows: usize, vectors: &[Vec<f32>]) -> Result<()> {
    if vectors.len() != rows || vectors.iter().any(|v| v.len() != embedder.dims()) {
        return Err(Error::internal("embedder returned vectors of the wrong count or dimension"));
    }
    Ok(())
}
