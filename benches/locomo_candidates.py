#!/usr/bin/env python3
"""Offline LoCoMo experiments on candidate generation for message search (issue 13).

    engram-bench locomo --embedder minilm --mode hybrid --corpus messages \
        --dump-corpus corpus.jsonl --dump-hits hits.jsonl
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy
    /tmp/venv/bin/python benches/locomo_candidates.py corpus.jsonl hits.jsonl

`--dump-corpus` gives every turn's vectors (`doc`: the turn after the two before it in its
session, as the background job embeds it; `alone`; `bare`: the same document without the
`Name: ` labels) and every question's vectors (`qv`; `uv`: the question without the
conversation's speaker names) and the store's keyword list 200 deep. The date list (questions
that name a time) is read from `--dump-hits`, which holds only the candidates that reached
the engine's top 20, so a replica is optimistic on those questions; compare rows with each
other, not with the engine's figures. Fusion is RRF k = 60 over 20 candidates per list,
ties broken by the keyword rank, as the engine does.

Rows: the fusion without and with the speaker factor (x2 on the fused rank of a turn whose
speaker the question names), the query vector without the names or blended, vector
pseudo-relevance feedback (Rocchio), a list of the best sessions' turns, turns ranked by
the best of two vectors, and keyword expansion by the built-in static embedder's nearest
words. Printed: overall Recall@1/5/10/20, then R@10 per category (1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop).
"""
import collections
import json
import re
import sqlite3
import struct
import sys

import numpy as np

KS = [1, 5, 10, 20]
STOP = set("""a about am an and are as at be been but by can could did do does for from had has
have he her him his how i if in into is it its me my of on or our she so than that the their them
then there these they this those to us was we were what when where which who whom whose why will
with would you your""".split())
TABLE = "crates/engram-providers/assets/minilm-static.bin"
TOKENIZER = "crates/engram-providers/assets/tokenizer.json"


def load(corpus, hits):
    turns, qs = collections.defaultdict(list), []
    for line in open(corpus):
        r = json.loads(line)
        (turns[r["sample"]].append(r) if r["kind"] == "turn" else qs.append(r))
    dates = {}
    for line in open(hits):
        r = json.loads(line)
        dates[(r["sample"], r["q"])] = {h["d"]: h["dr"] for h in r["hits"] if h.get("dr")}
    S = {}
    for s, ts in turns.items():
        S[s] = dict(ids=[t["d"] for t in ts], sess=np.array([t["session"] for t in ts]),
                    content=[t["content"] for t in ts],
                    **{k: np.array([t[k] for t in ts], dtype=np.float32)
                       for k in ("doc", "alone", "bare")})
        S[s]["idx"] = {d: i for i, d in enumerate(S[s]["ids"])}
        S[s]["names"] = sorted({c.split(":")[0] for c in S[s]["content"]})
    for q in qs:
        q["qv"], q["uv"] = (np.array(q[k], dtype=np.float32) for k in ("qv", "uv"))
        q["dates"] = [d for d, _ in sorted(dates.get((q["sample"], q["q"]), {}).items(),
                                           key=lambda x: x[1])]
        q["named"] = [n for n in S[q["sample"]]["names"] if re.search(rf"\b{n}\b", q["q"])]
    return S, qs


def report(name, qs, ranked):
    by = collections.defaultdict(lambda: [0, [0.0] * 4])
    for q, r in zip(qs, ranked):
        e = by[q["cat"]]
        e[0] += 1
        for i, k in enumerate(KS):
            top = set(r[:k])
            e[1][i] += sum(1 for d in q["ev"] if d in top) / len(q["ev"])
    n = sum(v[0] for v in by.values())
    o = [sum(v[1][i] for v in by.values()) / n for i in range(4)]
    c = [by[k][1][2] / by[k][0] for k in sorted(by)]
    print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in o + c) + " |", flush=True)


def fuse(s, lists, named=(), boost=1.0, weights=None):
    sc, tr = collections.defaultdict(float), {}
    for li, (kind, lst) in enumerate(lists):
        w = 1.0 if weights is None else weights[li]
        for i, d in enumerate(lst[:20]):
            sc[d] += w / (61 + i)
            if kind == "text":
                tr.setdefault(d, i)
    if named and boost != 1.0:
        for d in sc:
            if s["content"][s["idx"][d]].split(":")[0] in named:
                sc[d] *= boost
    return [d for d, _ in sorted(sc.items(), key=lambda x: (-x[1], tr.get(x[0], 1e9)))]


def ranked(s, sims):
    return [s["ids"][i] for i in np.argsort(-sims)]


def unit(v):
    return v / np.linalg.norm(v)


class Static:
    """The built-in embedder's token table, for nearest-word keyword expansion."""

    def __init__(self):
        b = open(TABLE, "rb").read()
        rows, dims, _, m = struct.unpack("<IIII", b[12:28])
        off = 28 + m
        sc = np.frombuffer(b, dtype="<f4", count=rows, offset=off)
        e = np.frombuffer(b, dtype=np.int8, count=rows * dims, offset=off + 4 * rows)
        e = e.reshape(rows, dims).astype(np.float32) * sc[:, None]
        n = np.linalg.norm(e, axis=1)
        n[n == 0] = 1
        self.u = e / n[:, None]
        self.vocab = json.load(open(TOKENIZER))["model"]["vocab"]


