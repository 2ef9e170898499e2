#!/usr/bin/env bash
# Runs one area's benchmark and writes its page of current figures:
#
#   bench/pages.sh tcp|rdma|kv|scale      (make bench, bench-rdma, bench-kv, bench-scale)
#
# The run's files replace bench/results/<area>/, with a meta.txt that says when, at which
# commit, on which machine, under what load and by which command the run was made; then
# bench/cmd/benchpage writes bench/results/<area>.md from that folder alone. Commit the page
# and its folder together (bench/cmd/benchpage's test checks that one is made from the
# other). To add a note to a page, add a "note: …" line to its meta.txt and run benchpage.
#
#   tcp    rpcbench --compare raw,drpc,grpc on loopback, each server in a process of its own
#          (peers.csv), then rdmarpc alone with both ends in one process (--inproc, inproc.csv)
#          (BENCH_FLAGS replaces the default --sizes 64,1KiB,64KiB,1MiB --conc 1,16,64 --duration 3s),
#          then streams against gRPC-go (--modes pingpong,stream, streams.csv; TCP_STREAM_FLAGS
#          replaces --sizes 64,64KiB,1MiB --conc 1,16,64 --duration 3s), then every implementation
#          again under valgrind's callgrind (--callgrind, instr.csv: instructions per call at
#          each end; installs valgrind when missing)
#   rdma   bench/softroce.sh, the latency ladder in one Soft-RoCE boot, the RPC rungs with
#          client and server in separate processes and again in one (RDMA_FLAGS: its
#          rpcbench flags; STREAM_FLAGS and RDMA_OPTS, the transport's options, as
#          softroce.sh reads them)
#   kv     in one Soft-RoCE boot, kvserver and two echo servers (rpcbench --serve) in
#          processes of their own, then KV_ROUNDS (4) rounds of rpcbench --target … --kv …,
#          rdma:// and tcp:// alternating (BENCH_FLAGS replaces --sizes 1KiB --conc 1
#          --duration 3s --warmup 300ms)
#   scale  transport/rdma's TestScaleTable in one Soft-RoCE boot of RDMARPC_VM_MEM MiB
#          (default 12288: 10 000 connections), no -race (SCALE_FLAGS replaces -scale.n=1,10000
#          -scale.opts=shared -scale.idle=40s -scale.echoes=1000)
#
# RESULTS (default bench/results) is where the page and its folder go: point it at a scratch
# directory to try the script without touching the committed figures. The run itself works in
# .cache/bench-pages/<area>.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
AREA=${1:-}
case $AREA in tcp | rdma | kv | scale) ;; *) echo "usage: bench/pages.sh tcp|rdma|kv|scale" >&2; exit 2 ;; esac
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
RESULTS=${RESULTS:-$REPO/bench/results}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd)
WORK=$REPO/.cache/bench-pages/$AREA
rm -rf "$WORK" && mkdir -p "$WORK"

load() { cut -d' ' -f1-3 /proc/loadavg; }
host() {
  echo "$(nproc) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo) RAM," \
    "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(go env GOVERSION)"
}
COMMIT=$(git -C "$REPO" rev-parse --short HEAD)
[ -z "$(git -C "$REPO" status --porcelain -- . ':(exclude)bench/results')" ] || COMMIT="$COMMIT, with uncommitted changes"
DATE=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD0=$(load)
GUEST="guest: testbed/vm.sh run1 (qemu TCG, rdma_rxe), ${RDMARPC_VM_MEM:-2048} MiB"

