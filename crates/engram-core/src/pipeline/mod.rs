//! The write path of automatic memory (SPEC §2): cursor, extraction (pass 1), PII filter,
//! embedding, consolidation (pass 2), persistence; plus rolling summaries and tool-call
//! synthesis, and the background embedding of transcript messages (`messages.rs`). Entry
//! points are the `run_*` job handlers (on `Services`) in `extract.rs`; `consolidate.rs` is
//! pass 2 without I/O (prompt and plan), unit-tested.

pub mod consolidate;
pub mod extract;
pub mod messages;
pub mod parse;
pub mod pii;
pub mod prompts;
