#!/usr/bin/env python3
"""Single `POST /v1/memories` latency (deduplicated writes) for a user who already has
100,000 active facts, against one with none, through a running engram server.

    engram serve --addr 127.0.0.1:15901 --data-dir /tmp/big &
    python3 benches/remember_big_user.py http://127.0.0.1:15901

Fills user `big` with 100 batches of 1,000 facts (`dedup: false`) unless it has them, then
times 30 single writes for `big` and for a fresh user: p50 and p95.
"""
import json
import random
import sys
import time
import urllib.request

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:15901"
WORDS = ["alpha", "river", "garden", "piano", "violet", "orbit", "copper", "maple", "harbor",
         "lantern", "meadow", "canyon", "ember", "falcon", "glacier", "hollow", "ivory",
         "jasper", "kelp", "lilac"]


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    return json.loads(urllib.request.urlopen(req).read())


def main():
    rng = random.Random(3)
    have = call("GET", "/v1/memories?user_id=big&limit=1")["memories"]
    if not have:
        t = time.time()
        for b in range(100):
            items = [{"content": f"The user note {b * 1000 + i}: {' '.join(rng.choices(WORDS, k=8))}",
                      "user_id": "big"} for i in range(1000)]
            call("POST", "/v1/memories/batch", {"memories": items, "dedup": False})
        print(f"filled 100,000 facts in {time.time() - t:.0f} s")
    fresh = f"fresh{int(time.time())}"
    for user in ["big", fresh]:
        times = []
        for i in range(30):
            t = time.time()
            call("POST", "/v1/memories", {"content": f"The user fact {i} about "
                                          f"{' '.join(rng.choices(WORDS, k=6))}", "user_id": user})
            times.append(time.time() - t)
        times.sort()
        print(f"{'100k facts' if user == 'big' else 'no facts'}: p50 {times[15] * 1000:.1f} ms, "
              f"p95 {times[28] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
