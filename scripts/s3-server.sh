#!/usr/bin/env bash
# Prepares the S3-compatible server the blob store's S3 tests run against and
# prints its path (the OUTPOST_VERSITYGW the tests read): versitygw, built
# from its Go module at $VERSITYGW_VERSION (about 4 minutes on 2 cores, then
# cached in $OUTPOST_VERSITYGW_DIR, default ~/.cache/outpost/versitygw/<version>).
# Debian packages no S3-compatible server that runs alone (radosgw needs a
# Ceph cluster). Progress goes to stderr, only the path to stdout.
#
#   OUTPOST_VERSITYGW=$(bash scripts/s3-server.sh) go test ./internal/blob/...
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH"

VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
dir="${OUTPOST_VERSITYGW_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/outpost/versitygw/$VERSITYGW_VERSION}"
mkdir -p "$dir"
if [ ! -x "$dir/versitygw" ]; then
  echo "s3-server: building versitygw $VERSITYGW_VERSION (about 4 minutes, once)" >&2
  # A module of its own: the build neither reads nor changes this one's go.mod.
  (cd "$dir" && GOFLAGS=-mod=mod GOBIN="$dir" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION") >&2
fi
echo "$dir/versitygw"
