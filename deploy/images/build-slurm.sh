#!/usr/bin/env bash
# Build the Slurm images offline with podman (deploy/images/slurm/Containerfile; docs/images.md):
#
#   deploy/images/build-slurm.sh [TAG_PREFIX]     default: localhost/slinky
#
# gives TAG_PREFIX/{slurmctld,slurmd,slurmrestd,slurmdbd,sackd,login}:26.05.
#
# 1. Base image TAG_PREFIX/slurm-base:26.05, once per rootfs build: the stack's cached Debian forky Slurm 26.05
#    chroot (deploy/dev/build-slurm-rootfs.sh, built first when missing), plus tini and openssh-server from the
#    same archive (no host keys baked in; no sssd: forky's archive has none today, docs/images.md),
#    the SlurmUser `slurm` moved to uid/gid 401 as in upstream's images, and the daemons' directories.
#    REBUILD_BASE=1 rebuilds it.
# 2. One `podman build --network=none --target NAME` per image over that base (entry point scripts only).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF="$here/containers.conf"
prefix=${1:-localhost/slinky}
tag=26.05
base="$prefix/slurm-base:$tag"
cache=${SLINKY_CACHE_DIR:-$HOME/.cache/slinky-temporal}
rootfs_tarball="$cache/slurm/rootfs-forky.tar.zst"
images=(slurmctld slurmd slurmrestd slurmdbd sackd login)
# What goes into the base besides the rootfs: change it and the base is built again.
base_id="$(cat "$rootfs_tarball.id" 2>/dev/null || true)+tini+sshd+uid401-2"

for tool in podman runc zstd; do
  command -v "$tool" >/dev/null || { echo "build-slurm.sh: $tool is missing: apt-get install -y podman runc zstd" >&2; exit 1; }
done
step() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

have_base() {
  podman image exists "$base" &&
    [ "$(podman image inspect --format '{{ index .Config.Labels "net.slurm.slinky.base-id" }}' "$base")" = "$base_id" ]
}

if [ "${REBUILD_BASE:-0}" = 1 ] || ! have_base; then
  bash "$repo/deploy/dev/build-slurm-rootfs.sh" "$rootfs_tarball" >&2
  base_id="$(cat "$rootfs_tarball.id")+tini+sshd+uid401-2"
  work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-base.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  root="$work/root"
  mkdir -p "$root"
  step "unpack $rootfs_tarball"
  tar -C "$root" -I zstd -xf "$rootfs_tarball"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  step "apt-get install tini openssh-server (chroot, the archive the rootfs came from)"
  # A private mount namespace: /dev and /proc for apt go away with it, whatever happens.
  unshare --mount --propagation private bash -euo pipefail -c '
    root=$1
    mount --rbind /dev "$root/dev"
    mount -t proc proc "$root/proc"
    chroot "$root" apt-get -qq -o Acquire::Check-Valid-Until=false update
    printf "#!/bin/sh\nexit 101\n" > "$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
    DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get -qq -y install --no-install-recommends \
      tini openssh-server >/dev/null
    rm -f "$root/usr/sbin/policy-rc.d" "$root"/etc/ssh/ssh_host_*  # no baked host keys: a Secret, or made at start
    chroot "$root" apt-get -qq clean
  ' _ "$root"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/etc/resolv.conf
  : > "$root/etc/resolv.conf"
  step "SlurmUser slurm -> uid/gid 401; daemon directories"
  old_uid=$(chroot "$root" id -u slurm)
  old_gid=$(chroot "$root" id -g slurm)
  chroot "$root" groupmod --gid 401 slurm
  chroot "$root" usermod --uid 401 --gid 401 slurm
  find "$root" -xdev -uid "$old_uid" -exec chown -h 401 {} +
  find "$root" -xdev -gid "$old_gid" -exec chgrp -h 401 {} +
  install -d -o 401 -g 401 "$root"/var/spool/slurmctld "$root"/var/log/slurm "$root"/run/slurmctld
  install -d "$root"/var/spool/slurmd "$root"/run/slurm
  step "import $base"
  tar -C "$root" -c . | podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "LABEL net.slurm.slinky.base-id=$base_id" \
    --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$work"
  trap - EXIT
fi

for image in "${images[@]}"; do
  step "podman build $prefix/$image:$tag"
  podman build --quiet --network=none --pull=never --build-arg "BASE=$base" --target "$image" \
    --label "org.opencontainers.image.title=$image" --label "org.opencontainers.image.version=$tag" \
    -f "$here/slurm/Containerfile" -t "$prefix/$image:$tag" "$here/slurm" >/dev/null
done
podman run --rm --network=none "$prefix/slurmd:$tag" -V 2>/dev/null | grep -q '^slurm' ||
  podman run --rm --network=none --entrypoint slurmd "$prefix/slurmd:$tag" -V
for image in "${images[@]}"; do
  podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$prefix/$image:$tag"
done
