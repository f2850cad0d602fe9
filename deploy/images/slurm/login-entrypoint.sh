#!/usr/bin/env bash
# A login pod: sackd (configless auth for the Slurm clients) with SACKD_OPTIONS only, as upstream's login image
# (its container arguments are the operator's record of the same options). No sshd: `kubectl exec` into it.
set -euo pipefail
mkdir -p /run/slurm
eval "set -- ${SACKD_OPTIONS:-}"
exec tini -g -- sackd -D "$@"
