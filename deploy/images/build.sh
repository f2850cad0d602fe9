#!/usr/bin/env bash
# Build the slinky-temporal image with no registry access at build time (podman, runc, debootstrap).
#
#   deploy/images/build.sh [TAG]          default TAG: localhost/slinky-temporal:<project version>
#
# 1. Base image localhost/slinky-base:bookworm, once: a Debian bookworm minbase rootfs with python3 and
#    python3-venv from the host's own Debian mirror (MIRROR, default: the first URI of apt's sources),
#    imported with `podman import`. REBUILD_BASE=1 rebuilds it.
# 2. Context: the locked runtime wheels (`uv export --no-dev`, hashes kept) downloaded on the host through
#    pip's configured index, and the project's wheel (`uv build`).
# 3. `podman build --network=none` with deploy/images/containers.conf; hadolint on the Containerfile.
# ONLY_BASE=1: step 1 only.
# Optional: SAVE=path.oci.tar also writes an OCI archive (for `ctr import`, `kind load`, a registry push...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CONTAINERS_CONF="$here/containers.conf"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml" | head -1)
tag=${1:-localhost/slinky-temporal:$version}
base=${BASE:-localhost/slinky-base:bookworm}
uv=$(command -v uv || echo "$HOME/.cache/slinky-temporal/uv-venv/bin/uv")
work=${WORK_DIR:-$repo/build/image}
pyver=3.11   # bookworm's python3

for tool in podman runc; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing: apt-get install -y podman runc" >&2; exit 1; }
done

step() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

if [ "${REBUILD_BASE:-0}" = 1 ] || ! podman image exists "$base"; then
  command -v debootstrap >/dev/null || { echo "build.sh: apt-get install -y debootstrap" >&2; exit 1; }
  mirror=${MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)}
  mirror=${mirror:-$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null)}
  [ -n "$mirror" ] || { echo "build.sh: set MIRROR to a Debian mirror URL" >&2; exit 1; }
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  step "debootstrap bookworm from $mirror"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" >/dev/null
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
  step "import $base"
  tar -C "$rootfs" -c . | podman import --change 'CMD=["/usr/bin/python3"]' - "$base" >/dev/null
  rm -rf "$rootfs"
  trap - EXIT
fi
[ "${ONLY_BASE:-0}" = 1 ] && exit 0   # build-nginx.sh: only the base

step "context in $work"
rm -rf "$work" && mkdir -p "$work/wheels/project"
(cd "$repo" && "$uv" export --frozen --no-dev --no-emit-project --no-header --format requirements-txt) \
  > "$work/wheels/requirements.txt"
"$repo/.venv/bin/python" -m pip --version >/dev/null 2>&1 && pip=("$repo/.venv/bin/python" -m pip) || pip=(pip3)
# Wheels for bookworm (glibc 2.36, CPython 3.11, x86_64), whatever the host runs.
platforms=()
for p in manylinux_2_36_x86_64 manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 linux_x86_64; do
  platforms+=(--platform "$p")
done
"${pip[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --no-deps \
  --python-version "$pyver" --implementation cp "${platforms[@]}" \
  --require-hashes -r "$work/wheels/requirements.txt" -d "$work/wheels"
(cd "$repo" && "$uv" build --wheel --quiet --out-dir "$work/wheels/project")

if command -v hadolint >/dev/null || [ -x "$repo/.venv/bin/hadolint" ]; then
  step "hadolint"
  "$(command -v hadolint || echo "$repo/.venv/bin/hadolint")" "$here/Containerfile"
fi

step "podman build $tag"
wheels_id=$(cd "$work/wheels" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
podman build --network=none --pull=never --build-arg "BASE=$base" --build-arg "WHEELS_ID=$wheels_id" \
  -f "$here/Containerfile" -t "$tag" "$work"
podman run --rm --network=none "$tag" -c 'import workers.bridge.worker, workers.bridge.webhook, temporalio; print("import ok")'
if [ -n "${SAVE:-}" ]; then
  step "save $SAVE"
  podman save --format oci-archive -o "$SAVE" "$tag"
fi
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$tag"
