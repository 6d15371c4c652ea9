//! `engram export` and `engram import`: the lossless backup file.
//!
//! One JSON document per line: a header (`{"engram_export": 1, "scope": …, "embedding": …}`),
//! then every row of the store, a tenant or a user in the backend-neutral form of
//! `engram_store::backup` (`{"table": …, "row": {…}}`), then an end line with the number of
//! rows (`{"end": {"rows": N}}`), so that a file cut short is refused rather than half
//! restored. An import reads the whole file and checks every line before its first write;
//! rows already present are skipped, so an import can be re-run. The export of an earlier
//! engram (`{"type": "memory", …}` lines: memory rows and their history only) is still
//! read.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::{Context, bail};
use engram_core::engine::Engine;
use engram_core::model::{KeyRole, Principal, TenantId};
use engram_core::store::{BackupRow, BackupScope, RestoreState};
use serde::{Deserialize, Serialize};

use crate::api::dto::{self, ExportLine};
use crate::progress::Progress;

/// The format version written in the header.
const FORMAT: u32 = 1;

/// Rows per restore transaction.
const BATCH: usize = 500;

/// The first line of an export.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    engram_export: u32,
    scope: ScopeDesc,
    /// The vectors' model and dimensions (None: the store held no vectors).
    embedding: Option<Space>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeDesc {
    tenant: Option<String>,
    user: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Space {
    model: String,
    dims: usize,
}

/// The last line of an export.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct End {
    end: EndInfo,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndInfo {
    rows: u64,
}

/// What an import did (`--json`).
#[derive(Debug, Serialize)]
pub struct ImportSummary {
    /// Rows written.
    pub imported: u64,
    /// Rows already present, left as they were.
    pub skipped: u64,
    /// Rows written, per table.
    pub tables: std::collections::BTreeMap<String, u64>,
    /// Rows skipped, per table.
    pub skipped_tables: std::collections::BTreeMap<String, u64>,
    /// API keys not copied because the rows went into another tenant.
    pub keys_not_copied: u64,
}

/// Write the backup of `scope` to `out` (stdout when None).
pub async fn export(engine: &Engine, scope: BackupScope, out: Option<&Path>) -> anyhow::Result<()> {
    let mut w: Box<dyn Write + Send> = match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let (tenant, user) = match &scope {
        BackupScope::Store => (None, None),
        BackupScope::Tenant(t) => (Some(t.to_string()), None),
        BackupScope::User(t, u) => (Some(t.to_string()), Some(u.to_string())),
    };
    let header = Header {
        engram_export: FORMAT,
        scope: ScopeDesc { tenant, user },
        embedding: engine
            .embedding_space()
            .await
            .map_err(crate::api::error::cli_error)?
            .map(|(model, dims)| Space { model, dims }),
    };
    writeln!(w, "{}", serde_json::to_string(&header)?)?;
    // On a terminal only, and never mixed into the export on stdout's terminal.
    let progress = Progress::new("exporting", "rows", None, out.is_none());
    let mut n = 0u64;
    // A reader that stops early (`engram export | head`) ends the export quietly.
    let mut closed = false;
    let mut sink = |row: BackupRow| -> engram_core::Result<()> {
        let line = serde_json::to_string(&row)
            .map_err(|e| engram_core::Error::internal(format!("cannot encode a row: {e}")))?;
        writeln!(w, "{line}").map_err(|e| {
            closed = e.kind() == std::io::ErrorKind::BrokenPipe;
            engram_core::Error::internal(format!("cannot write the export: {e}"))
        })?;
        n += 1;
        if n.is_multiple_of(256) {
            progress.message(format!("{n} rows"));
        }
        Ok(())
    };
    let rows = match engine.backup(&scope, &mut sink).await {
        Ok(rows) => rows,
        Err(_) if closed => return Ok(()),
        Err(e) => return Err(crate::api::error::cli_error(e)),
    };
    let end = writeln!(w, "{}", serde_json::to_string(&End { end: EndInfo { rows } })?)
        .and_then(|()| w.flush());
    match end {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        other => other?,
    }
    progress.finish();
    if out.is_some() {
        eprintln!("exported {rows} rows");
    }
    Ok(())
}

/// The lines of the file to import: read twice (check, then write) from a file, or kept in
/// memory from stdin.
enum Source {
    File(std::path::PathBuf),
    Stdin(Vec<String>),
}

impl Source {
    fn open(file: &str) -> anyhow::Result<Self> {
        if file == "-" {
            let lines: Vec<String> =
                std::io::stdin().lock().lines().collect::<std::io::Result<_>>()?;
            return Ok(Source::Stdin(lines));
        }
        let p = std::path::PathBuf::from(file);
        std::fs::File::open(&p).with_context(|| format!("cannot open {file}"))?;
        Ok(Source::File(p))
    }

    /// `(line number, text)` of every non-empty line.
    fn lines(&self) -> anyhow::Result<Lines<'_>> {
        let it: Box<dyn Iterator<Item = std::io::Result<String>>> = match self {
            Source::File(p) => Box::new(
                std::io::BufReader::new(
                    std::fs::File::open(p)
                        .with_context(|| format!("cannot open {}", p.display()))?,
                )
                .lines(),
            ),
            Source::Stdin(v) => Box::new(v.iter().cloned().map(Ok)),
        };
        Ok(Box::new(
            it.enumerate()
                .map(|(i, l)| l.map(|l| (i + 1, l)).map_err(anyhow::Error::from))
                .filter(|r| r.as_ref().map_or(true, |(_, l)| !l.trim().is_empty())),
        ))
    }
}

