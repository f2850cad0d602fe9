#!/usr/bin/env bash
# sackd in the foreground: SACKD_OPTIONS, then the container's arguments (as upstream's sackd image).
set -euo pipefail
mkdir -p /run/slurm
eval "set -- ${SACKD_OPTIONS:-} \"\$@\""
exec tini -g -- sackd -D "$@"
