//! The local embedder's ONNX Runtime backend: the same model, about four times faster on the
//! CPU than candle (`benches/README.md`, "Faster inference").
//!
//! A model folder may hold `model.onnx` beside its safetensors: the whole sentence embedding
//! (encoder, mean pooling over the attention mask, L2 normalisation) as one graph with inputs
//! `input_ids` and `attention_mask` (int64, `[batch, tokens]`) and output
//! `sentence_embedding` (float32, `[batch, dims]`). `scripts/export-onnx.py` writes it from
//! the folder's own weights and records their SHA-256 in the graph's metadata
//! (`engram.weights_sha256`); a file whose record does not match the weights is refused, so
//! the vectors are those of the model the id names, and switching between candle and ONNX
//! Runtime never calls for a re-embed.
//!
//! ONNX Runtime is a C++ library loaded at run time (the `ort` crate, `load-dynamic`): from
//! `ORT_DYLIB_PATH`, or a `libonnxruntime.so*` in the model folder (`scripts/fetch-model.sh`
//! puts the one of the `onnxruntime` PyPI wheel there). Without either, or without
//! `model.onnx`, the folder runs on candle.
//!
//! Two sessions: requests run on one with a thread per core at normal priority; background
//! passes on another whose extra threads lower themselves like the candle background pool
//! (the calling thread already belongs to that pool). Neither spins while idle, so a finished
//! request leaves the cores to background work at once. The background session is made on
//! the first background pass: a CLI call (`engram recall`, `remember`) never makes one, which
//! halves its start-up work and the memory the graph's copy takes.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use engram_core::embed::EmbedError;
use ort::environment::Environment;
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;
use sha2::{Digest, Sha256};

/// The graph file of a model folder.
pub const MODEL_FILE: &str = "model.onnx";
/// Its int8 variant.
pub const INT8_FILE: &str = "model.int8.onnx";

/// The graph a runtime choice loads.
pub fn graph_file(runtime: super::bert::LocalRuntime) -> &'static str {
    if runtime == super::bert::LocalRuntime::OnnxInt8 { INT8_FILE } else { MODEL_FILE }
}
/// Metadata key holding the SHA-256 (hex) of the `model.safetensors` the graph was built from.
pub const WEIGHTS_KEY: &str = "engram.weights_sha256";
const OUTPUT: &str = "sentence_embedding";

/// Where the ONNX Runtime library is: `ORT_DYLIB_PATH`, else a `libonnxruntime.so*` file in
/// `dir` (the shortest name, i.e. the plain `.so` before versioned ones).
pub fn find_library(dir: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so") || n == "onnxruntime.dll")
        })
        .collect();
    found.sort_by_key(|p| p.as_os_str().len());
    found.into_iter().next()
}

/// Load the library and create the environment once per process (ONNX Runtime allows one;
/// it lives as long as the process).
fn environment(library: &Path) -> Result<&'static Environment, EmbedError> {
    static ENV: OnceLock<Result<Environment, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let builder = ort::init_from(library).map_err(|e| e.to_string())?;
        builder.with_name("engram").build().map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| {
        EmbedError::user(format!(
            "local embedder: cannot load ONNX Runtime from {}: {e}",
            library.display()
        ))
    })
}

/// Threads of ONNX Runtime's background pool, started at the lowest priority.
struct LowPriority;

impl ort::environment::ThreadManager for LowPriority {
    type Thread = std::thread::JoinHandle<()>;

    fn create(&self, work: impl FnOnce() + Send + 'static) -> ort::Result<Self::Thread> {
        std::thread::Builder::new()
            .name("engram-embed-bg-ort".into())
            .spawn(move || {
                if let Err(e) = super::bert::lowest_priority() {
                    tracing::warn!(error = %e, "background embedding runs at normal priority");
                }
                work();
            })
            .map_err(|e| ort::Error::new(e.to_string()))
    }

    fn join(thread: Self::Thread) -> ort::Result<()> {
        thread.join().map_err(|_| ort::Error::new("an ONNX Runtime thread panicked"))
    }
}

/// Two sessions of one graph; the background one made when first used.
pub(crate) struct OnnxRuntime {
    requests: Mutex<Session>,
    background: Mutex<Option<Session>>,
    /// What the background session is made from: the graph file (checked against the
    /// weights when the runtime was loaded), the environment and its thread count.
    path: PathBuf,
    env: &'static Environment,
    background_threads: usize,
    library: PathBuf,
}

impl std::fmt::Debug for OnnxRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxRuntime").field("library", &self.library).finish()
    }
}