/// `(line number, text)` of the non-empty lines of a file.
type Lines<'a> = Box<dyn Iterator<Item = anyhow::Result<(usize, String)>> + 'a>;

/// What a line of the new format is.
enum Line {
    Header(Header),
    Row(BackupRow),
    End(End),
}

fn parse_line(n: usize, text: &str) -> anyhow::Result<Line> {
    dto::check_no_nul(text.as_bytes()).map_err(|e| located(e, "line", n))?;
    let v: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("line {n}: not JSON"))?;
    let has = |k: &str| v.get(k).is_some();
    let line = if has("engram_export") {
        Line::Header(serde_json::from_value(v).with_context(|| format!("line {n}: bad header"))?)
    } else if has("end") {
        Line::End(serde_json::from_value(v).with_context(|| format!("line {n}: bad end line"))?)
    } else if has("table") {
        Line::Row(serde_json::from_value(v).with_context(|| format!("line {n}: bad row"))?)
    } else {
        bail!("line {n}: not a line of an engram export (no header, row or end)");
    };
    Ok(line)
}

/// Import a file written by [`export`] (or by an earlier engram's export). `tenant`: put
/// every row into this tenant instead of its own (one tenant's rows only). A file refused by
/// the checks (unreadable, cut short, not an export) is the input's fault: its error says
/// `invalid_input`, as the engine's refusals carry their own code.
pub async fn import<F, Fut>(
    open: F,
    file: &str,
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Engine>>,
{
    restore_file(open, file, tenant, json).await.map_err(|e| {
        if e.chain().any(|c| c.is::<crate::api::error::CliError>()) {
            e
        } else {
            let message = format!("{e:#}");
            anyhow::Error::new(crate::api::error::CliError { message, code: "invalid_input" })
        }
    })
}

async fn restore_file<F, Fut>(
    open: F,
    file: &str,
    tenant: Option<&str>,
    json: bool,
) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Engine>>,
{
    let source = Source::open(file)?;
    let first = source.lines()?.next().transpose()?;
    let Some((_, first)) = first else { bail!("{file} is empty: nothing to import") };
    if serde_json::from_str::<serde_json::Value>(&first)
        .ok()
        .is_some_and(|v| v.get("type").is_some())
    {
        let engine = open().await?;
        return import_memory_lines(&engine, &source, tenant.unwrap_or("default"), json).await;
    }

    // Pass 1: every line checked, nothing written.
    let mut header = None;
    let mut rows = 0u64;
    let mut end = None;
    let mut tenants = BTreeSet::new();
    for item in source.lines()? {
        let (n, text) = item?;
        if end.is_some() {
            bail!("line {n}: after the end line; the file is not one engram export");
        }
        match parse_line(n, &text)? {
            Line::Header(h) if header.is_none() && n == first_line_number(&source)? => {
                if h.engram_export != FORMAT {
                    bail!(
                        "line {n}: export format {} is not known to this engram (it reads {FORMAT}); \
                         upgrade engram",
                        h.engram_export
                    );
                }
                header = Some(h);
            }
            Line::Header(_) => bail!("line {n}: a header in the middle of the file"),
            _ if header.is_none() => {
                bail!("line {n}: the file does not start with an export header")
            }
            Line::Row(r) => {
                engram_store::backup::check_row(&r).map_err(|e| located(e, "line", n))?;
                if let Some(t) = r.row.get("tenant_id").and_then(|t| t.as_str()) {
                    tenants.insert(t.to_string());
                }
                rows += 1;
            }
            Line::End(e) => end = Some(e.end.rows),
        }
    }
    let header = header.context("the file does not start with an export header")?;
    match end {
        None => bail!(
            "the export has no end line: it was cut short ({rows} rows found); nothing was imported"
        ),
        Some(e) if e != rows => {
            bail!("the export announces {e} rows but holds {rows}; nothing was imported")
        }
        Some(_) => {}
    }
    let target = match tenant {
        None => None,
        Some(t) => {
            let t = TenantId::parse(t).map_err(crate::api::error::cli_error)?;
            if tenants.len() > 1 {
                bail!(
                    "this export holds {} tenants ({}); --tenant puts the rows of ONE tenant into \
                     another: export that tenant alone (engram export --tenant …)",
                    tenants.len(),
                    tenants.iter().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            (!tenants.contains(t.as_str())).then_some(t)
        }
    };
    // The store is opened (and created) only for a file that passed every check.
    let engine = open().await?;
    engine
        .prepare_restore(header.embedding.as_ref().map(|s| (s.model.as_str(), s.dims)))
        .await
        .map_err(crate::api::error::cli_error)?;

    // Pass 2: write, in batches, the store marked until the last row is in: an import cut
    // short (killed, a full disk) is said to be unfinished by `/v1/stats`, the server's
    // start and the next import, which completes it (rows already there are skipped).
    let err = crate::api::error::cli_error;
    if let Some(earlier) = engine.import_mark().await.map_err(err)? {
        eprintln!(
            "engram: an earlier import did not finish ({earlier}); this one completes it if it \
             is the same file (rows already there are skipped)"
        );
    }
    let name = if file == "-" { "stdin".to_string() } else { file.to_string() };
    let mark = format!("{name}, begun {}", crate::api::dto::fmt_ts(engram_core::model::now()));
    engine.set_import_mark(Some(&mark)).await.map_err(err)?;
    let progress = Progress::new("importing", "rows", Some(rows), json);
    let mut state = RestoreState { target: target.clone(), ..Default::default() };
    let mut batch = Vec::with_capacity(BATCH);
    let mut done = 0u64;
    for item in source.lines()? {
        let (n, text) = item?;
        if let Line::Row(r) = parse_line(n, &text)? {
            batch.push(r);
        }
        if batch.len() == BATCH {
            engine.restore(&batch, &mut state).await.map_err(|e| located(e, "before line", n))?;
            done += batch.len() as u64;
            progress.set(done);
            batch.clear();
        }
    }
    if !batch.is_empty() {
        engine.restore(&batch, &mut state).await.map_err(crate::api::error::cli_error)?;
    }
    engine.set_import_mark(None).await.map_err(err)?;
    progress.finish();
    let r = state.report;
    let summary = ImportSummary {
        imported: r.restored.values().sum(),
        skipped: r.skipped.values().sum(),
        tables: r.restored,
        skipped_tables: r.skipped,
        keys_not_copied: r.keys_not_copied,
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    let per_table = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ")
    };
    let detail = |m: &std::collections::BTreeMap<String, u64>| {
        if m.is_empty() { String::new() } else { format!(" ({})", per_table(m)) }
    };
    println!(
        "imported {} rows{}, skipped {} already present{}",
        summary.imported,
        detail(&summary.tables),
        summary.skipped,
        detail(&summary.skipped_tables)
    );
    if summary.keys_not_copied > 0 {
        println!(
            "{} API keys not copied: a key belongs to the tenant it was made for; create keys for \
             tenant {} with `engram keys create`",
            summary.keys_not_copied,
            target.map(|t| t.to_string()).unwrap_or_default()
        );
    }
    Ok(())
}

fn first_line_number(source: &Source) -> anyhow::Result<usize> {
    Ok(source.lines()?.next().transpose()?.map_or(0, |(n, _)| n))
}

/// The export of an earlier engram: memory rows with their history, re-embedded on import.
async fn import_memory_lines(
    engine: &Engine,
    source: &Source,
    tenant: &str,
    json: bool,
) -> anyhow::Result<()> {
    let p = Principal {
        tenant: TenantId::parse(tenant).map_err(crate::api::error::cli_error)?,
        role: KeyRole::Admin,
    };
    let mut records = Vec::new();
    for item in source.lines()? {
        let (i, line) = item?;
        let parsed: ExportLine = serde_json::from_str(&line)
            .with_context(|| format!("line {i}: not an engram export line"))?;
        dto::check_no_nul(line.as_bytes()).map_err(|e| located(e, "line", i))?;
        if parsed.kind != "memory" {
            bail!("line {i}: unknown record type '{}'", parsed.kind);
        }
        let m = parsed.memory.into_memory(&p.tenant).map_err(|e| located(e, "line", i))?;
        let events = parsed
            .events
            .into_iter()
            .map(dto::EventDto::into_event)
            .collect::<engram_core::Result<Vec<_>>>()
            .map_err(|e| located(e, "line", i))?;
        records.push((m, events));
    }
    // Nothing is written unless every line parsed.
    let progress = Progress::new("importing", "memories", Some(records.len() as u64), json);
    let report = engine
        .import(&p, records, &|r| progress.set((r.imported + r.skipped) as u64))
        .await
        .map_err(crate::api::error::cli_error)?;
    progress.finish();
    if json {
        let out = serde_json::json!({ "imported": report.imported, "skipped": report.skipped });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "imported {} memories, skipped {} already present",
            report.imported, report.skipped
        );
    }
    Ok(())
}

/// An engine error of an import, where it happened (`line 12`, `before line 1001`): its code
/// and its whole message. The operator runs the command, so nothing is kept for a server
/// log (a full disk is named as such, not "internal error").
fn located(e: engram_core::Error, at: &str, line: usize) -> anyhow::Error {
    anyhow::Error::new(crate::api::error::CliError {
        message: format!("{at} {line}: {e}"),
        code: e.code().as_str(),
    })
}
