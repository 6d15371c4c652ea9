#!/usr/bin/env bash
# Install Debian packages for the test suite's scripts (scripts/browser.sh, scripts/sdk-node.sh):
# apt-get as root, or through sudo without a password; otherwise fail saying what to install.
#
# Usage: scripts/apt-install.sh <caller name> <package>...
set -euo pipefail
who="$1"
shift
SUDO=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else
        echo "$who: $* missing and this user cannot install them (run as root, or: apt-get install $*)" >&2
        exit 1
    fi
fi
echo "$who: installing $* from Debian" >&2
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >&2 || true
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "$@" >&2
