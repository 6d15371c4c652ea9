#!/usr/bin/env bash
# Put ONNX Runtime and an ONNX export of the model into a model folder, so engram's local
# embedder runs it about four times faster than candle (benches/README.md, "Faster
# inference"). Called by scripts/fetch-model.sh; idempotent and cached:
#   - the library comes from the `onnxruntime` PyPI wheel (kept in $ENGRAM_CACHE_DIR/wheels),
#     copied into the folder as libonnxruntime.so;
#   - model.onnx (and model.int8.onnx, its weights quantised to int8) are written by
#     scripts/export-onnx.py from the folder's own weights, in a venv
#     ($ENGRAM_CACHE_DIR/onnx-venv) holding onnx, numpy, safetensors and onnxruntime.
# Set ENGRAM_ONNX=0 to skip (the folder then runs on candle).
#
# Usage: scripts/fetch-onnx.sh MODEL_DIR
set -euo pipefail

MODEL_DIR="$1"
[ "${ENGRAM_ONNX:-1}" = "0" ] && exit 0
ORT_VERSION="1.32.0"
CACHE_DIR="${ENGRAM_CACHE_DIR:-$HOME/.cache/engram}"
WHEEL_DIR="$CACHE_DIR/wheels"
VENV="$CACHE_DIR/onnx-venv"
HERE="$(cd "$(dirname "$0")" && pwd)"

if [ -s "$MODEL_DIR/model.onnx" ] && [ -s "$MODEL_DIR/model.int8.onnx" ] \
    && [ -s "$MODEL_DIR/libonnxruntime.so" ]; then
    exit 0
fi
mkdir -p "$WHEEL_DIR"

if [ ! -s "$MODEL_DIR/libonnxruntime.so" ]; then
    wheel="$(ls "$WHEEL_DIR"/onnxruntime-"$ORT_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
    if [ -z "$wheel" ]; then
        echo "fetch-onnx: downloading onnxruntime==$ORT_VERSION (~28 MB) from PyPI" >&2
        python3 -m pip download --no-deps --only-binary=:all: --dest "$WHEEL_DIR" \
            "onnxruntime==$ORT_VERSION" >&2
        wheel="$(ls "$WHEEL_DIR"/onnxruntime-"$ORT_VERSION"-*.whl | head -n 1)"
    fi
    python3 - "$wheel" "$MODEL_DIR/libonnxruntime.so" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist() if os.path.basename(n).startswith("libonnxruntime.so.")]
    if not names:
        sys.exit(f"fetch-onnx: no libonnxruntime.so in {wheel}")
    tmp = dest + ".part"
    with z.open(names[0]) as src, open(tmp, "wb") as out:
        out.write(src.read())
    os.replace(tmp, dest)
PY
fi

if [ ! -s "$MODEL_DIR/model.onnx" ] || [ ! -s "$MODEL_DIR/model.int8.onnx" ]; then
    if ! "$VENV/bin/python" -c "import onnx, numpy, safetensors, onnxruntime" 2>/dev/null; then
        echo "fetch-onnx: preparing $VENV (onnx, numpy, safetensors, onnxruntime from PyPI)" >&2
        python3 -m venv "$VENV" >&2
        "$VENV/bin/pip" install --quiet --find-links "$WHEEL_DIR" "onnx==1.23.2" \
            "numpy==2.4.6" "safetensors==0.8.0" "onnxruntime==$ORT_VERSION" >&2
    fi
    # The fp32 graph and its int8 variant (export-onnx.py names it model.onnx.int8.part).
    "$VENV/bin/python" "$HERE/export-onnx.py" "$MODEL_DIR" "$MODEL_DIR/model.onnx.part" --int8 >&2
    mv "$MODEL_DIR/model.onnx.int8.part" "$MODEL_DIR/model.int8.onnx"
    mv "$MODEL_DIR/model.onnx.part" "$MODEL_DIR/model.onnx"
fi
