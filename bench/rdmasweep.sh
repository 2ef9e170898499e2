#!/usr/bin/env bash
# Compares rdma:// transport options in one Soft-RoCE boot (testbed/vm.sh run1): the 64 B RPC
# echo (1 and 16 callers) and the 64 B stream flood (1 and 16 streams), client and server in
# separate processes, once per option set, in ROUNDS alternating rounds (the guest's noise
# moves figures between minutes: alternate, and read the rounds side by side); perftest and
# the busy-poll verbs rung once, before the first round, for the ratios; a CPU profile of
# both processes during a 64 B echo, 1 caller, per option set (last round).
#
#   bench/rdmasweep.sh OUTDIR LABEL[@REV]='rpcbench flags' [LABEL[@REV]='flags' ...]
#   e.g. bench/rdmasweep.sh /tmp/sweep off='--rdma-poll-spin -1ns' default='' long='--rdma-poll-spin 2ms'
#
# LABEL@REV runs rpcbench built from git revision REV (before/after a change in one boot:
# before@HEAD~1='' after='').
# Writes OUTDIR/sweep-LABEL-rN.csv (rpcbench's CSV), sweep-LABEL-rN.txt, prof-LABEL.pprof(.server),
# ib.csv, verbs.csv, and prints summary.txt (bench/cmd/ladder --sweep-dir reads the CSVs).
# SWEEP_FLAGS replaces --duration 2s --warmup 300ms; ROUNDS (default 2).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:?usage: bench/rdmasweep.sh OUTDIR LABEL=flags...}
shift
[ $# -gt 0 ] || { echo "usage: bench/rdmasweep.sh OUTDIR LABEL=flags..." >&2; exit 2; }
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
ROUNDS=${ROUNDS:-2}
read -r -a SW <<<"${SWEEP_FLAGS:---duration 2s --warmup 300ms}"
mkdir -p "$OUT"
rm -f "$OUT"/rpcbench-* "$OUT"/sweep-* "$OUT"/prof-* "$OUT"/ib.csv "$OUT"/verbs.csv "$OUT"/summary.txt "$OUT"/rc.*
(cd "$REPO" && CGO_ENABLED=1 go build -o "$OUT/rpcbench" ./bench/cmd/rpcbench &&
  CGO_ENABLED=1 go build -o "$OUT/ladder" ./bench/cmd/ladder)
# binary LABEL[@REV]: the rpcbench that label runs, built from REV when it names one (once per
# revision).
binary() {
  case $1 in
  *@*)
    local rev=${1#*@}
    local exe=rpcbench-$(git -C "$REPO" rev-parse --short "$rev")
    if [ ! -x "$OUT/$exe" ]; then
      rm -rf "$OUT/src-$exe" && mkdir -p "$OUT/src-$exe"
      git -C "$REPO" archive "$rev" | tar -x -C "$OUT/src-$exe"
      (cd "$OUT/src-$exe" && CGO_ENABLED=1 go build -o "$OUT/$exe" ./bench/cmd/rpcbench) >&2
      rm -rf "$OUT/src-$exe"
    fi
    echo "./$exe"
    ;;
  *) echo ./rpcbench ;;
  esac
}
for arg in "$@"; do binary "${arg%%=*}" >/dev/null; done
{
  echo '# written by bench/rdmasweep.sh'
  echo 'cd /out'
  echo 'rc=0'
  echo '{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; } > /out/sweep-guest.txt'
  # perftest at 64 B: ib_send_lat and ib_send_bw, through rpcbench's --ib-dev (one tiny cell of
  # its own is the price), and the Go busy-poll verbs rung.
  printf './rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --sizes 64 --conc 1 --duration 300ms --warmup 100ms --csv /out/ib.csv > /out/ib.txt 2>&1 || rc=1\n'
  printf './ladder --dev rxe0 --rungs verbs-busy --sizes 64 --conc 1 --csv /out/verbs.csv'
  printf ' %q' "${SW[@]}"
  echo ' > /out/verbs.txt 2>&1 || rc=1'
  for r in $(seq 1 "$ROUNDS"); do
    for arg in "$@"; do
      label=${arg%%=*}
      flags=${arg#*=}
      bin=$(binary "$label")
      label=${label%%@*}
      printf '%s --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-%s-r%s.csv %s' "$bin" "$label" "$r" "$flags"
      printf ' %q' "${SW[@]}"
      echo " > /out/sweep-$label-r$r.txt 2>&1 || rc=1"
      if [ "$r" = "$ROUNDS" ]; then
        printf '%s --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 4s --warmup 300ms --cpuprofile /out/prof-%s.pprof %s' "$bin" "$label" "$flags"
        echo " > /out/prof-$label.txt 2>&1 || rc=1"
      fi
    done
  done
  echo 'exit $rc'
} > "$OUT/guest.sh"

status=0
RDMARPC_VM_QUIET=${RDMARPC_VM_QUIET:-1} RDMARPC_VM_TIMEOUT=${RDMARPC_VM_TIMEOUT:-900} "$REPO/testbed/vm.sh" run1 "$OUT" || status=$?
labels=()
for arg in "$@"; do
  l=${arg%%=*}
  labels+=("${l%%@*}")
done
(cd "$REPO" && go run ./bench/cmd/ladder --sweep-dir "$OUT" --sweep-labels "$(IFS=,; echo "${labels[*]}")" --sweep-rounds "$ROUNDS") | tee "$OUT/summary.txt" || status=1
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/summary.txt"
[ "$status" = 0 ] && echo "PASS bench/rdmasweep.sh: $OUT/summary.txt" || echo "FAIL bench/rdmasweep.sh (exit $status; console: $OUT/console.single.log)"
exit "$status"