def words(q):
    out = []
    for w in re.split(r"[\W_]+", q.lower()):
        if w and w not in out:
            out.append(w)
    content = [w for w in out if w not in STOP]
    return content or out


def fts(s):
    c = sqlite3.connect(":memory:")
    c.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='unicode61 remove_diacritics 2')")
    c.executemany("INSERT INTO t(rowid, content) VALUES (?, ?)",
                  [(i + 1, x) for i, x in enumerate(s["content"])])
    c.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'row')")
    return c


def keyword_list(s, c, terms):
    n = len(s["ids"])
    ex = []
    for t in terms:
        e = f'"{t[:max(4, len(t) - 3)]}"*' if len(t) > 4 and not any(
            ch.isdigit() for ch in t) else f'"{t}"'
        df = c.execute("SELECT count(*) FROM t WHERE t MATCH ?", (e,)).fetchone()[0]
        if e not in ex and df < 0.5 * n:
            ex.append(e)
    if not ex:
        return []
    rows = c.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t) LIMIT 200",
                     (" OR ".join(ex),)).fetchall()
    return [s["ids"][r - 1] for (r,) in rows]


def main():
    S, qs = load(sys.argv[1], sys.argv[2])
    print("| variant | R@1 | R@5 | R@10 | R@20 | R@10 1 | R@10 2 | R@10 3 | R@10 4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def base(q, qv=None, m="doc", boost=2.0, extra=(), weights=None):
        s = S[q["sample"]]
        v = ranked(s, s[m] @ (q["qv"] if qv is None else qv))
        lists = [("vec", v), ("text", [d for d, _ in q["text"]]), ("date", q["dates"])]
        return fuse(s, lists + list(extra), q["named"], boost, weights)

    def blend(q, share):
        return unit(share * q["qv"] + (1 - share) * q["uv"]) if q["named"] else q["qv"]

    report("no speaker factor", qs, [base(q, boost=1.0) for q in qs])
    report("speaker factor x2", qs, [base(q) for q in qs])
    report("speaker factor x1.5", qs, [base(q, boost=1.5) for q in qs])
    for share in (0.0, 0.3, 0.5):
        report(f"x2, query vector {share} named + {1 - share} unnamed (engine: 0.3)", qs,
               [base(q, blend(q, share)) for q in qs])
    report("x2, unnamed, documents without labels", qs,
           [base(q, q["uv"] if q["named"] else q["qv"], m="bare") for q in qs])

    def rocchio(q, beta, m=3):
        s = S[q["sample"]]
        qv = blend(q, 0.3)
        top = base(q, qv)[:m]
        return base(q, unit(qv + beta * np.mean([s["doc"][s["idx"][d]] for d in top], axis=0)))

    for beta in (0.2, 0.5):
        report(f"engine + Rocchio on the fused top 3, beta {beta}", qs,
               [rocchio(q, beta) for q in qs])

    def sessions(q, w):
        s = S[q["sample"]]
        sims = s["doc"] @ blend(q, 0.3)
        best = {}
        for i, sn in enumerate(s["sess"]):
            best[sn] = max(best.get(sn, -1.0), float(sims[i]))
        top = sorted(best, key=lambda k: -best[k])[:2]
        lst = [s["ids"][i] for i in np.argsort(-sims) if s["sess"][i] in top]
        return base(q, blend(q, 0.3), extra=[("sess", lst)], weights=[1, 1, 1, w])

    report("engine + turns of the 2 best sessions (list weight 0.5)", qs,
           [sessions(q, 0.5) for q in qs])

    def best_of_two(q):
        s = S[q["sample"]]
        qv = blend(q, 0.3)
        v = ranked(s, np.maximum(s["doc"] @ qv, s["alone"] @ qv))
        lists = [("vec", v), ("text", [d for d, _ in q["text"]]), ("date", q["dates"])]
        return fuse(s, lists, q["named"], 2.0)

    report("engine, turns by max(document, turn alone)", qs, [best_of_two(q) for q in qs])

    st = Static()
    dbs = {k: fts(s) for k, s in S.items()}
    vocab = {}
    for k, c in dbs.items():
        ws = [w for (w, d) in c.execute("SELECT term, doc FROM v")
              if w.isalpha() and w in st.vocab and d < 0.5 * len(S[k]["ids"])]
        vocab[k] = (ws, st.u[[st.vocab[w] for w in ws]])

    def expanded(q, w):
        ws, m = vocab[q["sample"]]
        qt, extra = words(q["q"]), []
        for t in qt:
            if t not in st.vocab:
                continue
            sims = m @ st.u[st.vocab[t]]
            extra += [ws[i] for i in np.argsort(-sims)[:4]
                      if sims[i] >= 0.6 and not ws[i].startswith(t[:4]) and ws[i] not in qt]
        lst = keyword_list(S[q["sample"]], dbs[q["sample"]], extra) if extra else []
        return base(q, blend(q, 0.3), extra=[("exp", lst)], weights=[1, 1, 1, w])

    report("engine + keyword list of nearest words (weight 0.5)", qs,
           [expanded(q, 0.5) for q in qs])


if __name__ == "__main__":
    main()
