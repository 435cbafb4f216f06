#!/bin/sh
# Installs the Debian packages Specula builds and tests with, only those missing.
# Safe to run repeatedly; uses sudo when not root.
set -eu
PKGS="build-essential clang libclang-rt-dev pkg-config curl libcmocka-dev libjansson-dev libmicrohttpd-dev gnuplot-nox"
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing$missing" >&2
$SUDO apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >&2
