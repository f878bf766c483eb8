#!/usr/bin/env bash
# Prepares the binaries the operator's tests run a real Kubernetes API server
# with, and prints the directory that holds them (the KUBEBUILDER_ASSETS the
# tests read):
#   kube-apiserver  built from the k8s.io/kubernetes Go module at
#                   $KUBERNETES_VERSION, with a replace line pinning every
#                   k8s.io staging module to the matching v0.x.y (the module's
#                   own replace lines point into its source tree, which a
#                   dependent module cannot use); about 5 minutes on 2 cores,
#                   then cached
#   etcd            Debian's etcd-server package (apt-get), linked in
# The cache is $OUTPOST_ENVTEST_DIR (default ~/.cache/outpost/envtest/<version>);
# a second run with both present prints it at once. Progress goes to stderr,
# only the directory to stdout.
#
#   KUBEBUILDER_ASSETS=$(bash scripts/envtest-assets.sh) go test ./internal/operator/...
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH:/usr/sbin:/sbin"

KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.37.2}"
staging="v0${KUBERNETES_VERSION#v1}" # v1.37.2 -> v0.37.2
dir="${OUTPOST_ENVTEST_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost/envtest/$KUBERNETES_VERSION}"
mkdir -p "$dir"
log() { echo "envtest-assets: $*" >&2; }

# etcd: Debian's etcd-server.
if ! command -v etcd >/dev/null 2>&1 && [ ! -x /usr/bin/etcd ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo)
    else
      log "etcd is missing; install it with: sudo apt-get install -y etcd-server"
      exit 1
    fi
  fi
  log "installing etcd-server"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends etcd-server >&2
  # The package starts a system etcd on the default ports; the tests run
  # their own on free ports, so stop the packaged service.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-enabled etcd >/dev/null 2>&1; then
    "${sudo[@]}" systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
fi
ln -sf "$(command -v etcd || echo /usr/bin/etcd)" "$dir/etcd"

# kube-apiserver: built once per version (the stamp file says how it was
# built; a change of the build line below rebuilds it).
minor="${KUBERNETES_VERSION#v1.}"
minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
stamp="$KUBERNETES_VERSION $ldflags"
if [ ! -x "$dir/kube-apiserver" ] || [ "$(cat "$dir/kube-apiserver.stamp" 2>/dev/null)" != "$stamp" ]; then
  log "building kube-apiserver $KUBERNETES_VERSION from the k8s.io/kubernetes module (about 5 minutes, once)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  export GOFLAGS="${GOFLAGS:-} -mod=mod"
  go mod init envtest-assets >/dev/null 2>&1
  # The staging modules the kubernetes module replaces with its own tree.
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
  if [ -z "$gomod" ] || [ ! -f "$gomod" ]; then
    log "could not download k8s.io/kubernetes@$KUBERNETES_VERSION"
    exit 1
  fi
  mods="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$gomod")"
  {
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    for m in $mods; do echo "replace $m => $m $staging"; done
  } >>go.mod
  cat >main.go <<'EOF'
package main

import _ "k8s.io/kubernetes/cmd/kube-apiserver/app"

func main() {}
EOF
  go mod tidy >&2
  rm main.go
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
  mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
  echo "$stamp" >"$dir/kube-apiserver.stamp"
  log "built $dir/kube-apiserver"
fi
echo "$dir"
