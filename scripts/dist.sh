#!/usr/bin/env bash
# Builds the remote binaries of this tree into a directory in the public
# distribution layout, which `outpost server --dist-dir DIR` publishes at
# <public-url>/dist/:
#
#   latest_<platform>                      the version id, no newline
#   devin-remote_<id>_<platform>           the outpost binary
#   devin-remote_<id>_<platform>.sha256    "<sha256>  devin-remote\n"
#
# Usage:
#   scripts/dist.sh [DIR]   build into DIR (default dist), as `make dist` does
#   scripts/dist.sh id      print this tree's version id
#
# Binaries are built with CGO_ENABLED=0, -trimpath and stripped (-s -w).
# The version id is the first 12 hex digits of the commit when the tree is
# clean; of a tree with changes, the first 12 of a SHA-256 over the commit,
# the diff and the untracked files; outside git, of a SHA-256 over the
# source files. Builds of ids already in DIR are kept, as are other ids:
# an id names one build forever, so pins of older builds keep working.
#
# Environment: GO (default go), VERSION (main.version), DIST_ID (the id;
# default computed as above), DIST_PLATFORMS (GOOS/GOARCH pairs; default
# all six: linux/amd64 linux/arm64 darwin/arm64 darwin/amd64 windows/amd64
# windows/arm64; Windows builds are named devin-remote_<id>_windows_<arch>.exe
# and their pointers latest_windows_<arch>.exe).
set -euo pipefail
cd "$(dirname "$0")/.."

sha256() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum | cut -d' ' -f1; else shasum -a 256 | cut -d' ' -f1; fi
}

# each_file prints the name and content of each NUL-separated file name read.
each_file() {
  while IFS= read -r -d '' f; do
    printf '%s\n' "$f"
    cat "$f"
  done
}

dist_id() {
  if rev=$(git rev-parse HEAD 2>/dev/null); then
    if [ -z "$(git status --porcelain 2>/dev/null)" ]; then
      echo "${rev:0:12}"
      return
    fi
    {
      echo "$rev"
      git diff HEAD --binary
      git ls-files --others --exclude-standard -z | each_file
    } | sha256 | cut -c1-12
    return
  fi
  find . -type f \( -name '*.go' -o -name '*.sql' -o -name '*.html' -o -name '*.js' -o -name '*.css' -o -name 'go.mod' -o -name 'go.sum' \) \
    -not -path './dist/*' -not -path './bin/*' -print0 | LC_ALL=C sort -z | each_file | sha256 | cut -c1-12
}

# suffix GOOS/GOARCH prints the platform suffix of the layout.
suffix() {
  case "$1" in
    linux/amd64) echo linux_x64 ;;
    linux/arm64) echo linux_arm64 ;;
    darwin/arm64) echo macos_arm64 ;;
    darwin/amd64) echo macos_x64 ;;
    windows/amd64) echo windows_x64.exe ;;
    windows/arm64) echo windows_arm64.exe ;;
    *) echo "dist: no platform suffix for $1 (linux/amd64, linux/arm64, darwin/arm64, darwin/amd64, windows/amd64, windows/arm64)" >&2; return 1 ;;
  esac
}

if [ "${1:-}" = id ]; then
  dist_id
  exit 0
fi

dir=${1:-dist}
GO=${GO:-go}
id=${DIST_ID:-$(dist_id)}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
platforms=${DIST_PLATFORMS:-linux/amd64 linux/arm64 darwin/arm64 darwin/amd64 windows/amd64 windows/arm64}
if ! [[ $id =~ ^[0-9a-f]{6,40}$ ]]; then
  echo "dist: version id '$id' is not 6 to 40 lower-case hex digits" >&2
  exit 1
fi
mkdir -p "$dir"
ldflags="-X main.version=$version -X github.com/outpost-sh/outpost/internal/machine.Version=$version -X github.com/outpost-sh/outpost/internal/dist.buildID=$id"
echo "dist: version id $id (version $version) into $dir/"
for p in $platforms; do
  s=$(suffix "$p")
  bin="$dir/devin-remote_${id}_${s}"
  name=devin-remote
  [[ $s == *.exe ]] && name=devin-remote.exe
  if [ -f "$bin" ] && [ -f "$bin.sha256" ] && [ "$(sha256 <"$bin")" = "$(cut -d' ' -f1 "$bin.sha256")" ]; then
    echo "dist: $s: $id is already built; kept"
  else
    echo "dist: $s: building ($p)…"
    tmp="$dir/.building-$s"
    CGO_ENABLED=0 GOOS=${p%/*} GOARCH=${p#*/} "$GO" build -trimpath -ldflags "-s -w $ldflags" -o "$tmp" ./cmd/outpost
    sum=$(sha256 <"$tmp")
    printf '%s  %s\n' "$sum" "$name" >"$tmp.sha256"
    mv "$tmp.sha256" "$bin.sha256"
    mv "$tmp" "$bin"
    echo "dist: $s: wrote $bin ($(wc -c <"$bin" | tr -d ' ') bytes, sha256 $sum)"
  fi
  printf '%s' "$id" >"$dir/.latest-$s"
  mv "$dir/.latest-$s" "$dir/latest_$s"
  echo "dist: $s: latest_$s -> $id"
done
echo "dist: done; publish with: outpost server --dist-dir $dir"
