#!/usr/bin/env python3
"""Offline re-ranking of the engine's fused LoCoMo candidates (realistic message ingestion).

    engram-bench locomo --embedder builtin --mode hybrid --corpus messages --dump-hits b.jsonl
    python3 benches/locomo_rerank.py b.jsonl

Each line of the dump is one question with the engine's fused candidates, best first (at most
20: the bench's limit), as the engine ranked them at no score floor. The rows re-order those
candidates with rules that use the conversation structure (the session of a turn is its
`D<session>` prefix, its position the number after the colon) and print overall Recall@5/10/20
and R@10 per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop):

- session diversity: greedy, each next pick maximises `rank / (1 + a · hits already taken from
  its session)` (spreads the top 10 over sessions, for evidence spread over several);
- neighbour support: `rank + a · max(rank of the turns next to it)` (an answer next to its
  question);
- session support: `rank + b · sum(rank of the top 5 in its session)` (a session that holds
  several hits is the right one).

Re-ordering cannot lift R@20 (the candidates are the same), so this bounds what any rule on
these candidates can gain at k = 10. Standard library only.
"""
import collections
import json
import sys

QS = [json.loads(line) for line in open(sys.argv[1])]


def sess(d):
    return d.split(":")[0]


def turn(d):
    return int(d.split(":")[1])


def recall(ranked, k):
    by = collections.defaultdict(list)
    for q, r in zip(QS, ranked):
        top = r[:k]
        by[q["cat"]].append(sum(1 for e in q["ev"] if e in top) / len(q["ev"]) if q["ev"] else 0)
    every = [x for v in by.values() for x in v]
    return sum(every) / len(every), {c: sum(v) / len(v) for c, v in sorted(by.items())}


def row(name, rule):
    ranked = [[d for d in rule(q) if d] for q in QS]
    r5, _ = recall(ranked, 5)
    r10, cats = recall(ranked, 10)
    r20, _ = recall(ranked, 20)
    print(f"| {name} | {r5:.3f} | {r10:.3f} | {r20:.3f} | "
          + " | ".join(f"{cats.get(c, 0):.3f}" for c in (1, 2, 3, 4)) + " |")


def engine(q):
    return [h["d"] for h in q["hits"]]


def diversity(a):
    def rule(q):
        left, out, taken = list(q["hits"]), [], collections.Counter()
        while left:
            best = max(left, key=lambda h: h["rank"] / (1 + a * taken[sess(h["d"])]))
            left.remove(best)
            out.append(best["d"])
            taken[sess(best["d"])] += 1
        return out
    return rule


def neighbours(a):
    def rule(q):
        sc = {h["d"]: h["rank"] for h in q["hits"] if h["d"]}
        near = lambda d: max(sc.get(f"{sess(d)}:{turn(d) + s}", 0) for s in (-1, 1))
        return sorted(sc, key=lambda d: -(sc[d] + a * near(d)))
    return rule


def session_support(b, top=5):
    def rule(q):
        sc = {h["d"]: h["rank"] for h in q["hits"] if h["d"]}
        support = collections.Counter()
        for d in list(sc)[:top]:
            support[sess(d)] += sc[d]
        return sorted(sc, key=lambda d: -(sc[d] + b * support[sess(d)]))
    return rule


def main():
    print("| order | R@5 | R@10 | R@20 | R@10 1 | R@10 2 | R@10 3 | R@10 4 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    row("engine (as dumped)", engine)
    for a in (0.1, 0.3, 1.0):
        row(f"session diversity a = {a}", diversity(a))
    for a in (0.1, 0.3, 0.5):
        row(f"neighbour support a = {a}", neighbours(a))
    for b in (0.1, 0.2, 0.5):
        row(f"session support b = {b}", session_support(b))


if __name__ == "__main__":
    main()
