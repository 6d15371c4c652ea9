//! Stage 0 of extraction: the agent's memory policy (is memory on, when to extract, the
//! token budget, a custom prompt, the PII policy, the dedup threshold, per-agent models, the
//! compaction threshold), parsed and validated from the agent's `settings` JSON. The REST and
//! MCP agent settings are checked with the same parser, so what the API accepts is what the
//! pipeline runs.

use super::pii::PiiPolicy;
use crate::error::{Error, JobError};
use crate::model::{Agent, AgentId, TenantId};
use crate::services::Services;

/// When an agent's conversations are extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtractionMode {
    /// After every appended turn.
    PostTurn,
    /// After `min_turns` user turns since the last extraction, or when a reply is rated.
    Batched {
        min_turns: i64,
    },
    Off,
}

/// An agent's memory settings, read from its `settings` JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryPolicy {
    pub memory_enabled: bool,
    pub mode: ExtractionMode,
    pub max_tokens: u32,
    pub prompt: Option<String>,
    pub pii: PiiPolicy,
    pub dedup_threshold: f32,
    /// Per-agent models (`settings.llm.model` / `settings.llm.fast_model`); None: the
    /// process-wide ones.
    pub model: Option<String>,
    pub fast_model: Option<String>,
    /// Unsummarized messages a conversation keeps before the compactor summarizes its oldest
    /// into the summary DAG (`settings.compaction.threshold`; 0 turns compaction off).
    pub compaction_threshold: i64,
}

/// The compaction threshold of an agent that sets none.
pub const DEFAULT_COMPACTION_THRESHOLD: i64 = 100;

