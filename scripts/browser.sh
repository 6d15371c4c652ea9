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

have || bash "$(dirname "$0")/apt-install.sh" browser chromium chromium-driver
have || { echo "browser: chromium or chromedriver still missing after install" >&2; exit 1; }
chromium --version >&2 || true
command -v chromedriver
