//! The compiled-in static embedder.

use engram_core::embed::{Embedder, dot};
use engram_providers::{BUILTIN_MODEL_ID, BuiltinEmbedder};

use crate::assert_unit;

fn embed(e: &BuiltinEmbedder, text: &str) -> Vec<f32> {
    e.embed_one(text).unwrap()
}

#[tokio::test]
async fn contract_holds() {
    let e = BuiltinEmbedder::new().unwrap();
    assert_eq!(e.model_id(), BUILTIN_MODEL_ID);
    assert!(e.dims() >= 128, "dims {}", e.dims());
    let texts: Vec<String> = ["The user lives in Bengaluru.", "", "   ", "🐶🎉", "naïve café", "x"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let out = e.embed(&texts).await.unwrap();
    assert_eq!(out.len(), texts.len());
    for v in &out {
        assert_eq!(v.len(), e.dims());
        assert_unit(v);
    }
    // Deterministic, and the same whether batched or not, inline or on the blocking pool.
    let big: Vec<String> =
        (0..2000).map(|i| format!("memory number {i} about the user's cat")).collect();
    let on_pool = e.embed(&big).await.unwrap();
    for (t, v) in big.iter().zip(&on_pool).step_by(97) {
        assert_eq!(&embed(&e, t), v);
    }
    assert!(e.embed(&[]).await.unwrap().is_empty());
    // Case and accents are folded by the tokenizer.
    assert!(dot(&embed(&e, "Naïve CAFÉ"), &embed(&e, "naive cafe")) > 0.9999);
}

#[test]
fn similar_texts_are_closer_than_unrelated_ones() {
    let e = BuiltinEmbedder::new().unwrap();
    let cases = [
        ("I love my dog", "The user has a puppy they adore", "The stock market fell sharply today"),
        ("She moved to Paris last year", "The user relocated to France", "I had pasta for dinner"),
        ("What is the user's favourite food?", "The user loves sushi", "The user works as a nurse"),
        ("He plays guitar in a band", "The user is a musician", "It rained all weekend"),
    ];
    for (q, near, far) in cases {
        let (q, n, f) = (embed(&e, q), embed(&e, near), embed(&e, far));
        assert!(dot(&q, &n) > dot(&q, &f), "{:?}", (dot(&q, &n), dot(&q, &f)));
    }
}

#[test]
fn table_matches_tokenizer() {
    let e = BuiltinEmbedder::new().unwrap();
    let table = e.table();
    assert_eq!(table.rows(), 30522);
    assert!(table.metadata().contains("all-MiniLM-L6-v2"), "{}", table.metadata());
    // Row 0 holds the empty-text fallback; [CLS]/[SEP] are never looked up.
    assert!(table.row(0).iter().any(|x| *x != 0.0));
    assert_unit(&embed(&e, ""));
}
