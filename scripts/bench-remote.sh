#!/usr/bin/env bash
# Runs Outpost's scale benchmarks from a bundle that scripts/bench-bundle.sh
# made, on a machine with no Go toolchain: unpacks the binaries and
# PostgreSQL under $BENCH_ROOT (default /opt/outpost-bench), then runs the
# benchmarks named (default all), each under a time limit, within $BUDGET
# seconds in all (default 480). The short results go to standard output and
# $OUT/log; each benchmark's whole output to $OUT/<name>.txt (OUT default
# /tmp/outpost-bench-out).
#
#   claims    BenchmarkClaims (pooled client), PostgreSQL then SQLite,
#             $CLAIMS_PER_WORKER sessions a claimer (default 40)
#   replicas  BenchmarkReplicaClaims, 1, 2 and 3 replicas
#   dispatch  BenchmarkDispatch, SQLite then PostgreSQL, 200 sessions
#   watchers  BenchmarkWatchers, 10,000 watchers
#   fleet     three replicas on a PostgreSQL of their own and `outpost bench
#             fleet` against them: $FLEET_WORKERS workers (10,000) and
#             $FLEET_SESSIONS sessions (1,000) at one call a second with
#             4 KiB of output for 60 s, split over simulators of at most
#             3,334 workers (a process holds ~3 descriptors a worker)
#
# Run as root (PostgreSQL then runs as nobody) or as a user who owns
# $BENCH_ROOT. SMALL=1 shrinks every size, for a rehearsal on a small box.
#
#   bash run.sh claims replicas
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/outpost-bench-out}
R=${BENCH_ROOT:-/opt/outpost-bench}
BUDGET=${BUDGET:-480}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log") 2>&1
t0=$(date +%s)
say() { echo "[t+$(( $(date +%s) - t0 ))s] $* (load $(cut -d' ' -f1-3 /proc/loadavg))"; }
# limit prints a step's time limit: its own, or what is left of the budget.
limit() { local l=$(( BUDGET - ($(date +%s) - t0) )); if [ "$l" -lt "$1" ]; then echo $(( l > 5 ? l : 5 )); else echo "$1"; fi; }
unxz() { if command -v xz >/dev/null; then xz -dc "$1"; else python3 -c 'import lzma,sys,shutil; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"; fi; }

say "unpacking into $R"
rm -rf "$R" && mkdir -p "$R/pg" || exit 1
unxz "$here/pg.tar.xz" | tar -C "$R/pg" -xf - || { echo "unpacking PostgreSQL failed" >&2; exit 1; }
unxz "$here/outpost.xz" > "$R/outpost" || exit 1
unxz "$here/bench.test.xz" > "$R/bench.test" || exit 1
chmod 755 "$R/outpost" "$R/bench.test" && chmod -R a+rX "$R"
pgver=$(cat "$here/pg-version")
export PATH="$R/pg/usr/lib/postgresql/$pgver/bin:$PATH" LD_LIBRARY_PATH="$R/pg/libs" TZ=UTC
export OUTPOST_BENCH_BINARY="$R/outpost"
if [ ! -e /usr/share/zoneinfo/UTC ] && [ "$(id -u)" = 0 ]; then
  mkdir -p /usr/share/zoneinfo/Etc && cp "$R/pg/zoneinfo/UTC" /usr/share/zoneinfo/UTC && cp "$R/pg/zoneinfo/UTC" /usr/share/zoneinfo/Etc/UTC
fi
initdb --version >/dev/null || { echo "the bundled initdb does not run here" >&2; exit 1; }
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(free -g | awk '/Mem:/ {print $2}') GiB, kernel $(uname -r), open files $(ulimit -n) (hard $(ulimit -Hn))"
(cd /tmp && timeout 8 pg_test_fsync -s 1 2>/dev/null | grep -E '^ +fdatasync' | head -1)

if [ "${SMALL:-}" = 1 ]; then
  K=4 W=2000 S=50 FW=${FLEET_WORKERS:-300} FS=${FLEET_SESSIONS:-30} FD=10s
else
  K=${CLAIMS_PER_WORKER:-40} W=10000 S=200 FW=${FLEET_WORKERS:-10000} FS=${FLEET_SESSIONS:-1000} FD=60s
fi
# bench NAME LIMIT "VAR=value ..." REGEXP runs one benchmark.
bench() {
  local name=$1 to; to=$(limit "$2")
  say "== $name"
  env $3 timeout "$to" "$R/bench.test" -test.run '^$' -test.bench "$4" -test.benchtime 1x -test.v -test.timeout 30m > "$OUT/$name.txt" 2>&1
  echo "exit $?"; grep -E 'SUMMARY|FAIL|panic' "$OUT/$name.txt" | cut -c1-300
}
asnobody() {
  if [ "$(id -u)" != 0 ]; then "$@"
  elif command -v setpriv >/dev/null; then setpriv --reuid=nobody --regid="$(id -gn nobody)" --clear-groups "$@"
  else runuser -u nobody -- "$@"; fi
}
# ready reports whether the server at URL $1 answers /readyz.
ready() {
  if command -v curl >/dev/null; then curl -fsS -o /dev/null "$1/readyz" 2>/dev/null
  else python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1] + "/readyz", timeout=1)' "$1" 2>/dev/null; fi
}
fleet() {
  local fp=/tmp/outpost-bench-pg port=55432 urls="" pids=() sims n w s i
  rm -rf "$fp" && mkdir -p "$fp" && { [ "$(id -u)" != 0 ] || chown nobody "$fp"; }
  asnobody initdb -D "$fp/data" -U outpost --auth=trust -E UTF8 --locale=C > "$fp/initdb.log" 2>&1 || { tail "$fp/initdb.log"; return 1; }
  asnobody pg_ctl -D "$fp/data" -l "$fp/log" -w -o "-p $port -k $fp -c listen_addresses=127.0.0.1 -c max_connections=1000 -c shared_buffers=1GB" start > /dev/null || { tail "$fp/log"; return 1; }
  psql -h 127.0.0.1 -p $port -U outpost -d postgres -qc 'create database fleet' || return 1
  export OUTPOST_ADMIN_TOKEN="opt_bench-$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
  export OUTPOST_SECRET_KEY="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  for i in 1 2 3; do
    local p=$((44100 + i)) u
    u=http://127.0.0.1:$p; urls="$urls${urls:+,}$u"
    "$R/outpost" server --listen 127.0.0.1:$p --data-dir "$fp/r$i" --log-level warn --database "postgres://outpost@127.0.0.1:$port/fleet" \
      --replica-id r$i --replica-url "$u" --public-url "$u" > "$OUT/server$i.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 150); do ready "$u" && break; sleep 0.2; done
  done
  sims=$(( (FW + 3333) / 3334 )); w=$(( FW / sims )); s=$(( FS / sims ))
  say "== fleet: 3 replicas at $urls, $sims simulators of $w workers and $s sessions"
  local simpids=()
  for n in $(seq "$sims"); do
    timeout "$(limit 240)" "$R/outpost" bench fleet --server "$urls" --token "$OUTPOST_ADMIN_TOKEN" --workers "$w" --sessions "$s" \
      --call-rate 1/s --output 4KiB --followers 4 --create-rate "$(( 50 / sims + 1 ))/s" --idle 10s --duration "$FD" --progress 15s \
      > "$OUT/fleet-sim$n.txt" 2> "$OUT/fleet-sim$n.err" &
    simpids+=($!)
  done
  wait "${simpids[@]}"
  for n in $(seq "$sims"); do echo "--- simulator $n"; head -22 "$OUT/fleet-sim$n.txt"; done
  echo "(each simulator's server figures are the whole servers' divided by its own counts)"
  kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
  asnobody pg_ctl -D "$fp/data" -m fast stop > /dev/null
}

