#!/usr/bin/env bash
# Build a Debian forky chroot with Slurm 26.05 (slurmctld, slurmd, slurmrestd + JWT, slurmdbd, sackd, the
# client commands, munge) and cache it as a zstd tarball at $1. Why forky: it is the Debian release that ships
# Slurm 26.05 (docs/dev-stack.md).
set -euo pipefail
tarball=${1:?usage: build-slurm-rootfs.sh OUT_TARBALL}
# What the tarball holds; a tarball cached under another id is rebuilt (slinky/dev/stack.py reads this line,
# and extracts a chroot again whose /etc/slinky-rootfs-id differs).
build_id="forky-slurm-26.05+slurmdbd+sackd+bookworm-libmariadb-1"
if [ -s "$tarball" ] && [ "$(cat "$tarball.id" 2>/dev/null)" = "$build_id" ]; then
  echo "slurm rootfs already cached at $tarball ($build_id)"; exit 0
fi
archive=$(python3 "$(dirname "$0")/debian_archive.py")
mkdir -p "$(dirname "$tarball")"
work=$(mktemp -d "$(dirname "$tarball")/rootfs-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$tarball")"
echo "[slurm-rootfs] debootstrap forky (about 2 minutes)"
# bookworm's debootstrap has no forky script; the sid script bootstraps forky fine.
debootstrap --variant=minbase \
  --include=slurmctld,slurmd,slurmrestd,slurmdbd,sackd,slurm-client,munge,slurm-wlm-jwt-plugin,procps,iproute2 \
  forky "$work/root" "$archive" /usr/share/debootstrap/scripts/sid >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log"; exit 1; }
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
# forky's slurmdbd with forky's libmariadb3 (11.8) dies at start in _check_mysql_concat_is_sane; with
# bookworm's libmariadb3 (10.11) it works. Keep that one library beside the chroot's, for slurmdbd only
# (LD_LIBRARY_PATH=/opt/slinky/libmariadb).
echo "[slurm-rootfs] bookworm's libmariadb3 for slurmdbd"
(cd "$work" && apt-get download libmariadb3 >/dev/null)
dpkg-deb -x "$work"/libmariadb3_*.deb "$work/libmariadb"
mkdir -p "$work/root/opt/slinky/libmariadb"
cp -a "$work"/libmariadb/usr/lib/*/libmariadb.so.3 "$work/root/opt/slinky/libmariadb/"
echo "$build_id" > "$work/root/etc/slinky-rootfs-id"
echo "[slurm-rootfs] packing $tarball"
tar -C "$work/root" -I 'zstd -3 -T0' -cf "$tarball.tmp" .
mv "$tarball.tmp" "$tarball"
echo "$build_id" > "$tarball.id"
echo "[slurm-rootfs] done"
