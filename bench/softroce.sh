#!/usr/bin/env bash
# Runs the latency ladder inside the Soft-RoCE test bed, in one boot (testbed/vm.sh run1):
# rpcbench over rdma:// on rxe0 next to ib_send_lat / ib_send_bw at the same sizes, rpcbench
# over tcp:// in the same guest, each with client and server in separate processes (rpcbench's
# server in a child process: rdma.csv, tcp.csv) and again with both in one (--inproc:
# rdma-1p.csv, tcp-1p.csv, the ladder's -1p rungs), then bench/cmd/ladder (raw verbs busy-poll
# and completion-channel ping-pongs, transport Conn ping-pong, raw TCP ping-pong), which prints
# every rung with its ratio to the rung below, its per-call costs at both ends and issue 25's
# targets (ladder.txt).
#
#   bench/softroce.sh [outdir] [rpcbench flags...]    (default outdir: .cache/bench-softroce)
#
# Default flags: --sizes 64,4KiB,64KiB --conc 1,16 --duration 2s; flags given replace them.
# The streaming rows (rpcbench-stream.txt, rdma-stream.csv): stream ping-pong and a flood on
# rdma:// next to ib_send_lat / ib_send_bw, client and server in separate processes, with STREAM_FLAGS (default --sizes 64,64KiB
# --conc 1,16 --duration 2s --warmup 300ms; STREAM_FLAGS=none skips them).
# RENDEZVOUS=1 (or =only: nothing else): issue 23's large-message table in the same boot:
# rpcbench's unary echo and stream flood (client and server in separate processes) at
# RNDV_FLAGS (default --sizes 64KiB,256KiB,1MiB,16MiB --conc 1 --modes unary,stream --duration 10s
# --warmup 1s) once per RNDV_CONFIGS entry, an --rdma-rendezvous value (default "off default
# 32KiB@64KiB,256KiB": fragments, the transport's default threshold, and a 32 KiB threshold
# at 64 and 256 KiB only; THR@SIZES replaces --sizes; docs/rdma.md "Rendezvous: the table"): rpcbench-rndv-THR.txt, rndv-THR.csv; then
# perftest's ib_read_lat, ib_read_bw, ib_send_lat, ib_send_bw at RNDV_PERFTEST_SIZES
# (default 65536 1048576 16777216; -n 1000, 200, 20) in pt-TOOL-SIZE.txt, and the device's
# RNR and retry counters (rndv.txt).
# FLOOD_PROFILE=1: after the ladder, CPU profiles of both processes during a 64 B stream flood
# on rdma://, 1 and 16 streams (flood-c1.pprof and flood-c1.pprof.server, flood-c16…; read
# them on the host with go tool pprof).
# RDMA_OPTS: rdma:// transport options for this build's rpcbench (both processes) and the
# ladder's conn rung, e.g. '--rdma-poll-spin 2ms --rdma-completions shared' (bench.RDMAFlags;
# default: the transport's defaults); rpcbench.txt and ladder.txt say which were used.
# The guest's figures come from an emulated CPU (qemu TCG): read the ratios, not the times.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/.cache/bench-softroce}
[ $# -gt 0 ] && shift
FLAGS=("$@")
[ ${#FLAGS[@]} -gt 0 ] || FLAGS=(--sizes 64,4KiB,64KiB --conc 1,16 --duration 2s --warmup 300ms)
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin

mkdir -p "$OUT"
rm -f "$OUT"/rpcbench*.txt "$OUT"/*.csv "$OUT"/rdma.png "$OUT"/ladder.txt "$OUT"/rc.* "$OUT"/flood-* "$OUT"/rndv.txt "$OUT"/pt-*
(cd "$REPO" && CGO_ENABLED=1 go build -o "$OUT/rpcbench" ./bench/cmd/rpcbench)
# The rungs below the RPC layer (raw verbs through transport/rdma/rawverbs).
(cd "$REPO" && CGO_ENABLED=1 go build -o "$OUT/ladder" ./bench/cmd/ladder)
read -r -a STREAM < <(echo "${STREAM_FLAGS:---sizes 64,64KiB --conc 1,16 --duration 2s --warmup 300ms}")
LADDER_FLAGS=(--duration "${LADDER_DURATION:-2s}" --warmup 300ms)
read -r -a ROPTS <<<"${RDMA_OPTS:-}"
ropts() { [ ${#ROPTS[@]} -eq 0 ] || printf ' %q' "${ROPTS[@]}"; }
# BASELINE=<git revision>: also build the conn rung and rpcbench from that revision and run
# them in the same boot, for a before/after table (ratios inside one boot are what count).
BEFORE=
if [ -n "${BASELINE:-}" ]; then
  rm -rf "$OUT/baseline" && mkdir -p "$OUT/baseline"
  git -C "$REPO" archive "$BASELINE" | tar -x -C "$OUT/baseline"
  # The ladder lived in transport/rdma/internal/ladder before it moved to bench/cmd/ladder.
  LADDER_PKG=./bench/cmd/ladder
  [ -d "$OUT/baseline/bench/cmd/ladder" ] || LADDER_PKG=./transport/rdma/internal/ladder
  (cd "$OUT/baseline" && CGO_ENABLED=1 go build -o "$OUT/rpcbench-before" ./bench/cmd/rpcbench &&
    CGO_ENABLED=1 go build -o "$OUT/ladder-before" "$LADDER_PKG")
  rm -rf "$OUT/baseline"
  BEFORE=/out/ladder-before.csv,/out/rdma-before.csv,/out/tcp-before.csv
  [ "${STREAM[*]}" = none ] || BEFORE=$BEFORE,/out/rdma-stream-before.csv
fi
# rpcbench's default is a server process of its own: what a deployment runs. --inproc, both
# ends in one process as the ladder's lower rungs have them, is the -1p rungs.
{
  echo '# written by bench/softroce.sh'
  echo 'cd /out'
  echo 'rc=0'
  echo '{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"; grep MemTotal /proc/meminfo; } > /out/ladder.txt'
  [ "${RENDEZVOUS:-}" != only ] || echo 'if false; then'
  printf './rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --csv /out/rdma.csv --png /out/rdma.png'
  printf ' %q' "${FLAGS[@]}"
  ropts
  echo ' > /out/rpcbench.txt 2>&1 || rc=1'
  printf './rpcbench --inproc --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rdma-1p.csv'
  printf ' %q' "${FLAGS[@]}"
  ropts
  echo ' > /out/rpcbench-1p.txt 2>&1 || rc=1'
  MERGE=/out/rdma.csv,/out/tcp.csv
  if [ "${STREAM[*]}" != none ]; then
    printf './rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --modes pingpong,stream --csv /out/rdma-stream.csv'
    printf ' %q' "${STREAM[@]}"
    ropts
    echo ' > /out/rpcbench-stream.txt 2>&1 || rc=1'
    MERGE=$MERGE,/out/rdma-stream.csv
  fi
  printf './rpcbench --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp.csv'
  printf ' %q' "${FLAGS[@]}"
  echo ' > /out/rpcbench-tcp.txt 2>&1 || rc=1'
  printf './rpcbench --inproc --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp-1p.csv'
  printf ' %q' "${FLAGS[@]}"
  echo ' > /out/rpcbench-tcp-1p.txt 2>&1 || rc=1'
  if [ -n "$BEFORE" ]; then
    printf './rpcbench-before --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rdma-before.csv'
    printf ' %q' "${FLAGS[@]}"
    echo ' > /out/rpcbench-before.txt 2>&1 || rc=1'
    printf './rpcbench-before --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp-before.csv'
    printf ' %q' "${FLAGS[@]}"
    echo ' > /out/rpcbench-tcp-before.txt 2>&1 || rc=1'
    if [ "${STREAM[*]}" != none ]; then
      printf './rpcbench-before --listen rdma://$RDMARPC_TEST_IP:0 --modes pingpong,stream --csv /out/rdma-stream-before.csv'
      printf ' %q' "${STREAM[@]}"
      echo ' > /out/rpcbench-stream-before.txt 2>&1 || rc=1'
    fi
    printf './ladder-before --dev rxe0 --rungs conn --csv /out/ladder-before.csv'
    printf ' %q' "${LADDER_FLAGS[@]}"
    echo ' > /out/ladder-before.txt 2>&1 || rc=1'
  fi
  printf './ladder --dev rxe0 --csv /out/ladder.csv --merge %q --merge-inproc /out/rdma-1p.csv,/out/tcp-1p.csv --before %q' "$MERGE" "$BEFORE"
  printf ' %q' "${LADDER_FLAGS[@]}"
  ropts
  echo ' >> /out/ladder.txt 2>&1 || rc=1'
  if [ -n "${FLOOD_PROFILE:-}" ]; then
    for c in 1 16; do
      echo "./rpcbench --listen rdma://\$RDMARPC_TEST_IP:0 --modes stream --sizes 64 --conc $c --duration 5s --warmup 300ms --cpuprofile /out/flood-c$c.pprof$(ropts) > /out/flood-c$c.txt 2>&1 || rc=1"
    done
  fi
  echo 'for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do'
  echo '  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/ladder.txt'
  echo 'done'
  [ "${RENDEZVOUS:-}" != only ] || echo 'fi'
  if [ -n "${RENDEZVOUS:-}" ]; then
    read -r -a RNDV < <(echo "${RNDV_FLAGS:---sizes 64KiB,256KiB,1MiB,16MiB --conc 1 --modes unary,stream --duration 10s --warmup 1s}")
    echo '{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/rndv.txt'
    for cfg in ${RNDV_CONFIGS:-off default 32KiB@64KiB,256KiB}; do
      thr=${cfg%@*}
      sz=()
      [ "$thr" = "$cfg" ] || sz=(--sizes "${cfg#*@}")
      printf './rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rndv-%s.csv' "$thr"
      [ "$thr" = default ] || printf ' --rdma-rendezvous %q' "$thr"
      printf ' %q' "${RNDV[@]}" "${sz[@]}"
      printf ' > /out/rpcbench-rndv-%s.txt 2>&1 || rc=1\n' "$thr"
    done
    echo 'G=$RDMARPC_TEST_GID_INDEX'
    echo "for s in ${RNDV_PERFTEST_SIZES:-65536 1048576 16777216}; do"
    echo '  n=20; [ $s -gt 1048576 ] || n=200; [ $s -gt 65536 ] || n=1000'
    echo '  for tool in ib_read_lat ib_read_bw ib_send_lat ib_send_bw; do'
    echo '    $tool -d rxe0 -x $G -s $s -n $n > /out/pt-$tool-$s.srv 2>&1 &'
    echo '    ok=0'
    echo '    for try in 1 2 3 4 5 6 7 8 9 10; do'
    echo '      sleep 1'
    echo '      if $tool -d rxe0 -x $G -s $s -n $n $RDMARPC_TEST_IP > /out/pt-$tool-$s.txt 2>&1; then ok=1; break; fi'
    echo '    done'
    echo '    [ $ok = 1 ] || rc=1'
    echo '    wait'
    echo '  done'
    echo 'done'
    echo 'for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do'
    echo '  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/rndv.txt'
    echo 'done'
  fi
  echo 'exit $rc'
} > "$OUT/guest.sh"

status=0
if [ "${RENDEZVOUS:-}" = only ]; then
  RDMARPC_VM_TIMEOUT=${RDMARPC_VM_TIMEOUT:-1800} RDMARPC_VM_QUIET=${RDMARPC_VM_QUIET:-1} "$REPO/testbed/vm.sh" run1 "$OUT" || status=$?
  cat "$OUT"/rpcbench-rndv-*.txt "$OUT/rndv.txt" 2>/dev/null || echo "FAIL no rendezvous output in $OUT (see $OUT/console.single.log)"
  echo "host: $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/rndv.txt"
  [ "$status" = 0 ] && echo "PASS bench/softroce.sh: $OUT/rndv.txt" || echo "FAIL bench/softroce.sh (exit $status)"
  exit "$status"
fi
RDMARPC_VM_QUIET=${RDMARPC_VM_QUIET:-1} "$REPO/testbed/vm.sh" run1 "$OUT" || status=$?
[ ! -f "$OUT/rpcbench-stream.txt" ] || cat "$OUT/rpcbench-stream.txt"
cat "$OUT/rpcbench.txt" "$OUT/rpcbench-1p.txt" "$OUT/rpcbench-tcp.txt" "$OUT/rpcbench-tcp-1p.txt" 2>/dev/null || echo "FAIL no rpcbench output in $OUT (see $OUT/console.single.log)"
echo "host: $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/ladder.txt"
cat "$OUT/ladder.txt" 2>/dev/null || echo "FAIL no ladder output in $OUT"
[ "$status" = 0 ] && echo "PASS bench/softroce.sh: $OUT/ladder.txt, $OUT/rdma.csv, $OUT/rdma.png" || echo "FAIL bench/softroce.sh (exit $status)"
exit "$status"
