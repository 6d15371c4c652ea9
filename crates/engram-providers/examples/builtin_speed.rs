//! The built-in embedder's speed on the documents the embedding lane embeds, ASCII or not.
//!
//! Documents as `engram_core::pipeline::messages` builds them from LoCoMo's turns (as the
//! metric writes them: `(<date>) <speaker>: <text>`, and ` [shares <caption>]` for a photo):
//! each turn with the two before it (one per line), and each turn alone. Two corpora: the
//! turns as written (2 % of the documents hold a non-ASCII character, about half a `[`),
//! and the same turns typed the way phones type them, with typographic apostrophes and
//! quotes (`’`, `“`, `”`), so most documents take the non-ASCII tokenization path. For
//! reference, the `tokenizers` crate's own `encode_fast` on the second corpus. Best of 3
//! passes, one thread.
//!
//! ```text
//! cargo run --release -p engram-providers --example builtin_speed
//! ```

#[path = "common/locomo.rs"]
#[allow(dead_code)] // the recall half of the shared module is not used here
mod locomo;

use std::path::PathBuf;
use std::time::Instant;

use engram_providers::BuiltinEmbedder;

fn documents(convs: &[locomo::Conversation]) -> Vec<String> {
    let mut out = Vec::new();
    for c in convs {
        for i in 0..c.docs.len() {
            out.push(c.docs[i.saturating_sub(2)..=i].join("\n"));
            out.push(c.docs[i].clone());
        }
    }
    out
}

/// Documents per second of `f` over `docs`, best of 3 passes.
fn rate(docs: &[String], mut f: impl FnMut(&str)) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            for d in docs {
                f(d);
            }
            docs.len() as f64 / t.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn main() {
    let data =
        std::env::args().nth(1).map_or_else(|| PathBuf::from(locomo::DEFAULT_DATA), PathBuf::from);
    let convs = locomo::load(&data);
    let plain = documents(&convs);
    let typed: Vec<String> = plain
        .iter()
        .map(|d| {
            let mut out = String::with_capacity(d.len() + 8);
            let mut open = true;
            for c in d.chars() {
                match c {
                    '\'' => out.push('’'),
                    '"' => {
                        out.push(if open { '“' } else { '”' });
                        open = !open;
                    }
                    _ => out.push(c),
                }
            }
            out
        })
        .collect();
    let e = BuiltinEmbedder::new().expect("built-in embedder");
    let mut tok = tokenizers::Tokenizer::from_bytes(BuiltinEmbedder::tokenizer_json()).unwrap();
    tok.with_truncation(None).unwrap();
    tok.with_padding(None);
    println!(
        "| corpus | documents | non-ASCII | built-in embed, documents/s | tokenize only, documents/s |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (name, docs) in [("LoCoMo as written", &plain), ("typographic quotes", &typed)] {
        let share = |f: &dyn Fn(&String) -> bool| {
            100.0 * docs.iter().filter(|d| f(d)).count() as f64 / docs.len() as f64
        };
        let (non_ascii, bracket) = (share(&|d| !d.is_ascii()), share(&|d| d.contains('[')));
        let embed = rate(docs, |d| {
            std::hint::black_box(e.embed_one(d).unwrap());
        });
        let tokenize = rate(docs, |d| {
            std::hint::black_box(e.token_ids(d).unwrap());
        });
        println!(
            "| {name} | {} | {non_ascii:.0} % | {bracket:.0} % | {embed:.0} | {tokenize:.0} |",
            docs.len()
        );
    }
    let reference = rate(&typed, |d| {
        std::hint::black_box(tok.encode_fast(d, false).unwrap());
    });
    println!(
        "| typographic quotes, `tokenizers`' `encode_fast` (reference) | {} | | | | {reference:.0} |",
        typed.len()
    );
}
