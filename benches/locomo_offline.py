#!/usr/bin/env python3
"""Offline LoCoMo experiments on the raw lists of `engram-bench locomo --diagnose --dump-lists`.

    engram-bench locomo --embedder minilm --mode hybrid --diagnose --dump-lists minilm.jsonl
    python3 benches/locomo_offline.py minilm.jsonl [locomo_public.json]

The vector list of each question is taken from the dump (the engine's, 200 deep); text lists
are rebuilt on in-memory FTS5 tables of Python's own SQLite (same BM25 as the store's bundled
SQLite), one table per conversation, turns stored as the bench stores them. Query terms follow
`engram_store::text` (words = runs of alphanumerics, lowercased, deduplicated, the shared
English function words dropped unless nothing is left); the first rows check that the replica
reproduces the store. Fusion is plain RRF k = 60 (no decay/importance/rating factors: they
are neutral on a fresh store), ties broken by the better vector rank, then text rank.
Printed: overall Recall@1/5/10/20, then R@10 per category (1 multi-hop, 2 temporal,
3 open-domain, 4 single-hop). Standard library only.
"""
import collections
import json
import math
import re
import sqlite3
import sys

DATA = sys.argv[2] if len(sys.argv) > 2 else "/work/shared/eval/locomo/locomo_public.json"
STOP = set("""a about am an and are as at be been but by can could did do does for from had has
have he her him his how i if in into is it its me my of on or our she so than that the their them
then there these they this those to us was we were what when where which who whom whose why will
with would you your""".split())
KS = [1, 5, 10, 20]


def words(s):
    return [w for w in re.split(r"[\W_]+", s) if w]


def query_terms(q):
    terms = []
    for t in words(q):
        t = t.lower()
        if t not in terms:
            terms.append(t)
        if len(terms) == 64:
            break
    content = [t for t in terms if t not in STOP]
    return content or terms


def load_turns():
    turns = {}
    for s in json.load(open(DATA)):
        conv = s["conversation"]
        sessions = sorted(
            (int(k[8:]), v) for k, v in conv.items()
            if k.startswith("session_") and isinstance(v, list)
        )
        out = []
        for n, lst in sessions:
            date = conv.get(f"session_{n}_date_time", "")
            for t in lst:
                c = f"({date}) {t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    c += f" [shares {t['blip_caption']}]"
                out.append((t["dia_id"], c))
        turns[s["sample_id"]] = out
    return turns


TURNS = load_turns()
DBS = {}


def db(sid, tok):
    if (sid, tok) not in DBS:
        c = sqlite3.connect(":memory:")
        c.execute(f"CREATE VIRTUAL TABLE t USING fts5(content, tokenize='{tok}')")
        c.executemany("INSERT INTO t(rowid, content) VALUES (?, ?)",
                      [(i + 1, x[1]) for i, x in enumerate(TURNS[sid])])
        DBS[(sid, tok)] = c
    return DBS[(sid, tok)]


def phrase(t, prefix=False):
    return '"' + t.replace('"', '""') + '"' + ("*" if prefix else "")


def df(c, expr):
    return c.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expr,)).fetchone()[0]


def cut_word(t, keep_min, drop):
    """The store's rule with keep_min = 4, drop = 3 (`text::match_term`)."""
    keep = max(keep_min, len(t) - drop)
    if len(t) > keep and not any(ch.isdigit() for ch in t):
        return phrase(t[:keep], True)
    return phrase(t)


def text_list(sid, question, rule="exact", cut=0.5, tok="unicode61 remove_diacritics 2",
              extra=(), k=200):
    c = db(sid, tok)
    n = len(TURNS[sid])
    terms = query_terms(question) + [w for w in extra if w not in query_terms(question)]
    exprs = []
    for t in terms:
        if rule == "exact":
            e = phrase(t)
        elif rule == "prefix":
            e = phrase(t, True)
        elif rule.startswith("first"):  # first L characters of longer words, as a prefix
            L = int(rule[5:])
            e = phrase(t[:L], True) if len(t) > L else phrase(t)
        elif rule.startswith("cut"):  # cut<drop>min<keep_min>
            drop, keep_min = map(int, rule[3:].split("min"))
            e = cut_word(t, keep_min, drop)
        if e not in exprs:
            exprs.append(e)
    if cut is not None and n >= 4:
        exprs = [e for e in exprs if df(c, e) < cut * n]
    if not exprs:
        return []
    rows = c.execute("SELECT rowid, bm25(t) s FROM t WHERE t MATCH ? ORDER BY s LIMIT ?",
                     (" OR ".join(exprs), k)).fetchall()
    return [(TURNS[sid][r - 1][0], -s) for r, s in rows]


def trigram_list(sid, question, cut=0.5, k=200):
    c = db(sid, "trigram")
    n = len(TURNS[sid])
    grams = []
    for t in query_terms(question):
        for i in range(len(t) - 2):
            if t[i:i + 3] not in grams:
                grams.append(t[i:i + 3])
    exprs = [phrase(g) for g in grams if df(c, phrase(g)) < cut * n]
    if not exprs:
        return []
    rows = c.execute("SELECT rowid, bm25(t) s FROM t WHERE t MATCH ? ORDER BY s LIMIT ?",
                     (" OR ".join(exprs), k)).fetchall()
    return [(TURNS[sid][r - 1][0], -s) for r, s in rows]


