#!/usr/bin/env bash
# test-image.sh: makes the container image the docker backend's tests run
# sessions in: a minimal Debian bookworm (the glibc the outpost binary is
# built against) with git and ca-certificates, imported into Podman's local
# storage as IMAGE (default outpost-test:bookworm).
#
#   scripts/test-image.sh [IMAGE]
#
# The root filesystem is made once with debootstrap from the Debian mirror of
# this machine's apt sources (or $OUTPOST_TEST_MIRROR) and cached as a tarball
# keyed by VERSION in $OUTPOST_TEST_CACHE (default $XDG_CACHE_HOME/outpost-test,
# or /var/cache/outpost-test for root, else ~/.cache/outpost-test). A second
# run only imports the tarball, and does nothing when IMAGE already carries
# this VERSION. Runs of several test packages at once are serialised with a
# lock in the cache directory. Progress goes to stderr.
set -euo pipefail

IMAGE=${1:-outpost-test:bookworm}
SUITE=bookworm
VERSION="$SUITE-minbase-git-1"
LABEL=sh.outpost.test-image

PATH=$PATH:/usr/sbin:/sbin # debootstrap
say() { echo "test-image: $*" >&2; }

if [ -n "${OUTPOST_TEST_CACHE:-}" ]; then
  cache=$OUTPOST_TEST_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  cache=$XDG_CACHE_HOME/outpost-test
elif [ "$(id -u)" = 0 ]; then
  cache=/var/cache/outpost-test
else
  cache=$HOME/.cache/outpost-test
fi
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9

have=$(podman image inspect --format "{{ index .Labels \"$LABEL\" }}" "$IMAGE" 2>/dev/null || true)
if [ "$have" = "$VERSION" ]; then
  say "$IMAGE is up to date ($VERSION)"
  exit 0
fi

# mirror prints the first Debian archive URI of the apt sources that serves a
# plain release suite (not -security or -updates), in either source format.
mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" {
      i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
      if ($i ~ /^https?:/ && $(i+1) ~ /^[a-z]+$/ && $i ~ /\/debian\/?$/) { print $i; exit }
    }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
    {
      uris = ""; plain = 0; types = ""
      for (n = 1; n <= NF; n++) {
        if ($n ~ /^#/) continue
        if ($n ~ /^Types:/) types = $n
        if ($n ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $n); uris = $n }
        if ($n ~ /^Suites:/) { k = split($n, s, /[ \t]+/); for (j = 2; j <= k; j++) if (s[j] ~ /^[a-z]+$/) plain = 1 }
      }
      if (types ~ /deb( |$)/ && plain) { split(uris, u, /[ \t]+/); for (j in u) if (u[j] ~ /^https?:.*\/debian\/?$/) { print u[j]; exit } }
    }' "$f"
  done
}

tarball=$cache/rootfs-$VERSION.tar
if [ ! -s "$tarball" ]; then
  url=${OUTPOST_TEST_MIRROR:-$(mirror | head -n1)}
  if [ -z "$url" ]; then
    say "no Debian mirror found in /etc/apt/sources.list(.d); set OUTPOST_TEST_MIRROR"
    exit 1
  fi
  command -v debootstrap >/dev/null || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
  root=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$root" "$tarball.tmp"' EXIT
  say "debootstrap --variant=minbase $SUITE from $url (a few minutes, once)"
  debootstrap --variant=minbase --include=git,ca-certificates "$SUITE" "$root" "$url" 2>&1 |
    awk '!/^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) /' >&2
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar --numeric-owner -C "$root" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$root"
  trap - EXIT
  say "cached $tarball"
fi

say "importing $tarball as $IMAGE"
podman import --change "LABEL $LABEL=$VERSION" --change "CMD [\"/bin/bash\"]" "$tarball" "$IMAGE" >/dev/null
say "$IMAGE ready ($VERSION)"
