#!/usr/bin/env bash
# A login pod: sackd (configless auth for the Slurm clients) with SACKD_OPTIONS only, as upstream's login image
# (its container arguments are the operator's record of the same options), and with SSHD=1 sshd and sssd beside
# it (ssh-services.sh): `ssh` to the LoginSet's Service, or `kubectl exec` into the pod.
set -euo pipefail
. "${SLINKY_LIB:-/usr/local/lib/slinky}/ssh-services.sh"
mkdir -p /run/slurm
start_ssh_services
eval "set -- ${SACKD_OPTIONS:-}"
exec tini -g -- sackd -D "$@"
