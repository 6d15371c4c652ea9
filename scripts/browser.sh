#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the web UI's end-to-end tests, on a bare machine.
#
# Debian's `chromium` and `chromium-driver` packages (/usr/bin/chromium, /usr/bin/chromedriver)
# are installed with apt-get when either is missing; otherwise nothing is done (idempotent;
# apt keeps its own package cache). Needs root, or sudo without a password, to install.
# The last line printed is the chromedriver path (the tests read it as ENGRAM_CHROMEDRIVER).
#
# Usage: scripts/browser.sh
set -euo pipefail

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }

if ! have; then
    SUDO=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else
            echo "browser: chromium and chromium-driver are missing and this user cannot install them (run as root, or: apt-get install chromium chromium-driver)" >&2
            exit 1
        fi
    fi
    echo "browser: installing chromium and chromium-driver from Debian" >&2
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq >&2 || true
    "${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2
fi
have || { echo "browser: chromium or chromedriver still missing after install" >&2; exit 1; }
chromium --version >&2 || true
command -v chromedriver
