#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler v1.20.2 from Debian bookworm's
# `kubernetes` source package with Debian's Go, offline, and cache the binaries in $1.
# Why this route: no registry reachable here ships an apiserver binary (docs/dev-stack.md).
set -euo pipefail
out=${1:?usage: build-kubernetes.sh OUT_DIR}
work=${SLINKY_BUILD_DIR:-$(dirname "$out")/kube-build}
mkdir -p "$out" "$work"
if [ -x "$out/kube-apiserver" ] && [ -x "$out/kube-controller-manager" ] && [ -x "$out/kube-scheduler" ]; then
  echo "kubernetes binaries already cached in $out"; exit 0
fi
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
echo "[kube-build] compiling (about 6 minutes on 2 cores)"
cd "$src"
export GOPATH="$gopath" GO111MODULE=off GOFLAGS= GOCACHE="$work/gocache"
make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler" >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log"; exit 1; }
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  install -m 0755 "$(find _output -type f -name "$b" | head -n1)" "$out/$b"
done
# The build tree is ~2.5 GB; only the binaries are worth keeping.
rm -rf "$work/gopath" "$work/tree" "$work/gocache"
echo "[kube-build] done: $out"
