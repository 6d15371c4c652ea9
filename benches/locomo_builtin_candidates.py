#!/usr/bin/env python3
"""Offline LoCoMo experiments on the built-in embedder's candidates (issue 13, 2026-11-28).

    engram-bench locomo --embedder builtin --mode hybrid --corpus messages \
        --dump-corpus b.jsonl --dump-hits bh.jsonl
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy tokenizers safetensors
    /tmp/venv/bin/python benches/locomo_builtin_candidates.py b.jsonl bh.jsonl [wordllama.whl]

Re-embeds LoCoMo's turns with the built-in table in Python (the committed
`minilm-static.bin` and `tokenizer.json`, no padding: cosine 1.000 with the engine's
vectors) and fuses them as `locomo_candidates.py` does (RRF k = 60, 20 per list, the
keyword list from the dump, x2 for a speaker the question names). Rows, compared with each
other only (the replica's date list holds only what reached the engine's top 20):

- the document a message is embedded as: 0 to 6 previous turns, the two previous and the
  next one or two, the message counted more than its context;
- sentence vectors: the best of the message's sentences beside its document (max, sum, or
  a fourth list);
- a fused list restricted to the speaker the question names, instead of or beside the
  others;
- the static embeddings of WordLlama (`wordllama` wheel from PyPI, 256-d, Llama-2
  tokens), when its wheel is given: vector-only and fused.
"""
import collections
import re
import struct
import sys
import zipfile

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, "benches")
import locomo_candidates as L  # noqa: E402

TOK = Tokenizer.from_file(L.TOKENIZER)
TOK.no_padding()
TOK.no_truncation()
_b = open(L.TABLE, "rb").read()
_rows, _dims, _, _m = struct.unpack("<IIII", _b[12:28])
_off = 28 + _m
_sc = np.frombuffer(_b, dtype="<f4", count=_rows, offset=_off)
E = np.frombuffer(_b, dtype=np.int8, count=_rows * _dims, offset=_off + 4 * _rows)
E = E.reshape(_rows, _dims).astype(np.float32) * _sc[:, None]


def emb(text, table=E, tok=TOK, mean=False):
    ids = tok.encode(text, add_special_tokens=False).ids
    v = (table[ids].mean(0) if mean else table[ids].sum(0)) if ids else table[0]
    return v / (np.linalg.norm(v) or 1.0)


def doc_of(before, m, n=2, chars=800):
    budget, lines = max(0, chars - len(m)), []
    for x in list(reversed(before))[:n]:
        x = x.strip()
        if not x or budget == 0:
            continue
        keep = min(len(x), budget)
        lines.append(x[len(x) - keep:])
        budget -= keep
    lines.reverse()
    lines.append(m)
    return "\n".join(lines)


def fuse(s, lists, named, weights=None, boost=2.0):
    sc, tr = collections.defaultdict(float), {}
    for li, (kind, lst) in enumerate(lists):
        for i, d in enumerate(lst[:20]):
            sc[d] += (1.0 if weights is None else weights[li]) / (61 + i)
            if kind == "text":
                tr.setdefault(d, i)
    for d in sc:
        if s["content"][s["idx"][d]].split(":")[0] in named:
            sc[d] *= boost
    return [d for d, _ in sorted(sc.items(), key=lambda x: (-x[1], tr.get(x[0], 1e9)))]


