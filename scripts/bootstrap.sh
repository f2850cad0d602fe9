#!/usr/bin/env bash
# Install what the project needs on a Debian 12 machine: uv (in a cached venv, outside the repo) and the
# project's Python environment from the lock file. Host packages (Go, etcd, debootstrap...) are installed by
# `slinky dev up` itself, on first use.
set -euo pipefail
cache=${SLINKY_CACHE_DIR:-$HOME/.cache/slinky-temporal}
uv=$(command -v uv || true)
if [ -z "$uv" ]; then
  uv="$cache/uv-venv/bin/uv"
  if [ ! -x "$uv" ]; then
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
      [ "$(id -u)" = 0 ] || { echo "bootstrap: python3-venv is missing; run as root or: apt-get install python3-venv" >&2; exit 1; }
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    fi
    python3 -m venv "$cache/uv-venv"
    "$cache/uv-venv/bin/pip" install -q uv
  fi
fi
"$uv" sync --frozen -q
