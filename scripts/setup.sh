#!/bin/sh
# Installs the Debian packages Specula builds and tests with, only those missing,
# and the test-only openai npm client into tests/js/node_modules.
# Safe to run repeatedly; uses sudo when not root.
set -eu
PKGS="build-essential clang libclang-rt-dev pkg-config curl libcmocka-dev libjansson-dev libmicrohttpd-dev gnuplot-nox nginx"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# Node.js for the openai client (Debian's nodejs and npm, unless a node with
# npm is already installed, e.g. from NodeSource, whose nodejs bundles npm)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing$missing" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
fi
# The official openai npm client, for the server tests only (tests/js).
cd "$(dirname "$0")/../tests/js"
if [ ! -f node_modules/openai/package.json ]; then
  echo "setup: npm install (tests/js: openai)" >&2
  npm install --no-audit --no-fund --loglevel=error >&2
fi
