#!/usr/bin/env python3
"""Offline LoCoMo experiment (issue 13): a message's keyword index with its context.

    engram-bench locomo --embedder minilm --mode hybrid --corpus messages \
        --dump-corpus corpus.jsonl --dump-hits hits.jsonl
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install numpy
    /tmp/venv/bin/python benches/locomo_context_keywords.py corpus.jsonl hits.jsonl

The vector side embeds each message after the two messages before it in its conversation
(`pipeline::messages::document_of`); the keyword side indexes the bare message. This
replica (the engine's fusion as in `benches/locomo_candidates.py`: RRF k = 60 over 20
candidates per list, the date list of `--dump-hits`, ties by keyword rank, x2 for a
speaker the question names, the query vector with the names at a share of 0.3) compares
keyword lists built in SQLite FTS5 the way the store builds them (query words as prefixes
of longer words, terms in half the messages or more dropped, BM25):

- over the bare messages (the store today);
- over two columns, the message and the two messages before it in its session, with the
  context column weighted w in FTS5's bm25() (w = 1: one document of three messages);
- the same context as a fourth list (weight 1), as measured before (benches/README.md).

Each variant is compared with the first by a paired bootstrap over the questions (2,000
resamples): mean R@10 difference, 95 % interval, questions better and worse.
"""
import collections
import sqlite3
import sys

import numpy as np

from locomo_candidates import KS, fuse, load as load_dumps, words


def load(corpus, hits):
    """The dumps as `locomo_candidates.load` reads them, plus each question's messages vector
    (the names at a share of 0.3, as the engine searches)."""
    S, qs = load_dumps(corpus, hits)
    for q in qs:
        v = 0.3 * q["qv"] + 0.7 * q["uv"] if q["named"] else q["qv"]
        q["v"] = v / np.linalg.norm(v)
    return S, qs


def index(s, context):
    """An FTS5 table of the session's messages: `content`, and `ctx` the two messages before."""
    c = sqlite3.connect(":memory:")
    c.execute("CREATE VIRTUAL TABLE t USING fts5(content, ctx, "
              "tokenize='unicode61 remove_diacritics 2')")
    rows = []
    for i, text in enumerate(s["content"]):
        before = [s["content"][j] for j in range(max(0, i - 2), i) if s["sess"][j] == s["sess"][i]]
        rows.append((i + 1, text, "\n".join(before) if context else ""))
    c.executemany("INSERT INTO t(rowid, content, ctx) VALUES (?, ?, ?)", rows)
    return c


def keyword_list(s, c, query, w, k=20):
    """The store's keyword list: prefixes, terms of half the messages or more (counted in the
    message column) dropped, BM25 with the context column weighted `w`."""
    n, ex = len(s["ids"]), []
    for t in words(query):
        e = (f'"{t[:max(4, len(t) - 3)]}"*' if len(t) > 4 and not any(ch.isdigit() for ch in t)
             else f'"{t}"')
        df = c.execute("SELECT count(*) FROM t WHERE content MATCH ?", (e,)).fetchone()[0]
        if e not in ex and df * 2 < n:
            ex.append(e)
    if not ex:
        return []
    rows = c.execute(f"SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t, 1.0, {w}) LIMIT {k}",
                     (" OR ".join(ex),)).fetchall()
    return [s["ids"][r - 1] for (r,) in rows]


def report(name, qs, ranked, base=None):
    by = collections.defaultdict(lambda: [0, [0.0] * 4])
    per = []
    for q, r in zip(qs, ranked):
        e = by[q["cat"]]
        e[0] += 1
        for i, k in enumerate(KS):
            got = sum(1 for d in q["ev"] if d in set(r[:k])) / len(q["ev"])
            e[1][i] += got
            if k == 10:
                per.append(got)
    n = sum(v[0] for v in by.values())
    o = [sum(v[1][i] for v in by.values()) / n for i in range(4)]
    c = [by[k][1][2] / by[k][0] for k in sorted(by)]
    per = np.array(per)
    diff = ""
    if base is not None:
        d = per - base
        rng = np.random.default_rng(1)
        m = d[rng.integers(0, len(d), size=(2000, len(d)))].mean(axis=1)
        diff = (f"{d.mean():+.3f} [{np.percentile(m, 2.5):+.3f}, {np.percentile(m, 97.5):+.3f}]"
                f" {(d > 0).sum()}/{(d < 0).sum()}")
    print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in o + c) + f" | {diff} |", flush=True)
    return per


def main():
    S, qs = load(sys.argv[1], sys.argv[2])
    bare = {k: index(s, False) for k, s in S.items()}
    ctx = {k: index(s, True) for k, s in S.items()}
    print("| keyword list | R@1 | R@5 | R@10 | R@20 | R@10 1 | R@10 2 | R@10 3 | R@10 4 "
          "| R@10 vs bare, 95 % interval, better/worse |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def run(kw, extra=None):
        out = []
        for q in qs:
            s = S[q["sample"]]
            vec = [s["ids"][i] for i in np.argsort(-(s["doc"] @ q["v"]))]
            lists = [("vec", vec), ("text", kw(q)), ("date", q["dates"])]
            if extra:
                lists.append(("extra", extra(q)))
            out.append(fuse(s, lists, q["named"], boost=2.0))
        return out

    base = report("bare messages (the store)", qs,
                  run(lambda q: keyword_list(S[q["sample"]], bare[q["sample"]], q["q"], 0.0)))
    for w in (0.1, 0.2, 0.25, 0.3, 0.5, 1.0):
        report(f"message + context column, w {w}", qs,
               run(lambda q: keyword_list(S[q["sample"]], ctx[q["sample"]], q["q"], w)), base)
    report("bare + context documents as a fourth list", qs,
           run(lambda q: keyword_list(S[q["sample"]], bare[q["sample"]], q["q"], 0.0),
               lambda q: keyword_list(S[q["sample"]], ctx[q["sample"]], q["q"], 1.0)), base)


if __name__ == "__main__":
    main()
