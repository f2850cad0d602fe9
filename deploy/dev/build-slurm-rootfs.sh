#!/usr/bin/env bash
# Build a Debian forky chroot with Slurm 26.05 (slurmctld, slurmd, slurmrestd + JWT, munge) and cache it
# as a zstd tarball at $1. Why forky: it is the Debian release that ships Slurm 26.05 (docs/dev-stack.md).
set -euo pipefail
tarball=${1:?usage: build-slurm-rootfs.sh OUT_TARBALL}
if [ -s "$tarball" ]; then echo "slurm rootfs already cached at $tarball"; exit 0; fi
archive=$(python3 "$(dirname "$0")/debian_archive.py")
mkdir -p "$(dirname "$tarball")"
work=$(mktemp -d "$(dirname "$tarball")/rootfs-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$tarball")"
echo "[slurm-rootfs] debootstrap forky (about 2 minutes)"
# bookworm's debootstrap has no forky script; the sid script bootstraps forky fine.
debootstrap --variant=minbase \
  --include=slurmctld,slurmd,slurmrestd,slurm-client,munge,slurm-wlm-jwt-plugin,procps,iproute2 \
  forky "$work/root" "$archive" /usr/share/debootstrap/scripts/sid >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log"; exit 1; }
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
echo "[slurm-rootfs] packing $tarball"
tar -C "$work/root" -I 'zstd -3 -T0' -cf "$tarball.tmp" .
mv "$tarball.tmp" "$tarball"
echo "[slurm-rootfs] done"
