//! The speakers a search names (`crate::speaker`): the query's vectors, one of them with the
//! names of the user's recorded speakers mostly left out for ranking messages, and the
//! messages' semantic support read against the query as asked.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::model::{Message, MessageId};
use crate::retrieval::Explain;
use crate::speaker;

use super::scope::View;
use super::{Engine, SearchInput, SearchMode, SearchSource};

impl Engine {
    /// The query's vector (none in a keyword or literal mode) and, for the messages' list of
    /// a user whose transcripts name their speakers (`crate::speaker`) when the query names
    /// some, a vector with the names mostly left out ([`speaker::blend`]): who is asked about
    /// is the speaker factor's business, and a name in the vector pulls in every message by
    /// or about that person whatever it says. With the latter comes the query's text
    /// without the names.
    pub(super) async fn query_vectors(
        &self,
        v: &View,
        input: &SearchInput,
        query: &str,
    ) -> Result<(Option<Vec<f32>>, Option<(Vec<f32>, String)>)> {
        if !matches!(input.mode, SearchMode::Hybrid | SearchMode::VectorOnly) {
            return Ok((None, None));
        }
        // The speakers are recorded per user, across every conversation: a caller limited to
        // one agent's pool searches with the query as written, so that nothing of another
        // pool's transcript (a name, through `explain.speakers` or the order) shows through.
        // A query with no capitalised word names nobody: no store read.
        let may_name = !speaker::query_words(query).is_empty();
        let unnamed = match &v.user {
            Some(user)
                if may_name
                    && input.sources.contains(&SearchSource::Messages)
                    && v.pool.is_none() =>
            {
                let speakers = self.svc.store.speakers(&v.tenant, user).await?;
                speaker::without_names(query, &speakers)
            }
            _ => None,
        };
        let mut texts = vec![query.to_string()];
        texts.extend(unnamed.clone());
        let mut vectors = self.svc.embedder.embed(&texts).await?.into_iter();
        let qv = vectors.next().ok_or_else(|| Error::internal("embedder returned no vector"))?;
        let blended = vectors.next().zip(unnamed).map(|(u, text)| (speaker::blend(&qv, &u), text));
        Ok((Some(qv), blended))
    }

    /// The messages' list was ranked by a vector with the speakers' names mostly left out;
    /// their semantic support (`explain.vector_similarity`, and so the score and
    /// `min_score`) is read against the query as asked, whatever the user's transcripts
    /// record: a message scores the same whether or not the query's names are known
    /// speakers, and a message by the person asked about keeps the support of their name.
    pub(super) async fn similarity_as_asked(
        &self,
        v: &View,
        asked: &[f32],
        found: &mut [(Message, Explain)],
    ) -> Result<()> {
        let ids: Vec<MessageId> = found
            .iter()
            .filter(|(_, e)| e.vector_similarity.is_some())
            .map(|(m, _)| m.id)
            .collect();
        let model = self.svc.embedder.model_id();
        let sims: HashMap<MessageId, f32> = self
            .svc
            .store
            .message_similarities(&v.tenant, model, asked, &ids)
            .await?
            .into_iter()
            .collect();
        for (m, e) in found.iter_mut() {
            if let Some(s) = sims.get(&m.id) {
                e.vector_similarity = Some(*s);
            }
        }
        Ok(())
    }
}