def prf_list(sid, question, m, e, rule):
    """Pseudo-relevance feedback: add the e best tf·idf words of the first m hits."""
    first = text_list(sid, question, rule=rule)
    c = db(sid, "unicode61 remove_diacritics 2")
    n = len(TURNS[sid])
    text = dict(TURNS[sid])
    qt = set(query_terms(question))
    tf = collections.Counter()
    for d, _ in first[:m]:
        for w in set(query_terms(text[d])):
            if w not in qt and not w.isdigit() and len(w) >= 3:
                tf[w] += 1
    cands = []
    for w, f in tf.items():
        d = df(c, phrase(w))
        if d * 2 < n:
            cands.append((f * math.log(n / d), w))
    cands.sort(reverse=True)
    return text_list(sid, question, rule=rule, extra=[w for _, w in cands[:e]])


def recall(qs, ranked):
    by = collections.defaultdict(lambda: [0, [0.0] * 4])
    for q, r in zip(qs, ranked):
        e = by[q["category"]]
        e[0] += 1
        for i, k in enumerate(KS):
            e[1][i] += sum(1 for d in q["evidence"] if d in r[:k]) / len(q["evidence"])
    n = sum(v[0] for v in by.values())
    return [sum(v[1][i] for v in by.values()) / n for i in range(4)], \
        [by[c][1][2] / by[c][0] for c in sorted(by)]


def rrf(vec, txt, vcap, tcap=None, k=60.0):
    tcap = vcap if tcap is None else tcap
    sc, vr, tr = {}, {}, {}
    for i, (d, _) in enumerate(vec[:vcap]):
        sc[d] = sc.get(d, 0) + 1 / (k + i + 1)
        vr[d] = i
    for i, (d, _) in enumerate(txt[:tcap]):
        sc[d] = sc.get(d, 0) + 1 / (k + i + 1)
        tr[d] = i
    key = lambda x: (-x[1], vr.get(x[0], 1e9), tr.get(x[0], 1e9))
    return [d for d, _ in sorted(sc.items(), key=key)][:20]


def row(name, qs, ranked):
    o, c = recall(qs, ranked)
    print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in o + c) + " |")


def main():
    qs = [json.loads(line) for line in open(sys.argv[1])]
    print("| variant | R@1 | R@5 | R@10 | R@20 | R@10 1 | R@10 2 | R@10 3 | R@10 4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    row("dump: text list alone (the store's)", qs, [[d for d, _ in q["text"]] for q in qs])
    row("dump: RRF k=60, 20/list", qs, [rrf(q["vector"], q["text"], 20) for q in qs])
    lists = {}

    def text_variant(name, fn, caps=(20,)):
        tl = [fn(q) for q in qs]
        lists[name] = tl
        row(f"{name}: text alone", qs, [[d for d, _ in t] for t in tl])
        for cap in caps:
            row(f"{name}: RRF k=60, {cap}/list", qs,
                [rrf(q["vector"], t, cap) for q, t in zip(qs, tl)])

    sid = lambda q: q["sample_id"]
    text_variant("whole words (replica of the store before)",
                 lambda q: text_list(sid(q), q["question"]), caps=(20, 50))
    text_variant("word as a prefix (paint → paint*)",
                 lambda q: text_list(sid(q), q["question"], rule="prefix"))
    for L in (4, 5, 6):
        text_variant(f"first {L} characters as a prefix",
                     lambda q, L=L: text_list(sid(q), q["question"], rule=f"first{L}"))
    for drop, keep in ((3, 4), (2, 4), (1, 4), (3, 5), (2, 5)):
        name = f"cut ≤ {drop} final characters, keep ≥ {keep}"
        if (drop, keep) == (3, 4):
            name += " (the store now)"
        text_variant(name, lambda q, d=drop, k=keep: text_list(
            sid(q), q["question"], rule=f"cut{d}min{k}"), caps=(20, 50))
    for cut in (0.2, 0.3, None):
        text_variant(f"store rule, common-term cut at {cut}", lambda q, c=cut: text_list(
            sid(q), q["question"], rule="cut3min4", cut=c))
    text_variant("porter stemmer (English only)", lambda q: text_list(
        sid(q), q["question"], tok="porter unicode61 remove_diacritics 2"))
    text_variant("trigram tokenizer, OR of the query's trigrams",
                 lambda q: trigram_list(sid(q), q["question"]))
    for m, e in ((2, 3), (3, 5), (5, 10)):
        text_variant(f"store rule + pseudo-relevance feedback ({e} words of the top {m})",
                     lambda q, m=m, e=e: prf_list(sid(q), q["question"], m, e, "cut3min4"))
    store = lists["cut ≤ 3 final characters, keep ≥ 4 (the store now)"]
    for vc, tc in ((10, 10), (10, 20), (15, 15), (20, 10), (20, 15), (30, 10), (30, 20)):
        row(f"store rule: RRF k=60, {vc} vector / {tc} text candidates", qs,
            [rrf(q["vector"], t, vc, tc) for q, t in zip(qs, store)])
    for f in (0.3, 0.5):
        row(f"store rule: RRF k=60, 20/list, text hits ≥ {f} × the best BM25", qs,
            [rrf(q["vector"], [x for x in t if x[1] >= f * t[0][1]] if t else t, 20)
             for q, t in zip(qs, store)])
    for f in (0.8, 0.9):
        row(f"store rule: RRF k=60, 20/list, vector hits ≥ {f} × the best cosine", qs,
            [rrf([x for x in q["vector"] if x[1] >= f * q["vector"][0][1]], t, 20)
             for q, t in zip(qs, store)])


if __name__ == "__main__":
    main()
