#!/bin/sh
# Installs what `herald-bench compare` needs for its Socket.IO and sockjs-node peers: Node.js
# and npm from Debian's packages when missing, then the pinned packages of package-lock.json
# with `npm ci` in this directory (nothing is installed globally).
set -eu
DIR=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        nodejs npm
fi
cd "$DIR"
npm ci --no-audit --no-fund --loglevel=error
