//! The write path of automatic memory (SPEC §2): cursor, extraction (pass 1), PII filter,
//! embedding, consolidation (pass 2), persistence; plus rolling summaries and tool-call
//! synthesis, and the background embedding of transcript messages (`messages.rs`). Entry
//! points are the `Engine::run_*` job handlers in `extract.rs`.

pub mod extract;
pub mod messages;
pub mod parse;
pub mod pii;
pub mod prompts;