impl MemoryPolicy {
    /// Parse and validate `settings` (`{"extraction": {"mode", "min_turns",
    /// "max_tokens_per_extraction", "prompt"}, "pii_policy"}`).
    pub fn from_settings(
        memory_enabled: bool,
        dedup_threshold: f32,
        settings: &serde_json::Value,
    ) -> Result<Self, Error> {
        let ex = settings.get("extraction").cloned().unwrap_or(serde_json::Value::Null);
        if !ex.is_null() && !ex.is_object() {
            return Err(Error::invalid(
                "settings.extraction",
                "settings.extraction must be an object",
            ));
        }
        // A number of `ex` within `lo..=hi`; absent or null: `default`. Checked whatever
        // the mode, so what is stored is always valid.
        let int = |key: &str, lo: i64, hi: i64, default: i64| -> Result<i64, Error> {
            match ex.get(key) {
                None | Some(serde_json::Value::Null) => Ok(default),
                Some(v) => v.as_i64().filter(|n| (lo..=hi).contains(n)).ok_or_else(|| {
                    Error::invalid(
                        format!("settings.extraction.{key}"),
                        format!("{key} must be an integer from {lo} to {hi}"),
                    )
                }),
            }
        };
        let min_turns = int("min_turns", 1, 1000, 3)?;
        let max_tokens = int("max_tokens_per_extraction", 64, 32_000, 1024)?;
        let mode = match ex.get("mode") {
            None | Some(serde_json::Value::Null) => ExtractionMode::PostTurn,
            Some(v) => match v.as_str() {
                Some("post-turn") => ExtractionMode::PostTurn,
                Some("batched") => ExtractionMode::Batched { min_turns },
                Some("off") => ExtractionMode::Off,
                _ => {
                    return Err(Error::invalid(
                        "settings.extraction.mode",
                        format!("unknown extraction mode {v}; expected post-turn, batched or off"),
                    ));
                }
            },
        };
        let prompt = match ex.get("prompt") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(_) => {
                return Err(Error::invalid(
                    "settings.extraction.prompt",
                    "prompt must be a non-empty string or null",
                ));
            }
        };
        let pii = match settings.get("pii_policy") {
            None | Some(serde_json::Value::Null) => PiiPolicy::default(),
            Some(v) => v.as_str().and_then(PiiPolicy::parse).ok_or_else(|| {
                Error::invalid("settings.pii_policy", "pii_policy must be allow, redact or reject")
            })?,
        };
        let llm = settings.get("llm").cloned().unwrap_or(serde_json::Value::Null);
        if !llm.is_null() && !llm.is_object() {
            return Err(Error::invalid("settings.llm", "settings.llm must be an object"));
        }
        let name = |k: &str| -> Result<Option<String>, Error> {
            match llm.get(k) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(serde_json::Value::String(s)) if !s.trim().is_empty() => {
                    Ok(Some(s.trim().to_string()))
                }
                Some(_) => Err(Error::invalid(
                    format!("settings.llm.{k}"),
                    format!("settings.llm.{k} must be a model name"),
                )),
            }
        };
        let model = name("model")?;
        let fast_model = name("fast_model")?;
        let compaction = settings.get("compaction").cloned().unwrap_or(serde_json::Value::Null);
        if !compaction.is_null() && !compaction.is_object() {
            return Err(Error::invalid(
                "settings.compaction",
                "settings.compaction must be an object",
            ));
        }
        let compaction_threshold = match compaction.get("threshold") {
            None | Some(serde_json::Value::Null) => DEFAULT_COMPACTION_THRESHOLD,
            Some(v) => {
                v.as_i64().filter(|n| *n == 0 || (10..=1_000_000).contains(n)).ok_or_else(|| {
                    Error::invalid(
                        "settings.compaction.threshold",
                        "threshold must be 0 (off) or 10 to 1000000 messages",
                    )
                })?
            }
        };
        Ok(MemoryPolicy {
            memory_enabled,
            mode,
            max_tokens: max_tokens as u32,
            prompt,
            pii,
            dedup_threshold,
            model,
            fast_model,
            compaction_threshold,
        })
    }

    /// Refuse names the sections engram reads (`extraction`, `llm`, `compaction`) do not
    /// know (a misspelled `"thresh"` was stored and silently had no effect). Other top-level
    /// names are the client's own and kept as given. Only when settings are saved: an agent
    /// stored by another version keeps its policy.
    pub fn check_names(settings: &serde_json::Value) -> Result<(), Error> {
        const SECTIONS: &[(&str, &[&str])] = &[
            ("extraction", &["mode", "min_turns", "max_tokens_per_extraction", "prompt"]),
            ("llm", &["model", "fast_model"]),
            ("compaction", &["threshold"]),
        ];
        for (section, known) in SECTIONS {
            let names = settings.get(*section).and_then(serde_json::Value::as_object);
            if let Some(key) = names.and_then(|o| o.keys().find(|k| !known.contains(&k.as_str()))) {
                return Err(Error::invalid(
                    format!("settings.{section}.{key}"),
                    format!(
                        "unknown setting 'settings.{section}.{key}'; expected one of: {}",
                        known.join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The policy of an agent (defaults for no agent or an agent without settings).
    pub fn of(agent: Option<&Agent>, default_threshold: f32) -> Self {
        match agent {
            Some(a) => Self::from_settings(a.memory_enabled, a.dedup_threshold, &a.settings)
                .unwrap_or_else(|_| {
                    Self::from_settings(a.memory_enabled, a.dedup_threshold, &serde_json::json!({}))
                        .expect("defaults parse")
                }),
            None => Self::from_settings(true, default_threshold, &serde_json::json!({}))
                .expect("defaults parse"),
        }
    }
}

impl Services {
    /// The policy of `agent` (one agent read; defaults without an agent).
    pub(super) async fn agent_policy(
        &self,
        tenant: &TenantId,
        agent: Option<&AgentId>,
    ) -> Result<MemoryPolicy, JobError> {
        let row = match agent {
            Some(a) => self.store().get_agent(tenant, a).await?,
            None => None,
        };
        Ok(MemoryPolicy::of(row.as_ref(), self.config().dedup_threshold))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_reject_nonsense() {
        let p = MemoryPolicy::from_settings(true, 0.9, &serde_json::json!({ "extraction": { "mode": "batched", "min_turns": 4 }, "pii_policy": "reject" })).unwrap();
        assert_eq!((p.mode, p.pii), (ExtractionMode::Batched { min_turns: 4 }, PiiPolicy::Reject));
        assert!(
            MemoryPolicy::from_settings(
                true,
                0.9,
                &serde_json::json!({ "extraction": { "mode": "sometimes" } })
            )
            .is_err()
        );
        assert!(
            MemoryPolicy::from_settings(true, 0.9, &serde_json::json!({ "pii_policy": "shred" }))
                .is_err()
        );
        assert!(
            MemoryPolicy::from_settings(
                true,
                0.9,
                &serde_json::json!({ "extraction": { "max_tokens_per_extraction": 5 } })
            )
            .is_err()
        );
    }

    #[test]
    fn an_agent_with_broken_settings_runs_on_the_defaults_it_can() {
        let a = Agent {
            tenant_id: TenantId::default_tenant(),
            id: AgentId::parse("a").unwrap(),
            memory_enabled: false,
            cluster_id: None,
            dedup_threshold: 0.9,
            settings: serde_json::json!({ "extraction": { "mode": "sometimes" } }),
            created_at: time::OffsetDateTime::UNIX_EPOCH,
            updated_at: time::OffsetDateTime::UNIX_EPOCH,
        };
        let p = MemoryPolicy::of(Some(&a), 0.9);
        assert!(!p.memory_enabled, "the agent's switch is kept");
        assert_eq!(p.mode, ExtractionMode::PostTurn);
        let none = MemoryPolicy::of(None, 0.8);
        assert!(none.memory_enabled);
        assert!((none.dedup_threshold - 0.8).abs() < f32::EPSILON);
    }
}
