//! Vector-only turn recall on LoCoMo, for the built-in static embedder and MiniLM, plus their
//! throughput.
//!
//! The metric is defined in `/work/shared/eval/locomo/README.md` (see `common/locomo.rs`).
//!
//! ```text
//! cargo run --release -p engram-providers --example locomo_vector_eval
//! cargo run --release -p engram-providers --example locomo_vector_eval -- \
//!     --minilm DIR --data FILE --table extra.bin --no-minilm --speed-only
//! ```
//!
//! Throughput: the built-in embedder on one thread over short sentences (the LoCoMo questions,
//! 54 chars on average, repeated to 100k), and MiniLM over the same questions (batched, candle
//! using its default thread count: every core).

#[path = "common/locomo.rs"]
mod locomo;

use std::borrow::Cow;
use std::path::PathBuf;
use std::time::Instant;

use engram_core::embed::Embedder;
use engram_providers::{BertEmbedder, BuiltinEmbedder, StaticTable};

/// Nanoseconds this thread has run on a CPU (Linux `/proc/thread-self/schedstat`): on a
/// shared machine, throughput per CPU-second is steadier than per wall-second.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Run `f` 3 times; best sentences per wall second and per CPU second of this thread.
fn throughput(n: usize, mut f: impl FnMut()) -> (f64, Option<f64>) {
    let (mut wall, mut cpu) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let (t0, c0) = (Instant::now(), thread_cpu_ns());
        f();
        wall = wall.min(t0.elapsed().as_secs_f64());
        if let (Some(c0), Some(c1)) = (c0, thread_cpu_ns()) {
            cpu = cpu.min((c1 - c0) as f64 / 1e9);
        }
    }
    (n as f64 / wall, (cpu < f64::MAX).then(|| n as f64 / cpu))
}

fn main() {
    let mut data = PathBuf::from(locomo::DEFAULT_DATA);
    let mut minilm = Some(engram_providers::testing::minilm_dir_candidate());
    let mut tables: Vec<PathBuf> = Vec::new();
    let mut speed_only = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--data" => data = val().into(),
            "--minilm" => minilm = Some(val().into()),
            "--no-minilm" => minilm = None,
            "--table" => tables.push(val().into()),
            "--speed-only" => speed_only = true,
            other => panic!(
                "unknown argument {other}; use --data FILE --minilm DIR --no-minilm \
                 --table FILE --speed-only"
            ),
        }
    }
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    let convs = locomo::load(&data);
    let n_docs: usize = convs.iter().map(|c| c.docs.len()).sum();
    let n_queries: usize = convs.iter().map(|c| c.queries.len()).sum();
    println!(
        "LoCoMo {}: {} conversations, {n_docs} turns, {n_queries} questions (cat. 1-4), {profile} build\n",
        data.display(),
        convs.len()
    );

    let builtin = BuiltinEmbedder::new().expect("builtin");
    let mut candidates: Vec<(String, BuiltinEmbedder)> =
        vec![(format!("{} ({}d)", builtin.model_id(), builtin.dims()), builtin.clone())];
    for path in &tables {
        let table = StaticTable::parse(Cow::Owned(std::fs::read(path).expect("read table")))
            .expect("parse table");
        let dims = table.dims();
        let e = BuiltinEmbedder::from_parts(table, BuiltinEmbedder::tokenizer_json(), "candidate")
            .expect("table");
        candidates.push((format!("{} ({dims}d)", path.display()), e));
    }
    let model = minilm.map(|dir| {
        BertEmbedder::load(&dir).unwrap_or_else(|e| {
            panic!("{} (run scripts/fetch-model.sh, or pass --no-minilm)", e.message)
        })
    });

    if !speed_only {
        println!("| embedder | R@1 | R@5 | R@10 | R@20 |\n| --- | --- | --- | --- | --- |");
        for (name, e) in &candidates {
            let (docs, queries) =
                locomo::embed_all(&convs, |t| e.embed_blocking(t).expect("embed"));
            println!("{}", locomo::row(name, locomo::recall(&convs, &docs, &queries)));
        }
        if let Some(m) = &model {
            let start = Instant::now();
            let (docs, queries) =
                locomo::embed_all(&convs, |t| m.embed_blocking(t).expect("embed"));
            let r = locomo::recall(&convs, &docs, &queries);
            println!("{}", locomo::row(&format!("{} ({}d)", m.model_id(), m.dims()), r));
            eprintln!("(MiniLM embedded {} texts in {:.1?})", n_docs + n_queries, start.elapsed());
        }
        println!();
    }

    let questions: Vec<String> =
        convs.iter().flat_map(|c| c.queries.iter().map(|q| q.text.clone())).collect();
    let short: Vec<String> = questions.iter().cycle().take(100_000).cloned().collect();
    let (wall, cpu) = throughput(short.len(), || {
        assert_eq!(builtin.embed_blocking(&short).expect("embed").len(), short.len());
    });
    println!(
        "builtin: {wall:.0} sentences/s wall, {} per CPU-second (1 thread, {} short sentences, \
         best of 3, {profile})",
        cpu.map_or("?".to_owned(), |c| format!("{c:.0}")),
        short.len()
    );
    // For reference: the tokenizer's plain `encode_fast` alone (what the shortcut avoids).
    let mut tok = tokenizers::Tokenizer::from_bytes(BuiltinEmbedder::tokenizer_json()).unwrap();
    tok.with_truncation(None).unwrap();
    tok.with_padding(None);
    let (wall, cpu) = throughput(short.len(), || {
        for t in &short {
            assert!(tok.encode_fast(t.as_str(), false).is_ok());
        }
    });
    println!(
        "(tokenizers encode_fast alone: {wall:.0} sentences/s wall, {} per CPU-second)",
        cpu.map_or("?".to_owned(), |c| format!("{c:.0}"))
    );
    if let Some(m) = &model {
        let batch: Vec<String> = questions.iter().take(512).cloned().collect();
        m.embed_blocking(&batch[..32]).expect("warm-up");
        let start = Instant::now();
        m.embed_blocking(&batch).expect("embed");
        let batched = batch.len() as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for t in &batch[..64] {
            m.embed_blocking(std::slice::from_ref(t)).expect("embed");
        }
        let single = 64.0 / start.elapsed().as_secs_f64();
        println!(
            "MiniLM: {batched:.0} sentences/s batched (32/batch), {single:.0} sentences/s one \
             at a time ({} candle threads, {profile})",
            candle_core::utils::get_num_threads()
        );
    }
}
