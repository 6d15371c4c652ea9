//! The prompts, kept as text files next to this module so they read as prose and diff well.

/// Pass 1 (fast tier). `{date}` and `{weekday}` are the observation date.
pub const EXTRACT: &str = include_str!("prompts/extract.txt");
/// Pass 2 (main tier).
pub const CONSOLIDATE: &str = include_str!("prompts/consolidate.txt");
/// Rolling summary (main tier).
pub const SUMMARY: &str = include_str!("prompts/summary.txt");
/// Tool-call synthesis (fast tier).
pub const TOOL_CALL: &str = include_str!("prompts/tool_call.txt");

/// The extraction prompt for an observation date.
pub fn extraction(custom: Option<&str>, date: time::Date) -> String {
    let d = format!("{:04}-{:02}-{:02}", date.year(), u8::from(date.month()), date.day());
    custom
        .unwrap_or(EXTRACT)
        .replace("{date}", &d)
        .replace("{weekday}", &date.weekday().to_string())
}