def main():
    S, qs = L.load(sys.argv[1], sys.argv[2])
    print("| variant | R@1 | R@5 | R@10 | R@20 | R@10 1 | R@10 2 | R@10 3 | R@10 4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def qvec(q):
        return L.unit(0.3 * q["qv"] + 0.7 * q["uv"]) if q["named"] else q["qv"]

    def base_lists(q, vec):
        s = S[q["sample"]]
        return [("vec", L.ranked(s, vec)), ("text", [d for d, _ in q["text"]]),
                ("date", q["dates"])]

    def same_session(s, i, js):
        return [s["content"][j] for j in js if 0 <= j < len(s["ids"]) and s["sess"][j] == s["sess"][i]]

    def documents(prev, nxt=0, w_next=0.5, own=1.0):
        for s in S.values():
            out = []
            for i, c in enumerate(s["content"]):
                v = emb(doc_of(same_session(s, i, range(i - prev, i)), c, prev))
                after = same_session(s, i, range(i + 1, i + 1 + nxt))
                if after:
                    v = L.unit(v + 0.5 * w_next * emb("\n".join(after)))
                if own != 1.0:
                    v = L.unit(v + (own - 1.0) * emb(c))
                out.append(v)
            s["cdoc"] = np.array(out)
        return [fuse(S[q["sample"]], base_lists(q, S[q["sample"]]["cdoc"] @ qvec(q)), q["named"])
                for q in qs]

    for n in (0, 1, 2, 3, 4, 6):
        L.report(f"document: {n} previous turns (engine: 2)", qs, documents(n))
    L.report("document: 3 previous, the message counted x1.5", qs, documents(3, own=1.5))
    for nxt, w in ((1, 0.5), (1, 1.0), (2, 0.5)):
        L.report(f"document: 2 previous + the next {nxt} (weight {w})", qs, documents(2, nxt, w))

    # Sentence vectors beside the document.
    for s in S.values():
        vs, own = [], []
        for i, c in enumerate(s["content"]):
            name, _, body = c.partition(": ")
            for p in [p.strip() for p in re.split(r"(?<=[.!?])\s+", body) if p.strip()]:
                vs.append(emb(f"{name}: {p}"))
                own.append(i)
        s["sv"], s["own"] = np.array(vs), np.array(own)

    def sentences(q, how, w=1.0):
        s = S[q["sample"]]
        v = qvec(q)
        d = s["doc"] @ v
        best = np.full(len(d), -1.0)
        np.maximum.at(best, s["own"], s["sv"] @ v)
        if how == "max":
            return fuse(s, base_lists(q, np.maximum(d, best)), q["named"])
        if how == "sum":
            return fuse(s, base_lists(q, d + w * best), q["named"])
        lists = base_lists(q, d) + [("sent", L.ranked(s, best))]
        return fuse(s, lists, q["named"], [1, 1, 1, w])

    L.report("document and best sentence: max", qs, [sentences(q, "max") for q in qs])
    for w in (0.3, 1.0):
        L.report(f"document + {w} x best sentence", qs, [sentences(q, "sum", w) for q in qs])
        L.report(f"best sentence as a fourth list (weight {w})", qs,
                 [sentences(q, "list", w) for q in qs])

    # Lists restricted to the speaker the question names.
    def speaker_lists(q, mode, w=1.0):
        s = S[q["sample"]]
        lists = base_lists(q, s["doc"] @ qvec(q))
        if not q["named"]:
            return fuse(s, lists, q["named"])
        by = [[d for d in lst if s["content"][s["idx"][d]].split(":")[0] in q["named"]]
              for _, lst in lists[:2]]
        if mode == "replace":
            return fuse(s, [("vec", by[0]), ("text", by[1]), lists[2]], q["named"])
        return fuse(s, lists + [("vs", by[0]), ("ts", by[1])], q["named"], [1, 1, 1, w, w])

    L.report("speaker's turns only", qs, [speaker_lists(q, "replace") for q in qs])
    for w in (0.5, 1.0):
        L.report(f"+ speaker's turns as two more lists (weight {w})", qs,
                 [speaker_lists(q, "add", w) for q in qs])

    if len(sys.argv) > 3:
        z = zipfile.ZipFile(sys.argv[3])
        import safetensors.numpy as stn
        w = stn.load(z.read("wordllama/weights/l2_supercat_256.safetensors"))
        table = w["embedding.weight"].astype(np.float32)
        tok = Tokenizer.from_str(z.read("wordllama/tokenizers/l2_supercat_tokenizer_config.json").decode())
        tok.no_padding()
        tok.no_truncation()
        for s in S.values():
            s["wdoc"] = np.array([
                emb(doc_of(same_session(s, i, range(i - 2, i)), c), table, tok, mean=True)
                for i, c in enumerate(s["content"])])

        def wl(q, fused):
            s = S[q["sample"]]
            u = q["q"]
            for n in q["named"]:
                u = re.sub(rf"\b{n}('s)?\b", "", u)
            a, b = emb(q["q"], table, tok, True), emb(u, table, tok, True)
            v = L.unit(0.3 * a + 0.7 * b) if q["named"] else a
            lists = base_lists(q, s["wdoc"] @ v)
            return fuse(s, lists if fused else lists[:1], q["named"], boost=2.0 if fused else 1.0)

        L.report("WordLlama vectors alone", qs, [wl(q, False) for q in qs])
        L.report("WordLlama vectors, fused", qs, [wl(q, True) for q in qs])


if __name__ == "__main__":
    main()
