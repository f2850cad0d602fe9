#!/usr/bin/env bash
# slurmctld in the foreground: SLURMCTLD_OPTIONS, then the container's arguments (as upstream's image).
set -euo pipefail
mkdir -p /run/slurmctld
eval "set -- ${SLURMCTLD_OPTIONS:-} \"\$@\""
exec tini -g -- slurmctld -D "$@"
