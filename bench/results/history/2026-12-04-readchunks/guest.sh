# Chunked rendezvous reads: unchunked (one Read per message) against 1 MiB and 4 MiB chunks,
# rpcbench client and server in separate processes, 1 and 16 MiB, unary and stream, 2 rounds
# alternating; perftest ib_read_lat/ib_read_bw at the same sizes; RNR/retry counters.
cd /out
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/rndv.txt
F="--sizes 1MiB,16MiB --conc 1 --modes unary,stream --duration 8s --warmup 1s"
run() { name=$1 bin=$2; shift 2
  echo "=== $name $(date -u)" >> /out/rndv.txt
  ./$bin --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rndv-$name.csv $F > /out/rpcbench-rndv-$name.txt 2>&1 || rc=1
}
for r in 1 2; do
  run nochunk-$r rpcbench-nochunk
  run c1m-$r rpcbench-c1m
  run c4m-$r rpcbench-c4m
done
G=$RDMARPC_TEST_GID_INDEX
for s in 1048576 16777216; do
  n=20; [ $s -gt 1048576 ] || n=200
  for tool in ib_read_lat ib_read_bw; do
    $tool -d rxe0 -x $G -s $s -n $n > /out/pt-$tool-$s.srv 2>&1 &
    ok=0
    for try in 1 2 3 4 5 6 7 8 9 10; do sleep 1
      if $tool -d rxe0 -x $G -s $s -n $n $RDMARPC_TEST_IP > /out/pt-$tool-$s.txt 2>&1; then ok=1; break; fi
    done
    [ $ok = 1 ] || rc=1
    wait
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/rndv.txt
done
exit $rc
