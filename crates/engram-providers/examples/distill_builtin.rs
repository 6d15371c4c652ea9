//! Distil all-MiniLM-L6-v2 into the built-in static embedding table (model2vec-style).
//!
//! 1. Every vocabulary token `t` goes through MiniLM (candle) as `[CLS] t [SEP]`; its vector
//!    is the mean of the three output positions (`--pooling mean`, what model2vec does) or the
//!    output at `t` alone (`--pooling token`). The empty text (`[CLS] [SEP]`) is embedded too.
//!    These raw vectors are cached (`--raw-cache`, default a temp file named after the
//!    model's id), since the rest is cheap to redo.
//! 2. Optionally each raw vector is L2-normalised first (`--prenorm`).
//! 3. PCA (`--pca-dims N`, 0 = off): centre on the mean token vector and project on the top N
//!    principal axes (N = 384 keeps every dimension: centring only).
//! 4. SIF weighting with Zipf-estimated frequencies (`--sif A`, 0 = off), as model2vec:
//!    token of vocabulary index i gets p_i ∝ 1/(i+2) and weight A/(A + p_i), multiplied into
//!    its row, so inference is a plain sum.
//! 5. Special and `[unused]` tokens get zero rows; row 0 (`[PAD]`, never emitted by the
//!    tokenizer) holds the empty text's vector, the fallback for texts with no known token.
//! 6. Rows are quantised to int8 with one f32 scale each and written in the EGSTATIC format
//!    (see `src/embed/builtin.rs`).
//!
//! `--sweep` instead evaluates a grid of these choices by vector-only LoCoMo turn recall and
//! prints a table (nothing is written). This is how the defaults were chosen.
//!
//! Regenerate the committed table (defaults = the chosen design):
//!
//! ```text
//! cargo run --release -p engram-providers --example distill_builtin -- --model "$(scripts/fetch-model.sh)"
//! ```

#[path = "common/locomo.rs"]
mod locomo;

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use engram_providers::{BertEmbedder, BuiltinEmbedder, StaticTable};

const SEQ_BATCH: usize = 512;
const CLS: u32 = 101;
const SEP: u32 = 102;
/// In the BERT uncased vocabulary, ids 999..1996 are single characters in code-point order;
/// whole words start at 1996 (`the`) in rough frequency order.
const FIRST_CHAR: usize = 999;
const FIRST_WORD: usize = 1996;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Pooling {
    Mean,
    Token,
}

#[derive(Clone, Copy, Debug)]
struct Design {
    pooling: Pooling,
    prenorm: bool,
    pca_dims: usize,
    sif: f64,
    /// Zipf rank given to the single-character tokens (vocabulary ids 999..1996, sorted by
    /// code point, not by frequency); 0 = their vocabulary index like every other token.
    char_rank: usize,
}

struct Args {
    model: PathBuf,
    out: PathBuf,
    /// Default: a file in the temp dir named after the model's id (folder + fingerprint).
    raw_cache: Option<PathBuf>,
    data: PathBuf,
    sweep: bool,
    design: Design,
}

fn parse_args() -> Args {
    let mut args = Args {
        model: engram_providers::testing::minilm_dir_candidate(),
        out: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/assets/minilm-static.bin")),
        raw_cache: None,
        data: PathBuf::from(locomo::DEFAULT_DATA),
        sweep: false,
        design: Design {
            pooling: Pooling::Mean,
            prenorm: false,
            pca_dims: 0,
            sif: 1e-4,
            char_rank: 100,
        },
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--model" => args.model = val().into(),
            "--out" => args.out = val().into(),
            "--raw-cache" => args.raw_cache = Some(val().into()),
            "--data" => args.data = val().into(),
            "--sweep" => args.sweep = true,
            "--pooling" => {
                args.design.pooling = match val().as_str() {
                    "mean" => Pooling::Mean,
                    "token" => Pooling::Token,
                    other => panic!("--pooling mean|token, not {other}"),
                }
            }
            "--prenorm" => args.design.prenorm = true,
            "--pca-dims" => args.design.pca_dims = val().parse().expect("--pca-dims N"),
            "--sif" => args.design.sif = val().parse().expect("--sif A"),
            "--char-rank" => args.design.char_rank = val().parse().expect("--char-rank N"),
            other => panic!(
                "unknown argument {other}; use --model DIR --out FILE --raw-cache FILE \
                 --pooling mean|token --prenorm --pca-dims N --sif A --char-rank N --sweep \
                 --data FILE"
            ),
        }
    }
    args
}

