#!/usr/bin/env bash
# The gRPC protocol path against gRPC-go (issue 21 item 6), servers in processes of their own:
#
#   bench/grpcwire.sh [OUTDIR]        (make bench-grpc; OUTDIR default
#                                      bench/results/history/<date>-grpc-wire)
#
# 1. test/peers TestWireBench: gRPC-go's client → rdmarpc's server vs → gRPC-go's server, and
#    rdmarpc's grpc:// client vs gRPC-go's client → gRPC-go's server; unary 64 B / 1 KiB /
#    64 KiB at conc 1/16/64, p50 and calls/s, the two sides of each cell interleaved
#    (PEERS_BENCH_DURATION per round, default 1s, 3 rounds).
# 2. What telling protocols apart costs rdmarpc's framing: transport/tcp BenchmarkDial (dial,
#    both handshakes, accept, both closes) at HEAD and at the commit before sniffing landed
#    (0532c5a^, the server wrote its hello first), both test binaries built first, then run
#    alternately, DIAL_ROUNDS (5) rounds of 3000 connections each. Calls on an established
#    connection do not pass the sniffing code.
# Writes README.md (meta: date, commit, machine, load) and the raw outputs to OUTDIR.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
DAY=$(date -u +%Y-%m-%d)
OUT=${1:-$REPO/bench/results/history/$DAY-grpc-wire}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
WORK=$REPO/.cache/bench-grpcwire
rm -rf "$WORK" && mkdir -p "$WORK"
load() { cut -d' ' -f1-3 /proc/loadavg; }
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)
[ -z "$(git -C "$REPO" status --porcelain -- . ':(exclude)bench/results')" ] || COMMIT="$COMMIT, with uncommitted changes"
BEFORE=$(git -C "$REPO" rev-parse --short 0532c5a^)
LOAD0=$(load)

echo "# 1. TestWireBench (test/peers)"
(cd "$REPO/test/peers" && PEERS_BENCH_OUT="$WORK/wire.md" go test -count=1 -timeout 60m -run '^TestWireBench$' -v . 2>&1 | tee "$WORK/wire.txt" | grep -E '^\s+wirebench|^(ok|FAIL|---)' || true)
[ -s "$WORK/wire.md" ] || { echo "TestWireBench wrote no table: see $WORK/wire.txt" >&2; exit 1; }
LOAD1=$(load)

echo "# 2. BenchmarkDial at $BEFORE (no sniffing) and $COMMIT"
mkdir -p "$WORK/before"
git -C "$REPO" archive "$BEFORE" | tar -x -C "$WORK/before"
# The old tree has no BenchmarkDial: the same benchmark, added beside it.
awk '/^\/\/ BenchmarkDial /,/^}/' "$REPO/transport/tcp/bench_test.go" >"$WORK/dial.go"
{ echo 'package tcp'; echo; echo 'import ("context"; "testing")'; echo; cat "$WORK/dial.go"; } >"$WORK/before/transport/tcp/dial_bench_test.go"
grep -q 'func BenchmarkDial' "$WORK/before/transport/tcp/bench_test.go" && rm "$WORK/before/transport/tcp/dial_bench_test.go"
(cd "$WORK/before" && GOWORK=off go test -c -o "$WORK/tcp-before.test" ./transport/tcp)
(cd "$REPO" && GOWORK=off go test -c -o "$WORK/tcp-after.test" ./transport/tcp)
for i in $(seq "${DIAL_ROUNDS:-5}"); do
  for v in before after; do
    "$WORK/tcp-$v.test" -test.run '^$' -test.bench '^BenchmarkDial$' -test.benchtime 3000x -test.benchmem |
      awk -v v=$v '/^BenchmarkDial/ {print v, $3, $5, $7}' | tee -a "$WORK/dial.txt"
  done
done
LOAD2=$(load)

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
DB=$(awk '$1=="before" {print $2}' "$WORK/dial.txt" | median)
DA=$(awk '$1=="after" {print $2}' "$WORK/dial.txt" | median)
AB=$(awk '$1=="before" {print $4}' "$WORK/dial.txt" | median)
AA=$(awk '$1=="after" {print $4}' "$WORK/dial.txt" | median)

cp "$WORK/wire.txt" "$WORK/dial.txt" "$OUT/"
{
  echo "# The gRPC protocol path against gRPC-go"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $COMMIT (sniffing compared with $BEFORE)"
  echo "- machine: $(nproc) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(. /etc/os-release && echo "$PRETTY_NAME"), $(go env GOVERSION)"
  echo "- load (1/5/15 min) at the start, after part 1, at the end: $LOAD0; $LOAD1; $LOAD2 — the machine is shared with other jobs: absolute figures are noisy, the ratios (both sides of a cell interleaved) less so"
  echo "- command: bash bench/grpcwire.sh (make bench-grpc); loopback; every server in a process of its own, the clients in the test process"
  echo
  echo "## 1. Serving gRPC clients, and calling gRPC servers"
  cat "$WORK/wire.md"
  echo
  echo "## 2. Telling protocols apart: cost on rdmarpc's framing path"
  echo
  echo "transport/tcp BenchmarkDial (a connection's whole setup and teardown over loopback), ${DIAL_ROUNDS:-5} alternating rounds of 3000 connections; medians of the rounds:"
  echo
  echo "| server | ns/connection | allocs/connection |"
  echo "|---|---|---|"
  echo "| before sniffing ($BEFORE) | $DB | $AB |"
  echo "| with sniffing ($COMMIT) | $DA | $AA |"
  echo
  echo "Per round: dial.txt (variant, ns/op, B/op, allocs/op). Calls on an established connection do not pass the sniffing code."
} >"$OUT/README.md"
echo "wrote $OUT/README.md"
