#!/usr/bin/env python3
"""Export all-MiniLM-L6-v2 (sentence-transformers, safetensors) to a self-contained ONNX file.

The graph is written by hand with onnx.helper from the safetensors weights: no torch, no model
hub, no network. It computes the whole sentence embedding:

    inputs   input_ids      int64 [batch, seq]   (token ids from tokenizer.json, padded with 0)
             attention_mask int64 [batch, seq]   (1 = token, 0 = padding)
    output   sentence_embedding float32 [batch, 384]
             = L2-normalise(mean over the attention mask of the last hidden state)

so a caller only tokenises (truncate to 256 tokens, pad each batch to its longest) and runs.
token_type_ids are all zero for single sentences, so the type-0 embedding row is folded into
the position embedding table. The attention mask enters as an additive bias (float32 lowest)
on masked keys; 1/sqrt(head_dim) is folded into the query weights. Same input -> byte-identical
output file (no timestamps, fixed names, fixed order).

Usage:
    python3 scripts/export-onnx.py MODEL_DIR OUT.onnx [--opset N] [--int8 [--int8-type qint8|quint8]]

    MODEL_DIR   directory with model.safetensors and config.json (scripts/fetch-model.sh)
    OUT.onnx    the fp32 model; with --int8 an int8 variant is written next to it as
                OUT.int8.onnx (weights of every MatMul and of the word-embedding Gather
                dynamically quantised by onnxruntime.quantization.quantize_dynamic,
                QInt8 = signed weights by default; activations are quantised at run time).

Needs only onnx, numpy and safetensors (pip install onnx numpy safetensors) for the fp32 file;
--int8 also needs onnxruntime (its quantization tool). See benches/onnx-probe.md for speed and
quality against the sentence-transformers golden vectors.
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file

DEFAULT_OPSET = 20  # ai.onnx Gelu is opset 20; LayerNormalization 17; onnxruntime >= 1.17


class Graph:
    """Collects nodes and initializers with deterministic, readable names."""

    def __init__(self):
        self.nodes = []
        self.inits = []
        self.count = 0

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type, inputs, name, n_out=1, **attrs):
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"{op_type}_{name}", **attrs))
        return outs[0] if n_out == 1 else outs


def build(weights, cfg, opset, fused=False):
    hidden = cfg["hidden_size"]
    heads = cfg["num_attention_heads"]
    head_dim = hidden // heads
    eps = float(cfg["layer_norm_eps"])
    act = cfg.get("hidden_act", "gelu")
    if act != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
        sys.exit(f"export-onnx: unsupported config (hidden_act={act})")

    def w(name):
        return weights[name].astype(np.float32)

    g = Graph()
    i64 = lambda v: np.array(v, dtype=np.int64)  # noqa: E731
    f32 = lambda v: np.array(v, dtype=np.float32)  # noqa: E731

    # ---- embeddings: word + (position + token type 0), LayerNorm
    g.const("emb.word", w("embeddings.word_embeddings.weight"))
    g.const("emb.pos_type0", w("embeddings.position_embeddings.weight")
            + w("embeddings.token_type_embeddings.weight")[0][None, :])
    g.const("emb.ln.w", w("embeddings.LayerNorm.weight"))
    g.const("emb.ln.b", w("embeddings.LayerNorm.bias"))
    g.const("c.zero1", i64([0]))
    g.const("c.axis0", i64([0]))
    g.const("c.axis1", i64([1]))
    g.const("c.eps_count", f32(1e-9))
    g.const("c.eps_norm", f32(1e-12))

    seq_len = g.op("Shape", ["input_ids"], "seq_len", start=1, end=2)
    word = g.op("Gather", ["emb.word", "input_ids"], "emb_word")
    pos = g.op("Slice", ["emb.pos_type0", "c.zero1", seq_len, "c.axis0"], "emb_pos")
    emb = g.op("Add", [word, pos], "emb_sum")
    x = g.op("LayerNormalization", [emb, "emb.ln.w", "emb.ln.b"], "emb_ln", axis=-1, epsilon=eps)

    maskf = g.op("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    if fused:
        mask_i32 = g.op("Cast", ["attention_mask"], "mask_i32", to=TensorProto.INT32)
    else:
        # attention bias [batch, 1, 1, seq]: 0 for tokens, float32 lowest for padding keys
        g.const("c.split_heads", i64([0, 0, heads, head_dim]))
        g.const("c.merge_heads", i64([0, 0, hidden]))
        g.const("c.one", f32(1.0))
        g.const("c.neg", f32(np.finfo(np.float32).min))
        g.const("c.axes12", i64([1, 2]))
        inv = g.op("Sub", ["c.one", maskf], "mask_inv")
        bias = g.op("Unsqueeze", [g.op("Mul", [inv, "c.neg"], "mask_bias2"), "c.axes12"], "mask_bias")
    scale = np.float32(1.0 / np.sqrt(head_dim))

    def linear(inp, n, tag, wt, b):
        """inp @ wt + b, wt stored transposed ([in, out]) so MatMul needs no Transpose."""
        g.const(f"{n}.{tag}.w", np.ascontiguousarray(wt, dtype=np.float32))
        g.const(f"{n}.{tag}.b", np.asarray(b, dtype=np.float32))
        return g.op("Add", [g.op("MatMul", [inp, f"{n}.{tag}.w"], f"{n}_{tag}_mm"), f"{n}.{tag}.b"], f"{n}_{tag}")

    def attention(x, a, n):
        """Standard-op self-attention; 1/sqrt(head_dim) is folded into the query weights."""
        q = linear(x, n, "q", w(a + "query.weight").T * scale, w(a + "query.bias") * scale)
        k = linear(x, n, "k", w(a + "key.weight").T, w(a + "key.bias"))
        v = linear(x, n, "v", w(a + "value.weight").T, w(a + "value.bias"))
        q = g.op("Transpose", [g.op("Reshape", [q, "c.split_heads"], f"{n}_q_r")], f"{n}_q_t", perm=[0, 2, 1, 3])
        k = g.op("Transpose", [g.op("Reshape", [k, "c.split_heads"], f"{n}_k_r")], f"{n}_k_t", perm=[0, 2, 3, 1])
        v = g.op("Transpose", [g.op("Reshape", [v, "c.split_heads"], f"{n}_v_r")], f"{n}_v_t", perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("MatMul", [q, k], f"{n}_scores"), bias], f"{n}_scores_masked")
        probs = g.op("Softmax", [scores], f"{n}_probs", axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v], f"{n}_ctx")], f"{n}_ctx_t", perm=[0, 2, 1, 3])
        return g.op("Reshape", [ctx, "c.merge_heads"], f"{n}_ctx_r")

    def fused_attention(x, a, n):
        """onnxruntime contrib op com.microsoft.Attention: one QKV GEMM, masked softmax, heads merged."""
        g.const(f"{n}.qkv.w", np.concatenate([w(a + t + ".weight").T for t in ("query", "key", "value")], axis=1))
        g.const(f"{n}.qkv.b", np.concatenate([w(a + t + ".bias") for t in ("query", "key", "value")]))
        return g.op("Attention", [x, f"{n}.qkv.w", f"{n}.qkv.b", mask_i32], f"{n}_attn", domain="com.microsoft",
                    num_heads=heads, mask_filter_value=float(np.finfo(np.float32).min))

    def layer_norm(inp, n, tag, prefix):
        g.const(f"{n}.{tag}.w", w(prefix + "LayerNorm.weight"))
        g.const(f"{n}.{tag}.b", w(prefix + "LayerNorm.bias"))
        return g.op("LayerNormalization", [inp, f"{n}.{tag}.w", f"{n}.{tag}.b"], f"{n}_{tag}", axis=-1, epsilon=eps)

    for li in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{li}."
        n = f"l{li}"
        ctx = (fused_attention if fused else attention)(x, p + "attention.self.", n)
        o = p + "attention.output."
        att = linear(ctx, n, "ao", w(o + "dense.weight").T, w(o + "dense.bias"))
        x = layer_norm(g.op("Add", [att, x], f"{n}_ao_res"), n, "ln1", o)
        h = linear(x, n, "ff1", w(p + "intermediate.dense.weight").T, w(p + "intermediate.dense.bias"))
        h = g.op("Gelu", [h], f"{n}_gelu")  # exact (erf) GELU, ai.onnx opset 20
        h = linear(h, n, "ff2", w(p + "output.dense.weight").T, w(p + "output.dense.bias"))
        x = layer_norm(g.op("Add", [h, x], f"{n}_ff_res"), n, "ln2", p + "output.")

    # ---- mean pooling over the mask, then L2 normalisation (as sentence-transformers)
    g.const("c.axis2", i64([2]))
    m3 = g.op("Unsqueeze", [maskf, "c.axis2"], "mask_f3")  # [batch, seq, 1]
    summed = g.op("ReduceSum", [g.op("Mul", [x, m3], "pool_masked"), "c.axis1"], "pool_sum", keepdims=0)
    count = g.op("ReduceSum", [m3, "c.axis1"], "pool_count", keepdims=0)
    count = g.op("Max", [count, "c.eps_count"], "pool_count_clamped")
    mean = g.op("Div", [summed, count], "pool_mean")
    norm = g.op("Sqrt", [g.op("ReduceSumSquare", [mean, "c.axis1"], "norm_sq", keepdims=1)], "norm")
    norm = g.op("Max", [norm, "c.eps_norm"], "norm_clamped")
    g.op("Div", [mean, norm], "sentence_embedding")

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        initializer=g.inits,
    )
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("com.microsoft", 1)] if fused else [])
    model = helper.make_model(graph, opset_imports=opsets,
                              producer_name="engram scripts/export-onnx.py", producer_version="1")
    model.ir_version = 9  # onnxruntime >= 1.16 reads IR 9; keep it stable across onnx versions
    model.doc_string = ("sentence-transformers/all-MiniLM-L6-v2: mean-pooled, L2-normalised "
                        "sentence embedding; tokenise with tokenizer.json, truncate to 256")
    onnx.checker.check_model(model, full_check=True)
    return model


def quantize(src, dst, weight_type):
    """Dynamic int8: weights of every MatMul / Attention (and the word-embedding Gather) stored as
    int8 with one scale per output column (per_channel: the FFN down-projections have a few
    outlier columns, |w| up to 7.9 against a p99.9 of 0.2, which per-tensor scales destroy);
    activations are quantised per tensor at run time (DynamicQuantizeLinear, uint8)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)  # quiet the "consider pre-processing" hint
    quantize_dynamic(src, dst, weight_type={"qint8": QuantType.QInt8, "quint8": QuantType.QUInt8}[weight_type],
                     op_types_to_quantize=["MatMul", "Attention", "Gather"], per_channel=True, reduce_range=False,
                     extra_options={"DefaultTensorType": TensorProto.FLOAT})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--opset", type=int, default=DEFAULT_OPSET)
    ap.add_argument("--int8", action="store_true", help="also write OUT.int8.onnx (needs onnxruntime)")
    ap.add_argument("--int8-type", choices=["qint8", "quint8"], default="qint8")
    ap.add_argument("--fused", action="store_true",
                    help="use onnxruntime's com.microsoft.Attention op (onnxruntime only)")
    args = ap.parse_args()
    if args.opset < 20:
        sys.exit("export-onnx: --opset must be >= 20 (Gelu)")

    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    st_path = os.path.join(args.model_dir, "model.safetensors")
    weights = load_file(st_path)
    model = build(weights, cfg, args.opset, fused=args.fused)
    # engram refuses a graph whose record does not match the folder's weights (its vectors
    # would be another model's under this model's id).
    with open(st_path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    helper.set_model_props(model, {"engram.weights_sha256": digest})
    onnx.save_model(model, args.out)
    print(args.out)
    if args.int8:
        root, ext = os.path.splitext(args.out)
        dst = f"{root}.int8{ext}"
        quantize(args.out, dst, args.int8_type)
        q = onnx.load(dst)
        helper.set_model_props(q, {"engram.weights_sha256": digest})
        onnx.save_model(q, dst)
        print(dst)


if __name__ == "__main__":
    main()