case $AREA in
tcp)
  read -r -a FLAGS <<<"${BENCH_FLAGS:---sizes 64,1KiB,64KiB,1MiB --conc 1,16,64 --duration 3s}"
  (cd "$REPO/bench" && go build -o "$WORK/rpcbench" ./cmd/rpcbench)
  CMD="rpcbench --compare raw,drpc,grpc ${FLAGS[*]}; rpcbench --inproc ${FLAGS[*]}"
  MACHINE=$(host)
  "$WORK/rpcbench" --compare raw,drpc,grpc "${FLAGS[@]}" --csv "$WORK/peers.csv" | tee "$WORK/peers.txt"
  "$WORK/rpcbench" --inproc "${FLAGS[@]}" --csv "$WORK/inproc.csv" | tee "$WORK/inproc.txt"
  FILES=(peers.csv peers.txt inproc.csv inproc.txt)
  # Streams beside gRPC-go's (raw and drpc have none): a ping-pong and a flood per caller.
  read -r -a SFLAGS <<<"${TCP_STREAM_FLAGS:---sizes 64,64KiB,1MiB --conc 1,16,64 --duration 3s}"
  CMD="$CMD; rpcbench --compare grpc --modes pingpong,stream ${SFLAGS[*]}"
  "$WORK/rpcbench" --compare grpc --modes pingpong,stream "${SFLAGS[@]}" --csv "$WORK/streams.csv" | tee "$WORK/streams.txt"
  FILES+=(streams.csv streams.txt)
  # Instructions per call at each end, under callgrind: the column the machine's load does
  # not move (INSTR_FLAGS replaces the sizes and the short cells callgrind's slowness wants).
  command -v valgrind >/dev/null || apt-get install -y -q valgrind >/dev/null
  read -r -a IFLAGS <<<"${INSTR_FLAGS:---sizes 64,1KiB,64KiB --conc 1 --duration 3s --warmup 1s}"
  CMD="$CMD; rpcbench --callgrind --compare raw,drpc,grpc ${IFLAGS[*]}"
  "$WORK/rpcbench" --callgrind --compare raw,drpc,grpc "${IFLAGS[@]}" --csv "$WORK/instr.csv" | tee "$WORK/instr.txt"
  FILES+=(instr.csv instr.txt)
  ;;
rdma)
  read -r -a FLAGS <<<"${RDMA_FLAGS:-}"
  CMD="bash bench/softroce.sh <dir> ${FLAGS[*]}"
  [ -z "${STREAM_FLAGS+x}" ] || CMD="STREAM_FLAGS='$STREAM_FLAGS' $CMD"
  [ -z "${FLOOD_PROFILE:-}" ] || CMD="FLOOD_PROFILE=$FLOOD_PROFILE $CMD"
  [ -z "${BASELINE:-}" ] || CMD="BASELINE=$BASELINE $CMD"
  [ -z "${RDMA_OPTS:-}" ] || CMD="RDMA_OPTS='$RDMA_OPTS' $CMD"
  MACHINE="host: $(host); $GUEST"
  bash "$REPO/bench/softroce.sh" "$WORK" "${FLAGS[@]}"
  FILES=(ladder.txt ladder.csv rdma.csv rdma-1p.csv tcp.csv tcp-1p.csv rdma-stream.csv
    rpcbench.txt rpcbench-1p.txt rpcbench-tcp.txt rpcbench-tcp-1p.txt rpcbench-stream.txt
    ladder-before.csv rdma-before.csv tcp-before.csv rdma-stream-before.csv
    flood-c1.txt flood-c16.txt flood-c1.pprof flood-c1.pprof.server flood-c16.pprof flood-c16.pprof.server)
  ;;
