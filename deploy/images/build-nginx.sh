#!/usr/bin/env bash
# Build the nginx image of the bridge's examples with podman (deploy/images/nginx/Containerfile; docs/images.md):
#
#   deploy/images/build-nginx.sh [TAG]     default: localhost/slinky/nginx:1.22
#
# Over the project's base image (localhost/slinky-base:bookworm, made by deploy/images/build.sh when missing);
# the one build step that downloads: Debian's nginx-light package, from the base's Debian mirror.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CONTAINERS_CONF="$here/containers.conf"
tag=${1:-localhost/slinky/nginx:1.22}
base=${BASE:-localhost/slinky-base:bookworm}
command -v podman >/dev/null || { echo "build-nginx.sh: podman is missing: apt-get install -y podman runc" >&2; exit 1; }
if ! podman image exists "$base"; then
  ONLY_BASE=1 bash "$here/build.sh" >&2
fi
printf '%s podman build %s\n' "$(date +%T)" "$tag" >&2
podman build --quiet --pull=never --build-arg "BASE=$base" -f "$here/nginx/Containerfile" -t "$tag" "$here/nginx" >/dev/null
podman run --rm --network=none "$tag" nginx -v 2>&1 | grep -q 'nginx/' || { echo "build-nginx.sh: nginx -v failed in $tag" >&2; exit 1; }
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$tag"
