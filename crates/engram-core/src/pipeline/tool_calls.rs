//! Tool-call synthesis: a tool-call message stored without text gets a one-sentence
//! description from the fast-tier LLM, so keyword and vector search can find it; the
//! message is then embedded like any other.

use super::prompts::{self, transcript};
use crate::error::JobError;
use crate::llm::{ChatMessage, ChatRequest, ChatRole, Tier};
use crate::metrics::ExtractionReport;
use crate::model::Job;
use crate::services::Services;

impl Services {
    /// Give an empty tool-call message a one-sentence description, so search can find it.
    pub async fn run_tool_synthesis(&self, job: &Job) -> Result<(), JobError> {
        let id = job.payload.get("message_id").and_then(|v| v.as_str()).unwrap_or_default();
        let id = crate::model::MessageId::parse(id)
            .map_err(|e| JobError::bug(format!("bad message id in job {}: {e}", job.id)))?;
        let Some(msg) = self.store().get_message(&job.tenant_id, id).await? else { return Ok(()) };
        if !msg.content.is_empty() || msg.tool_name.is_none() {
            return Ok(()); // already done (idempotent)
        }
        let policy = self.agent_policy(&job.tenant_id, msg.agent_id.as_ref()).await?;
        let mut report = ExtractionReport::default();
        let req = ChatRequest {
            tier: Tier::Fast,
            model: policy.fast_model.clone(),
            system: prompts::TOOL_CALL.to_string(),
            messages: vec![ChatMessage {
                role: ChatRole::User,
                content: transcript(std::slice::from_ref(&msg)),
            }],
            max_tokens: 100,
            json: false,
            temperature: 0.0,
        };
        let sentence = self.call(req, "synthesize", &mut report).await?;
        let sentence = sentence.trim();
        if sentence.is_empty() {
            return Err(JobError::runtime("the LLM returned an empty description"));
        }
        if self.store().set_message_content(&job.tenant_id, id, sentence).await? {
            // The message now has text to embed.
            self.enqueue_message_embedding(&job.tenant_id, &msg.user_id, &msg.conversation_id)
                .await?;
        }
        Ok(())
    }
}
