#!/usr/bin/env bash
# The official OpenAI and Anthropic Python SDKs (PyPI), in a venv of their own, for the
# memory proxy's tests (crates/engram/tests/it/proxy.rs runs scripts/sdk/check.py with it).
# Idempotent and cached in $ENGRAM_CACHE_DIR/sdk-venv; every package pinned by
# scripts/sdk/constraints.txt. Prints the venv's python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE_DIR="${ENGRAM_CACHE_DIR:-$HOME/.cache/engram}"
VENV="$CACHE_DIR/sdk-venv"
CONSTRAINTS="scripts/sdk/constraints.txt"
want_openai="$(grep '^openai==' "$CONSTRAINTS")"
want_anthropic="$(grep '^anthropic==' "$CONSTRAINTS")"
if ! "$VENV/bin/pip" freeze 2>/dev/null | grep -qx "$want_openai" \
    || ! "$VENV/bin/pip" freeze 2>/dev/null | grep -qx "$want_anthropic"; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -c "$CONSTRAINTS" "$want_openai" "$want_anthropic" >&2
fi
echo "$VENV/bin/python"
