//! The compiled-in static embedder.

use engram_core::embed::{Embedder, dot};
use engram_providers::{BUILTIN_MODEL_ID, BuiltinEmbedder};

use crate::assert_unit;

fn embed(e: &BuiltinEmbedder, text: &str) -> Vec<f32> {
    e.embed_one(text).unwrap()
}

/// MiniLM's tokenizer as the oracle of the tokenization tests: its `tokenizer.json` pads and
/// truncates to 128, the static embedder does neither.
fn reference_tokenizer() -> tokenizers::Tokenizer {
    let mut tok = tokenizers::Tokenizer::from_bytes(BuiltinEmbedder::tokenizer_json()).unwrap();
    tok.with_truncation(None).unwrap();
    tok.with_padding(None);
    tok
}

/// A fixed-seed xorshift generator: `next(n)` is in `0..n`.
fn generator(mut state: u64) -> impl FnMut(usize) -> usize {
    move |n| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    }
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

/// A query most of whose words the English vocabulary cuts into pieces (German, Spanish)
/// is read on a raised floor: its fragments' cosines say nothing (unrelated German queries
/// reached 0.88-0.92 against German facts, above the model's floor of 0.86). English
/// questions, names and rare words included, keep the model's own scale.
#[test]
fn a_query_the_vocabulary_does_not_know_gets_no_semantic_support() {
    let e = BuiltinEmbedder::new().unwrap();
    let own = e.similarity_scale();
    for q in [
        "Where does the user live?",
        "What pottery did Melanie make last summer?",
        "When did Caroline go to the LGBTQ support group?",
        "",
    ] {
        assert_eq!(e.query_scale(q), own, "{q}");
    }
    // Function words do not count: these are mostly short words English spells too.
    for q in [
        "Steuererklärung für Kapitalerträge",
        "Quantenchromodynamik auf dem Gitter",
        "Was ist die Lieblingsfarbe des Nutzers?",
        "Wat is de lievelingskleur van de gebruiker?",
        "¿Cuál es el color favorito del usuario?",
    ] {
        let s = e.query_scale(q);
        assert_eq!(s.floor, s.full, "{q}: {s:?}");
        assert_eq!(s.support(0.92), 0.0, "{q}");
        assert_eq!(s.support(0.99), 1.0, "a near-identical text still counts: {q}");
    }
    let partly = e.query_scale("Was macht er am Wochenende?");
    assert!(partly.floor > own.floor && partly.floor <= own.full, "{partly:?}");
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

#[test]
fn token_ids_match_the_tokenizer() {
    let e = BuiltinEmbedder::new().unwrap();
    let tok = reference_tokenizer();
    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/minilm_golden.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut texts: Vec<String> = golden["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap().to_owned())
        .collect();
    texts.extend(
        [
            "",
            "(1:56 pm on 8 May, 2023) Caroline: Hey Mel! Good to see you! How have you been? [shares a photo of a sunset]",
            "unaffable supercalifragilisticexpialidocious antidisestablishmentarianism",
            "[CLS] literal special tokens [SEP] and [MASK] [PAD] [UNK] [unused3]",
            "东京 is in 日本; Москва; Ελλάδα; مرحبا; नमस्ते",
            "ﬁne ligatures, full‑width ＡＢＣ, tabs\tand\nnewlines\r\n, zero\u{200b}width",
            "##hash ##tags and e-mail@example.com http://x.y/z?q=1&r=2",
            &"a".repeat(150),
            "I've   multiple    spaces   and 3.14159 numbers 1,000,000",
        ]
        .map(str::to_owned),
    );
    for t in &texts {
        let want = tok.encode(t.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(e.token_ids(t).unwrap(), want, "{t:?}");
    }
}

/// Random texts over all of ASCII (control characters included) plus some non-ASCII, built
/// from a fixed-seed generator: the fast tokenization paths must give the tokenizer's ids.
#[test]
fn token_ids_match_the_tokenizer_on_random_text() {
    let e = BuiltinEmbedder::new().unwrap();
    let tok = reference_tokenizer();
    let words = [
        "the",
        "User",
        "LIVES",
        "in",
        "Bengaluru",
        "unaffable",
        "don't",
        "e.g.",
        "3.14",
        "naïve",
        "café",
        "über",
        "東京",
        "🐶",
        "x",
        "##ab",
        "[",
        "]",
        "[CLS]",
        "ﬁ",
        "\u{301}",
        "Zoë",
    ];
    let mut next = generator(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let mut text = String::new();
        for _ in 0..next(12) {
            match next(4) {
                0 => text.push(char::from(next(128) as u8)),
                1 => text.push(' '),
                _ => text.push_str(words[next(words.len())]),
            }
        }
        let want = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(e.token_ids(&text).unwrap(), want, "{text:?}");
    }
}

/// Random texts over Unicode (accents and combining marks, CJK and its compatibility
/// ideographs, scripts, punctuation, spaces and control or format characters, emoji, and any
/// code point), mixed with ASCII words, from a fixed-seed generator: the hand-written Unicode
/// path must give the tokenizer's ids.
#[test]
fn token_ids_match_the_tokenizer_on_random_unicode() {
    let e = BuiltinEmbedder::new().unwrap();
    let tok = reference_tokenizer();
    // Ranges a text is drawn from: Latin-1 and Latin Extended, combining marks (several
    // canonical classes, so NFD reorders them), Greek with its punctuation that decomposes to
    // ASCII, Cyrillic, Arabic and Devanagari, general punctuation and spaces (NBSP, en quad,
    // zero-width and directional marks, line separator), CJK ideographs and compatibility
    // ideographs, kana and Hangul, ideographic space, private use, U+FFFD, the Kelvin and Ohm
    // signs, emoji and a supplementary CJK block.
    let ranges: [(u32, u32); 20] = [
        (0x80, 0x24F),
        (0x300, 0x36F),
        (0x370, 0x3FF),
        (0x1F00, 0x1FFF),
        (0x400, 0x4FF),
        (0x600, 0x6FF),
        (0x900, 0x97F),
        (0x2000, 0x206F),
        (0x3000, 0x303F),
        (0x3040, 0x30FF),
        (0xAC00, 0xAC40),
        (0x4E00, 0x4E40),
        (0xF900, 0xFAFF),
        (0xE000, 0xE010),
        (0xFFF0, 0xFFFF),
        (0x2120, 0x2130),
        (0x1F300, 0x1F6FF),
        (0x20000, 0x20040),
        (0xFE00, 0xFE6F),
        (0x1E00, 0x1EFF),
    ];
    let words =
        ["the", "User", "don't", "café", "naïve", "İstanbul", "ΣΊΣΥΦΟΣ", "Straße", "[", "]"];
    let mut next = generator(0x2545_f491_4f6c_dd1d);
    let mut unicode = 0;
    for _ in 0..30_000 {
        let mut text = String::new();
        for _ in 0..next(14) {
            match next(6) {
                0 => text.push(char::from(next(128) as u8)),
                1 => text.push(' '),
                2 => text.push_str(words[next(words.len())]),
                3 => {
                    // Any code point (surrogates skipped).
                    if let Some(c) = char::from_u32(next(0x3_0000) as u32) {
                        text.push(c);
                    }
                }
                _ => {
                    let (lo, hi) = ranges[next(ranges.len())];
                    if let Some(c) = char::from_u32(lo + next((hi - lo + 1) as usize) as u32) {
                        text.push(c);
                    }
                }
            }
        }
        unicode += usize::from(!text.is_ascii());
        let want = tok.encode(text.as_str(), false).unwrap().get_ids().to_vec();
        assert_eq!(e.token_ids(&text).unwrap(), want, "{text:?}");
    }
    assert!(unicode > 20_000, "the generator must give mostly non-ASCII texts: {unicode}");
}
