//! Engine tests: property tests of the parsers of hostile input (issue 10: LLM output and
//! PII detection never panic and keep their promises on any input), and the store calls a
//! request makes (issue 11), counted around the real SQLite store.

mod counting;
mod hostile;
