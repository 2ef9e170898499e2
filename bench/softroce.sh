#!/usr/bin/env bash
# Runs rpcbench inside the Soft-RoCE test bed (testbed/vm.sh run1): rdmarpc over rdma://
# on rxe0 next to ib_send_lat / ib_send_bw at the same sizes, in the same boot, and
# brings back the table, CSV and PNG.
#
#   bench/softroce.sh [outdir] [rpcbench flags...]    (default outdir: .cache/bench-softroce)
#
# Default flags: --sizes 64,4KiB,64KiB --conc 1,16 --duration 2s; flags given replace them.
# The guest's figures come from an emulated CPU (qemu TCG): read the ratios, not the times.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$REPO/.cache/bench-softroce}
[ $# -gt 0 ] && shift
FLAGS=("$@")
[ ${#FLAGS[@]} -gt 0 ] || FLAGS=(--sizes 64,4KiB,64KiB --conc 1,16 --duration 2s --warmup 300ms)
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin

mkdir -p "$OUT"
rm -f "$OUT"/rpcbench.txt "$OUT"/rdma.csv "$OUT"/rdma.png "$OUT"/rc.*
(cd "$REPO" && CGO_ENABLED=1 go build -o "$OUT/rpcbench" ./bench/cmd/rpcbench)
{
  echo '# written by bench/softroce.sh'
  echo 'cd /out'
  printf './rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --csv /out/rdma.csv --png /out/rdma.png'
  printf ' %q' "${FLAGS[@]}"
  echo ' > /out/rpcbench.txt 2>&1'
  echo 'rc=$?'
  echo 'for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do'
  echo '  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/rpcbench.txt'
  echo 'done'
  echo 'exit $rc'
} > "$OUT/guest.sh"

status=0
RDMARPC_VM_QUIET=${RDMARPC_VM_QUIET:-1} "$REPO/testbed/vm.sh" run1 "$OUT" || status=$?
cat "$OUT/rpcbench.txt" 2>/dev/null || echo "FAIL no rpcbench output in $OUT (see $OUT/console.single.log)"
[ "$status" = 0 ] && echo "PASS bench/softroce.sh: $OUT/rdma.csv, $OUT/rdma.png" || echo "FAIL bench/softroce.sh (exit $status)"
exit "$status"