kv)
  read -r -a FLAGS <<<"${BENCH_FLAGS:---sizes 1KiB --conc 1 --duration 3s --warmup 300ms}"
  ROUNDS=${KV_ROUNDS:-4}
  (cd "$REPO/bench" && CGO_ENABLED=1 go build -o "$WORK/rpcbench" ./cmd/rpcbench)
  (cd "$REPO/examples" && CGO_ENABLED=1 go build -o "$WORK/kvserver" ./kvstore/cmd/kvserver)
  CMD="guest.sh (KV_ROUNDS=$ROUNDS): per round, rpcbench --target … --kv … ${FLAGS[*]} over rdma:// then tcp://"
  MACHINE="host: $(host); $GUEST"
  {
    echo '# written by bench/pages.sh kv: the KV Get against the echo, separate processes'
    echo 'cd /out'
    echo 'IP=$RDMARPC_TEST_IP'
    echo 'rc=0'
    echo './kvserver --listen rdma://$IP:7471 --listen tcp://$IP:7481 --data-dir /tmp/kv > /out/kvserver.log 2>&1 &'
    echo 'KV=$!'
    echo './rpcbench --serve rdma://$IP:7472 > /out/serve-rdma.log 2>&1 &'
    echo 'E1=$!'
    echo './rpcbench --serve tcp://$IP:7482 > /out/serve-tcp.log 2>&1 &'
    echo 'E2=$!'
    echo '# the three servers say when they serve; the emulated guest takes its time'
    echo 'i=0'
    echo 'until grep -q "kvserver ready" /out/kvserver.log && grep -q serving /out/serve-rdma.log && grep -q serving /out/serve-tcp.log; do'
    echo '  i=$((i + 1)); [ $i -le 120 ] || { echo "FAIL servers not ready"; kill $KV $E1 $E2; exit 1; }; sleep 1'
    echo 'done'
    echo "for round in \$(seq $ROUNDS); do"
    echo '  for tr in rdma tcp; do'
    echo '    if [ $tr = rdma ]; then e=7472; k=7471; else e=7482; k=7481; fi'
    echo '    echo "=== round $round $tr" >> /out/kv.txt'
    printf '    ./rpcbench --target $tr://$IP:$e --kv $tr://$IP:$k --csv /out/round$round-$tr.csv'
    printf ' %q' "${FLAGS[@]}"
    echo ' >> /out/kv.txt 2>&1 || rc=1'
    echo '  done'
    echo 'done'
    echo 'kill $KV $E1 $E2'
    echo 'wait'
    echo 'exit $rc'
  } >"$WORK/guest.sh"
  RDMARPC_VM_QUIET=${RDMARPC_VM_QUIET:-1} RDMARPC_VM_TIMEOUT=${RDMARPC_VM_TIMEOUT:-1800} "$REPO/testbed/vm.sh" run1 "$WORK"
  cat "$WORK/kv.txt"
  FILES=(guest.sh kv.txt $(cd "$WORK" && ls round*-*.csv))
  ;;
scale)
  SCALE=${SCALE_FLAGS:--scale.n=1,10000 -scale.opts=shared -scale.idle=40s -scale.echoes=1000}
  echo "1vm transport/rdma -run=^TestScaleTable\$ $SCALE -timeout=${SCALE_TIMEOUT:-60m}" >"$WORK/scale.txt"
  export RDMARPC_VM_MEM=${RDMARPC_VM_MEM:-12288}
  CMD="RDMARPC_VM_MEM=$RDMARPC_VM_MEM RDMARPC_TESTBED_TESTS=<$(cat "$WORK/scale.txt")> bash testbed/run-tests.sh"
  MACHINE="host: $(host); guest: testbed/vm.sh run1 (qemu TCG, rdma_rxe), $RDMARPC_VM_MEM MiB"
  GOFLAGS= RDMARPC_VM_QUIET=${RDMARPC_VM_QUIET:-1} RDMARPC_VM_TIMEOUT=${RDMARPC_VM_TIMEOUT:-3600} \
    RDMARPC_TESTBED_TESTS="$WORK/scale.txt" bash "$REPO/testbed/run-tests.sh" "$WORK/out"
  cp "$(ls "$WORK"/out/transport-rdma*.single.log | head -1)" "$WORK/scale.log"
  FILES=(scale.log)
  ;;
esac

{
  echo "date: $DATE"
  echo "commit: $COMMIT"
  echo "machine: $MACHINE"
  # A guest area may have waited for another test-bed boot (testbed/vm.sh's lock) after
  # the start: the load then was not the run's.
  START="at the start"
  [ "$AREA" = tcp ] || START="when the target started (before any wait for the test bed)"
  echo "load: $LOAD0 $START, $(load) at the end"
  echo "command: $CMD"
} >"$WORK/meta.txt"

rm -rf "${RESULTS:?}/$AREA" && mkdir -p "$RESULTS/$AREA"
for f in meta.txt "${FILES[@]}"; do
  [ ! -f "$WORK/$f" ] || cp "$WORK/$f" "$RESULTS/$AREA/"
done
(cd "$REPO/bench" && go run ./cmd/benchpage -area "$AREA" -dir "$RESULTS/$AREA" -out "$RESULTS/$AREA.md")
echo "PASS bench/pages.sh $AREA: $RESULTS/$AREA.md"