cd /tmp || exit 1
set -- ${@:-claims replicas dispatch watchers fleet}
for what in "$@"; do
  case $what in
  claims)
    bench claims-postgres 120 "OUTPOST_BENCH_DATABASE=postgres OUTPOST_BENCH_CLAIMS_PER_WORKER=$K" '^BenchmarkClaims$/pooled'
    bench claims-sqlite 120 "OUTPOST_BENCH_DATABASE=sqlite OUTPOST_BENCH_CLAIMS_PER_WORKER=$K" '^BenchmarkClaims$/pooled' ;;
  replicas) bench replicas 180 "OUTPOST_BENCH_CLAIMS_PER_WORKER=$K" '^BenchmarkReplicaClaims$' ;;
  dispatch)
    bench dispatch-sqlite 90 "OUTPOST_BENCH_SESSIONS=$S" '^BenchmarkDispatch$'
    bench dispatch-postgres 90 "OUTPOST_BENCH_DATABASE=postgres OUTPOST_BENCH_SESSIONS=$S" '^BenchmarkDispatch$' ;;
  watchers) bench watchers 120 "OUTPOST_BENCH_WATCHERS=$W" '^BenchmarkWatchers$' ;;
  fleet) fleet ;;
  *) echo "unknown benchmark $what: claims, replicas, dispatch, watchers or fleet" >&2; exit 2 ;;
  esac
done
say done
