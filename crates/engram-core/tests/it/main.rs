//! Property tests of the engine's parsers of hostile input (issue 10): LLM output and PII
//! detection never panic, whatever they are given, and keep their promises on any input.

mod hostile;
