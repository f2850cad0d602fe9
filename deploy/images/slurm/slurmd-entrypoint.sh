#!/usr/bin/env bash
# slurmd in the foreground, as upstream's slurmd image: SLURMD_OPTIONS, then the container's arguments. With
# POD_CPUS (CPUs) and POD_MEMORY (MiB) set from the pod's limits, the rest of the machine is kept from jobs:
# CoreSpecCount = cores - POD_CPUS / threads per core, MemSpecLimit = RealMemory - POD_MEMORY, added to
# --conf (as is Topology=POD_TOPOLOGY when set).
set -euo pipefail
. "${SLINKY_LIB:-/usr/local/lib/slinky}/ssh-services.sh"
POD_CPUS=${POD_CPUS:-0}
POD_MEMORY=${POD_MEMORY:-0}
POD_TOPOLOGY=${POD_TOPOLOGY:-}
mkdir -p /run/slurm /var/spool/slurmd
eval "set -- ${SLURMD_OPTIONS:-} \"\$@\""
args=("$@")

hardware=$(slurmd -C | head -n 1)
field() { sed -nE "s/.*(^| )$1=([0-9]+).*/\2/p" <<<"$hardware"; }

items=()
if ((POD_CPUS > 0)); then
  cores=$(($(field Boards) * $(field SocketsPerBoard) * $(field CoresPerSocket)))
  spec=$((cores - POD_CPUS / $(field ThreadsPerCore)))
  if ((spec > 0)); then items+=("CoreSpecCount=$spec"); fi
fi
if ((POD_MEMORY > 0)); then
  spec=$(($(field RealMemory) - POD_MEMORY))
  if ((spec > 0)); then items+=("MemSpecLimit=$spec"); fi
fi
if [ -n "$POD_TOPOLOGY" ]; then items+=("Topology=$POD_TOPOLOGY"); fi

if ((${#items[@]})); then
  extra="${items[*]}"
  found=0
  for i in "${!args[@]}"; do
    case "${args[$i]}" in
    --conf=*) args[i]="${args[$i]} $extra"; found=1 ;;
    --conf) if ((i + 1 < ${#args[@]})); then args[i + 1]="${args[$((i + 1))]} $extra"; found=1; fi ;;
    esac
  done
  if ((found == 0)); then args+=(--conf "$extra"); fi
fi
start_ssh_services  # SSHD=1 (a NodeSet's ssh.enabled): sshd and sssd beside slurmd
exec tini -g -- slurmd -D "${args[@]}"