/// Raw MiniLM vectors: `mean[id]`, `token[id]` and the empty text's.
struct Raw {
    dims: usize,
    mean: Vec<Vec<f32>>,
    token: Vec<Vec<f32>>,
    empty: Vec<f32>,
}

impl Raw {
    fn save(&self, path: &Path) {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.mean.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.dims as u32).to_le_bytes());
        for v in self.mean.iter().chain(&self.token).chain(std::iter::once(&self.empty)) {
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        std::fs::write(path, out).expect("write raw cache");
    }

    fn load(path: &Path, rows: usize, dims: usize) -> Option<Self> {
        let bytes = std::fs::read(path).ok()?;
        let u = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        if bytes.len() != 8 + (2 * rows + 1) * dims * 4 || u(0) != rows || u(4) != dims {
            return None;
        }
        let mut vecs = bytes[8..].chunks_exact(dims * 4).map(|c| {
            c.chunks_exact(4).map(|f| f32::from_le_bytes(f.try_into().unwrap())).collect()
        });
        let mean = vecs.by_ref().take(rows).collect();
        let token = vecs.by_ref().take(rows).collect();
        let empty = vecs.next()?;
        Some(Self { dims, mean, token, empty })
    }

    fn compute(model: &BertEmbedder, rows: usize) -> Self {
        let start = Instant::now();
        let mut mean = Vec::with_capacity(rows);
        let mut token = Vec::with_capacity(rows);
        let ids: Vec<u32> = (0..rows as u32).collect();
        for chunk in ids.chunks(SEQ_BATCH) {
            let seqs: Vec<Vec<u32>> = chunk.iter().map(|&t| vec![CLS, t, SEP]).collect();
            for positions in model.hidden_states(&seqs).expect("forward") {
                token.push(positions[1].clone());
                mean.push(average(&positions));
            }
            if mean.len() % (SEQ_BATCH * 10) == 0 {
                eprintln!("  {}/{rows} tokens, {:.0?}", mean.len(), start.elapsed());
            }
        }
        let empty = average(&model.hidden_states(&[vec![CLS, SEP]]).expect("forward")[0]);
        eprintln!("embedded {rows} tokens in {:.1?}", start.elapsed());
        Self { dims: empty.len(), mean, token, empty }
    }
}

fn average(vs: &[Vec<f32>]) -> Vec<f32> {
    let mut acc = vec![0f32; vs[0].len()];
    for v in vs {
        for (a, x) in acc.iter_mut().zip(v) {
            *a += x;
        }
    }
    acc.iter_mut().for_each(|a| *a /= vs.len() as f32);
    acc
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    engram_core::embed::normalize(&mut v);
    v
}

/// Eigen-decomposition of a symmetric `n×n` matrix (row-major) by cyclic Jacobi rotations.
/// Returns eigenvalues and eigenvectors (as columns of the row-major `n×n` result), sorted
/// by decreasing eigenvalue.
fn sym_eigen(mut a: Vec<f64>, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut v = vec![0f64; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * n + j].powi(2))
            .sum();
        let diag: f64 = (0..n).map(|i| a[i * n + i].powi(2)).sum();
        if off <= 1e-22 * diag {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let akp = a[k * n + p];
                    let akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let apk = a[p * n + k];
                    let aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let vkp = v[k * n + p];
                    let vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a[j * n + j].total_cmp(&a[i * n + i]));
    let values = order.iter().map(|&i| a[i * n + i]).collect();
    let mut vectors = vec![0f64; n * n];
    for (new, &old) in order.iter().enumerate() {
        for k in 0..n {
            vectors[k * n + new] = v[k * n + old];
        }
    }
    (values, vectors)
}

/// Centre + project on the top `k` principal axes, fitted on `fit` rows.
struct Pca {
    mean: Vec<f64>,
    /// `dims × k`, row-major.
    axes: Vec<f64>,
    k: usize,
    explained: f64,
}

