#!/usr/bin/env bash
# Build Kubernetes v1.20.2 from Debian bookworm's `kubernetes` source package with Debian's Go, offline, and
# cache the binaries in $1. Two sets, each stamped on its own:
#   control-plane (default): kube-apiserver, kube-controller-manager, kube-scheduler   (stamp BUILD_ID)
#   node: kubelet, kube-proxy, and the pause binary from build/pause (gcc -static)       (stamp BUILD_ID.node)
# Why this route: no registry reachable here ships an apiserver or kubelet binary (docs/dev-stack.md).
set -euo pipefail
out=${1:?usage: build-kubernetes.sh OUT_DIR [control-plane|node]}
set_name=${2:-control-plane}
case "$set_name" in
  control-plane) bins=(kube-apiserver kube-controller-manager kube-scheduler); stamp=BUILD_ID ;;
  node) bins=(kubelet kube-proxy pause); stamp=BUILD_ID.node ;;
  *) echo "build-kubernetes.sh: unknown set '$set_name' (control-plane or node)" >&2; exit 2 ;;
esac
work=${SLINKY_BUILD_DIR:-$(dirname "$out")/kube-build}
# The build's identity: the source package plus our fixes (below). Binaries cached under another id (a build
# made before a fix) are rebuilt, never reused silently. Change it whenever a fix changes. slinky/dev/stack.py
# reads this line.
build_id="kubernetes-1.20.2+reflect2-1.0.2+openapi-empty-string-1"
mkdir -p "$out" "$work"
cached=1
for b in "${bins[@]}"; do [ -x "$out/$b" ] || cached=0; done
if [ "$cached" = 1 ] && [ "$(cat "$out/$stamp" 2>/dev/null)" = "$build_id" ]; then
  echo "kubernetes $set_name binaries already cached in $out ($build_id)"; exit 0
fi
if [ -e "$out/${bins[0]}" ]; then
  echo "[kube-build] cached $set_name binaries are '$(cat "$out/$stamp" 2>/dev/null || echo 'without a build id')'," \
       "not '$build_id': rebuilding"
fi
for b in "${bins[@]}"; do rm -f "$out/$b"; done
rm -f "$out/$stamp"
# The Debian archive this machine already uses (no host name is written into the repo).
archive=$(python3 "$(dirname "$0")/debian_archive.py")
cd "$work"
mkdir -p apt/lists/partial apt/archives
printf 'deb-src %s bookworm main\n' "$archive" > apt/sources.list
aptopts=(-o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
         -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache::Archives="$work/apt/archives")
if ! ls kubernetes_*.orig.tar.* >/dev/null 2>&1; then
  echo "[kube-build] fetching Debian source package kubernetes"
  apt-get "${aptopts[@]}" update -qq
  apt-get "${aptopts[@]}" source --download-only kubernetes
fi
gopath="$work/gopath"
src="$gopath/src/k8s.io/kubernetes"
if [ ! -f "$src/Makefile" ]; then
  rm -rf "$gopath" tree && mkdir -p tree "$gopath/src/k8s.io"
  echo "[kube-build] extracting"
  tar -xf kubernetes_*.orig.tar.* -C tree
  top=$(find tree -mindepth 1 -maxdepth 1 -type d | head -n1)
  # Required fix: reflect2 1.0.1 crashes with Go >= 1.18 on the first map encode (custom resources).
  rm -rf "$top/vendor/github.com/modern-go/reflect2"
  cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$top/vendor/github.com/modern-go/reflect2"
  rm -f "$top/vendor/github.com/modern-go/reflect2/go.mod"
  mv "$top" "$src"
fi
# Required fix 2: empty strings in custom resources. The CR type check of both vendored OpenAPI validators
# treats a value as null when reflect.DeepEqual(reflect.Zero(T), reflect.ValueOf(data)) holds. That compares
# two reflect.Value structs, pointers included; since Go 1.18 an empty string boxed in an interface and
# reflect.Zero of string share the runtime's zero buffer, so "" compares equal to "zero" and is refused as
# null ('spec.x in body must be of type string: "null"'). Real 1.20 builds (Go 1.15) never matched it for a
# string read from JSON. Newer kube-openapi checks `data == nil` only; so do we. Idempotent, and verified:
# the build stops if the old condition is still there.
for f in vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go vendor/github.com/go-openapi/validate/type.go; do
  [ -f "$src/$f" ] || continue
  sed -i 's/if data == nil || reflect\.DeepEqual(reflect\.Zero(reflect\.TypeOf(data)), reflect\.ValueOf(data)) {/if data == nil {/' "$src/$f"
done
if grep -rn 'reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data))' \
     "$src/vendor/k8s.io/kube-openapi" "$src/vendor/github.com/go-openapi"; then
  echo "[kube-build] the empty-string fix did not apply (above)"; exit 1
fi
cd "$src"
export GOPATH="$gopath" GO111MODULE=off GOFLAGS= GOCACHE="$work/gocache"
what=()
for b in "${bins[@]}"; do [ "$b" = pause ] || what+=("cmd/$b"); done
echo "[kube-build] compiling ${what[*]} (about 6 minutes on 2 cores for the control plane, 4 for a node)"
make WHAT="${what[*]}" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"; exit 1; }
for b in "${bins[@]}"; do
  if [ "$b" = pause ]; then
    # The pod sandbox's process, as build/pause/Makefile builds it for the pause image (static, tiny).
    gcc -Os -Wall -Werror -static -DVERSION="v3.4.1-slinky" -o "$out/pause" build/pause/linux/pause.c
    strip "$out/pause"
    continue
  fi
  install -m 0755 "$(find _output -type f -name "$b" | head -n1)" "$out/$b"
done
echo "$build_id" > "$out/$stamp"
# The build tree is ~2.5 GB; only the binaries are worth keeping.
rm -rf "$work/gopath" "$work/tree" "$work/gocache"
echo "[kube-build] done: $out"
