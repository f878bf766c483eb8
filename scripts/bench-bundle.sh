#!/usr/bin/env bash
# Packs what the benchmarks need into DIR, for a machine with no Go
# toolchain and no network (a bigger box lent for an hour, say):
#   outpost.xz      the outpost binary of this tree
#   bench.test.xz   the benchmarks (go test -c ./test/bench/)
#   pg.tar.xz       this machine's PostgreSQL (initdb, postgres, pg_ctl, psql,
#                   pg_isready, pg_test_fsync; its modules, share files and the shared
#                   libraries they load, glibc's own excepted)
#   run.sh          scripts/bench-remote.sh: unpacks all that and runs the
#                   benchmarks there (see its header)
# About 50 MiB for an x86-64 Debian machine with PostgreSQL 15. The target
# must have the same processor architecture and a glibc at least as new.
#
#   bash scripts/bench-bundle.sh /tmp/bundle && scp -r /tmp/bundle big-box: && ssh big-box bash bundle/run.sh
set -euo pipefail
export PATH="/usr/local/go/bin:$PATH:/usr/sbin:/sbin"
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
out=$1
mkdir -p "$out"
out=$(cd "$out" && pwd)
log() { echo "bench-bundle: $*" >&2; }
for tool in xz ldd tar; do
  command -v "$tool" >/dev/null || { log "$tool is missing (apt-get install xz-utils libc-bin tar)"; exit 1; }
done
pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$pgbin" ] && [ -x "$pgbin/initdb" ] || { log "no PostgreSQL under /usr/lib/postgresql (apt-get install postgresql)"; exit 1; }
pgver=$(basename "$(dirname "$pgbin")")
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT

log "building outpost and the benchmarks"
go build -trimpath -ldflags='-s -w' -o "$work/outpost" ./cmd/outpost
go test -c -trimpath -ldflags='-s -w' -o "$work/bench.test" ./test/bench/

log "collecting PostgreSQL $pgver"
root=$work/pg
mkdir -p "$root/usr/lib/postgresql/$pgver/bin" "$root/usr/lib/postgresql/$pgver/lib" "$root/usr/share/postgresql" "$root/libs"
for b in postgres initdb pg_ctl psql pg_isready pg_test_fsync; do
  cp "$pgbin/$b" "$root/usr/lib/postgresql/$pgver/bin/"
done
# The modules initdb and a server load: PL/pgSQL, text search, encoding
# conversions, replication; not the JIT (LLVM is large and off by default).
for m in plpgsql dict_snowball; do
  [ -f "$pgbin/../lib/$m.so" ] || { log "$pgbin/../lib/$m.so is missing: initdb needs it"; exit 1; }
done
for m in plpgsql dict_snowball libpqwalreceiver pgoutput 'utf8_and_*' 'euc*' 'latin*' 'cyrillic*' 'ascii*'; do
  cp $pgbin/../lib/$m.so "$root/usr/lib/postgresql/$pgver/lib/" 2>/dev/null || true
done
cp -r "/usr/share/postgresql/$pgver" "$root/usr/share/postgresql/"
rm -rf "$root/usr/share/postgresql/$pgver/extension"
mkdir -p "$root/usr/share/postgresql/$pgver/extension"
cp /usr/share/postgresql/$pgver/extension/plpgsql* "$root/usr/share/postgresql/$pgver/extension/"
# Their libraries, less glibc's (the target's own must serve: one loader).
for b in "$root"/usr/lib/postgresql/$pgver/bin/* "$root"/usr/lib/postgresql/$pgver/lib/*.so; do ldd "$b"; done |
  awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libresolv|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.so' |
  xargs -I{} cp -L {} "$root/libs/"
mkdir -p "$root/zoneinfo" && cp -L /usr/share/zoneinfo/UTC "$root/zoneinfo/UTC"

log "compressing (a minute or two)"
xz -T0 -6 -c "$work/outpost" > "$out/outpost.xz"
xz -T0 -6 -c "$work/bench.test" > "$out/bench.test.xz"
tar -C "$root" -cf - . | xz -T0 -6 > "$out/pg.tar.xz"
cp scripts/bench-remote.sh "$out/run.sh"
echo "$pgver" > "$out/pg-version"
log "$(du -sh "$out" | cut -f1) in $out"