fn session(
    env: &Environment,
    model: &[u8],
    threads: usize,
    low_priority: bool,
) -> Result<Session, String> {
    let e = |e: ort::Error<ort::session::builder::SessionBuilder>| e.to_string();
    let mut b = Session::builder(env)
        .map_err(|e| e.to_string())?
        .with_optimization_level(GraphOptimizationLevel::Level3)
        .map_err(e)?
        .with_intra_threads(threads)
        .map_err(e)?
        .with_inter_threads(1)
        .map_err(e)?
        .with_intra_op_spinning(false)
        .map_err(e)?
        .with_inter_op_spinning(false)
        .map_err(e)?;
    if low_priority && threads > 1 {
        b = b.with_thread_manager(LowPriority).map_err(e)?;
    }
    b.commit_from_memory(model).map_err(|e| e.to_string())
}

impl OnnxRuntime {
    /// Load `dir/model.onnx` with the library at `library`, after checking that it was built
    /// from `weights` (the folder's `model.safetensors`).
    pub(crate) fn load(
        dir: &Path,
        file: &str,
        library: &Path,
        weights: &[u8],
        background_threads: usize,
    ) -> Result<Self, EmbedError> {
        let path = dir.join(file);
        let model = std::fs::read(&path).map_err(|e| {
            EmbedError::user(format!("local embedder: cannot read {}: {e}", path.display()))
        })?;
        let env = environment(library)?;
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        let bad = |e: &dyn std::fmt::Display| {
            EmbedError::user(format!(
                "local embedder: ONNX Runtime cannot load {}: {e}",
                path.display()
            ))
        };
        let requests = session(env, &model, cores, false).map_err(|e| bad(&e))?;
        let recorded =
            requests.metadata().map_err(|e| bad(&e))?.custom(WEIGHTS_KEY).map(|s| s.to_string());
        let actual = hex::encode(Sha256::digest(weights));
        if recorded.as_deref() != Some(actual.as_str()) {
            return Err(EmbedError::user(format!(
                "local embedder: {} was not built from this folder's model.safetensors (its \
                 {WEIGHTS_KEY} is {}, the weights' SHA-256 is {actual}); re-run \
                 scripts/export-onnx.py or remove it",
                path.display(),
                recorded.as_deref().unwrap_or("missing")
            )));
        }
        let threads = if background_threads == 0 { cores } else { background_threads };
        Ok(Self {
            requests: Mutex::new(requests),
            background: Mutex::new(None),
            path,
            env,
            background_threads: threads,
            library: library.to_path_buf(),
        })
    }

    /// Make the background session from the graph file (a failure is not kept: the next
    /// background pass tries again).
    fn background_session(&self) -> Result<Session, EmbedError> {
        let model = std::fs::read(&self.path).map_err(|e| {
            EmbedError::runtime(format!("local embedder: cannot read {}: {e}", self.path.display()))
        })?;
        session(self.env, &model, self.background_threads, true).map_err(|e| {
            EmbedError::runtime(format!(
                "local embedder: ONNX Runtime cannot load {} for background work: {e}",
                self.path.display()
            ))
        })
    }

    /// One run over `seqs` (padded here to the longest): their unit vectors, in order.
    pub(crate) fn vectors(
        &self,
        seqs: &[Vec<u32>],
        background: bool,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let b = seqs.len();
        let t = seqs.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut ids = vec![0i64; b * t];
        let mut mask = vec![0i64; b * t];
        for (i, seq) in seqs.iter().enumerate() {
            for (j, &id) in seq.iter().enumerate() {
                ids[i * t + j] = i64::from(id);
                mask[i * t + j] = 1;
            }
        }
        let err = |e: ort::Error| EmbedError::runtime(format!("local embedder: ONNX Runtime: {e}"));
        let shape = [b as i64, t as i64];
        let ids = Tensor::from_array((shape, ids)).map_err(err)?;
        let mask = Tensor::from_array((shape, mask)).map_err(err)?;
        let poisoned = || EmbedError::bug("local embedder: an ONNX Runtime session was poisoned");
        let inputs = ort::inputs!["input_ids" => ids, "attention_mask" => mask];
        let mut requests;
        let mut background_guard;
        let session: &mut Session = if background {
            background_guard = self.background.lock().map_err(|_| poisoned())?;
            if background_guard.is_none() {
                *background_guard = Some(self.background_session()?);
            }
            background_guard.as_mut().expect("made above")
        } else {
            requests = self.requests.lock().map_err(|_| poisoned())?;
            &mut requests
        };
        let outputs = session.run(inputs).map_err(err)?;
        let (shape, data) = outputs[OUTPUT].try_extract_tensor::<f32>().map_err(err)?;
        let dims = shape.get(1).copied().unwrap_or(0) as usize;
        if shape.len() != 2 || shape[0] as usize != b || dims == 0 {
            return Err(EmbedError::bug(format!(
                "local embedder: ONNX output has shape {shape:?} for {b} texts"
            )));
        }
        Ok(data.chunks(dims).map(<[f32]>::to_vec).collect())
    }
}