impl Pca {
    fn fit(rows: &[&Vec<f32>], k: usize) -> Self {
        let n = rows[0].len();
        let mut mean = vec![0f64; n];
        for r in rows {
            for (m, x) in mean.iter_mut().zip(r.iter()) {
                *m += f64::from(*x);
            }
        }
        mean.iter_mut().for_each(|m| *m /= rows.len() as f64);
        let mut cov = vec![0f64; n * n];
        let mut centred = vec![0f64; n];
        for r in rows {
            for ((c, x), m) in centred.iter_mut().zip(r.iter()).zip(&mean) {
                *c = f64::from(*x) - m;
            }
            for i in 0..n {
                let ci = centred[i];
                for j in i..n {
                    cov[i * n + j] += ci * centred[j];
                }
            }
        }
        for i in 0..n {
            for j in i..n {
                let v = cov[i * n + j] / rows.len() as f64;
                cov[i * n + j] = v;
                cov[j * n + i] = v;
            }
        }
        let (values, vectors) = sym_eigen(cov, n);
        let total: f64 = values.iter().sum();
        let explained = values[..k].iter().sum::<f64>() / total;
        let axes = (0..n).flat_map(|i| vectors[i * n..i * n + k].to_vec()).collect();
        Self { mean, axes, k, explained }
    }

    fn apply(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0f64; self.k];
        for (i, (xi, m)) in x.iter().zip(&self.mean).enumerate() {
            let c = f64::from(*xi) - m;
            for (o, a) in out.iter_mut().zip(&self.axes[i * self.k..(i + 1) * self.k]) {
                *o += c * a;
            }
        }
        out.into_iter().map(|v| v as f32).collect()
    }
}

/// The rows of the table for a design (before quantisation) and its metadata JSON.
fn build(raw: &Raw, meaningful: &[bool], d: Design) -> (Vec<Vec<f32>>, usize, String) {
    let pick = |v: &Vec<f32>| if d.prenorm { unit(v.clone()) } else { v.clone() };
    let source = match d.pooling {
        Pooling::Mean => &raw.mean,
        Pooling::Token => &raw.token,
    };
    let base: Vec<Vec<f32>> = source.iter().map(pick).collect();
    let empty = pick(&raw.empty);
    let pca = (d.pca_dims > 0).then(|| {
        let fit: Vec<&Vec<f32>> =
            base.iter().zip(meaningful).filter(|(_, m)| **m).map(|(v, _)| v).collect();
        Pca::fit(&fit, d.pca_dims.min(raw.dims))
    });
    let transform = |x: &[f32]| pca.as_ref().map_or_else(|| x.to_vec(), |p| p.apply(x));
    let dims = pca.as_ref().map_or(raw.dims, |p| p.k);
    let explained = pca.as_ref().map(|p| p.explained);
    let n = base.len();
    let harmonic: f64 = (0..n).map(|i| 1.0 / (i as f64 + 2.0)).sum();
    let mut rows: Vec<Vec<f32>> = base
        .iter()
        .enumerate()
        .map(|(i, v)| {
            if !meaningful[i] {
                return vec![0f32; dims];
            }
            let w = if d.sif > 0.0 {
                let rank = if d.char_rank > 0 && (FIRST_CHAR..FIRST_WORD).contains(&i) {
                    d.char_rank as f64
                } else {
                    i as f64 + 2.0
                };
                let p = 1.0 / rank / harmonic;
                d.sif / (d.sif + p)
            } else {
                1.0
            };
            transform(v).into_iter().map(|x| x * w as f32).collect()
        })
        .collect();
    rows[0] = transform(&empty);
    let metadata = serde_json::json!({
        "source": "sentence-transformers/all-MiniLM-L6-v2",
        "tool": "crates/engram-providers/examples/distill_builtin.rs",
        "input": "[CLS] token [SEP]",
        "pooling": format!("{:?}", d.pooling).to_lowercase(),
        "prenorm": d.prenorm,
        "pca_dims": if d.pca_dims == 0 { serde_json::Value::Null } else { dims.into() },
        "pca_explained_variance": explained,
        "sif": if d.sif > 0.0 { d.sif.into() } else { serde_json::Value::Null },
        "sif_rank": if d.char_rank > 0 {
            format!("vocabulary index + 2; single characters (ids 999..1996) rank {}", d.char_rank)
        } else {
            "vocabulary index + 2".to_owned()
        },
        "row0": "embedding of the empty text (fallback)",
        "quantisation": "int8, per-row f32 scale",
    })
    .to_string();
    (rows, dims, metadata)
}

