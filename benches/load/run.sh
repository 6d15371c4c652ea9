#!/usr/bin/env bash
# Load test on loopback with wrk (Debian package `wrk`, installed if missing):
#   1. steady: a mixed read/write load (benches/load/mixed.lua: 60% search, 20% remember,
#      10% list, 10% context; 20 users seeded with 50 facts each) at a stated concurrency,
#      rate limit off; reports throughput, p50/p90/p99 and every status (expect only 2xx);
#   2. saturated: the same load against a server with a low per-key rate limit and a small
#      concurrency limit, at 4x the connections; expect only 2xx, 429 and 503, no socket
#      errors and no 5xx other than 503.
#
# Usage: benches/load/run.sh [engram binary] [seconds] [connections]
#   defaults: target/release/engram, 30, 16 (the figures in benches/README.md)
# Embedder: the built-in one (the default of `engram serve`).
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN="${1:-target/release/engram}"
SECS="${2:-30}"
CONNS="${3:-16}"
command -v wrk >/dev/null || { apt-get install -y wrk >/dev/null 2>&1 || sudo apt-get install -y wrk >/dev/null; }

tmp="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT

start() { # start <log> <flags...>; sets URL and PID (runs in this shell, not a subshell)
    local log="$1"; shift
    "$BIN" --data-dir "$tmp/store" --embedder builtin serve --addr 127.0.0.1:0 "$@" >"$log" 2>&1 &
    PID=$!
    pids+=("$PID")
    URL=""
    for _ in $(seq 1 100); do
        URL="$(sed -n 's/^engram listening on //p' "$log" | head -n 1)"
        [ -n "$URL" ] && break
        sleep 0.2
    done
    [ -n "$URL" ] || { cat "$log" >&2; exit 1; }
}

key="$("$BIN" --data-dir "$tmp/store" --embedder builtin keys create --tenant load --role admin 2>/dev/null)"
export ENGRAM_KEY="$key"
start "$tmp/steady.log" --rate-limit 0
url="$URL"
for u in $(seq 0 19); do
    body=$(python3 -c "import json,sys; print(json.dumps({'dedup': False, 'memories': [{'content': f'The user-{sys.argv[1]} fact number {i} is about topic {i % 7}.', 'user_id': f'user-{sys.argv[1]}'} for i in range(50)]}))" "$u")
    curl -sf -o /dev/null -H "Authorization: Bearer $key" -H 'content-type: application/json' \
        -d "$body" "$url/v1/memories/batch"
done

echo "== steady: $CONNS connections, 2 threads, ${SECS}s, rate limit off"
wrk -t2 -c"$CONNS" -d"${SECS}s" --latency -s benches/load/mixed.lua "$url" | grep -E "statuses|requests:|throughput"
kill "$PID"; wait "$PID" 2>/dev/null || true

sat_conns=$((CONNS * 4))
start "$tmp/saturated.log" --rate-limit 200 --rate-limit-burst 50 --max-concurrent-requests 8
url="$URL"
echo "== saturated: $sat_conns connections, --rate-limit 200 --max-concurrent-requests 8, 10s"
wrk -t2 -c"$sat_conns" -d10s -s benches/load/mixed.lua "$url" | grep -E "statuses|requests:|throughput"