fn evaluate(table: &[u8], tokenizer: &[u8], convs: &[locomo::Conversation]) -> [f64; 4] {
    let table = StaticTable::parse(Cow::Owned(table.to_vec())).expect("table");
    let e = BuiltinEmbedder::from_parts(table, tokenizer, "candidate").expect("embedder");
    let (docs, queries) = locomo::embed_all(convs, |t| e.embed_blocking(t).expect("embed"));
    locomo::recall(convs, &docs, &queries)
}

fn main() {
    let args = parse_args();
    let model = BertEmbedder::load(&args.model).unwrap_or_else(|e| {
        panic!("{} (run scripts/fetch-model.sh, then pass --model DIR)", e.message)
    });
    let tokenizer = model.tokenizer();
    let rows = tokenizer.get_vocab_size(true);
    let tokenizer_json = std::fs::read(args.model.join("tokenizer.json")).expect("tokenizer.json");
    assert_eq!(
        tokenizer_json,
        BuiltinEmbedder::tokenizer_json(),
        "the model's tokenizer.json differs from assets/tokenizer.json: copy it there first"
    );
    let meaningful: Vec<bool> = (0..rows as u32)
        .map(|id| {
            let tok = tokenizer.id_to_token(id).unwrap_or_default();
            !(tok.starts_with('[') && tok.ends_with(']'))
        })
        .collect();
    let dims = engram_core::embed::Embedder::dims(&model);
    let raw_cache = args.raw_cache.clone().unwrap_or_else(|| {
        let id = engram_core::embed::Embedder::model_id(&model);
        let safe: String =
            id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        std::env::temp_dir().join(format!("engram-token-vectors-{safe}.bin"))
    });
    let raw = match Raw::load(&raw_cache, rows, dims) {
        Some(raw) => {
            eprintln!("raw token vectors from {}", raw_cache.display());
            raw
        }
        None => {
            let raw = Raw::compute(&model, rows);
            raw.save(&raw_cache);
            raw
        }
    };

    if args.sweep {
        let convs = locomo::load(&args.data);
        println!("| design | R@1 | R@5 | R@10 | R@20 |\n| --- | --- | --- | --- | --- |");
        // The first grid (pooling × prenorm × PCA × SIF 0/1e-4/1e-3) showed mean pooling,
        // no prenorm, PCA 256 and SIF 1e-4 best; `--sweep` refines around it.
        let mut grid = Vec::new();
        for pooling in [Pooling::Mean, Pooling::Token] {
            for pca_dims in [0, 384, 256] {
                for sif in [0.0, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5] {
                    for char_rank in [0, 100] {
                        if sif == 0.0 && char_rank > 0 {
                            continue;
                        }
                        grid.push(Design { pooling, prenorm: false, pca_dims, sif, char_rank });
                    }
                }
            }
        }
        for prenorm in [false, true] {
            grid.push(Design { prenorm, ..args.design });
        }
        for d in grid {
            let (r, dims, meta) = build(&raw, &meaningful, d);
            let bytes = StaticTable::encode(&r, dims, &meta);
            let name = format!(
                "{:?} prenorm={} pca={} sif={:e} char_rank={}",
                d.pooling, d.prenorm, d.pca_dims, d.sif, d.char_rank
            );
            println!("{}", locomo::row(&name, evaluate(&bytes, &tokenizer_json, &convs)));
        }
        return;
    }

    let (r, dims, meta) = build(&raw, &meaningful, args.design);
    let bytes = StaticTable::encode(&r, dims, &meta);
    std::fs::write(&args.out, &bytes).expect("write table");
    eprintln!(
        "wrote {} ({} rows × {dims}, {} bytes): {meta}",
        args.out.display(),
        r.len(),
        bytes.len()
    );
}
