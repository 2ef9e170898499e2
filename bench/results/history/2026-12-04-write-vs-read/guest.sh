# Issue 23's two designs at the verbs level, one boot: RDMA Write against RDMA Read (perftest),
# latency and bandwidth, 64 KiB, 1 MiB, 16 MiB, two rounds alternating; RNR/retry counters.
cd /out
rc=0
G=$RDMARPC_TEST_GID_INDEX
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; date -u; } > /out/wr.txt
for round in 1 2; do
for s in 65536 1048576 16777216; do
  n=20; [ $s -gt 1048576 ] || n=200; [ $s -gt 65536 ] || n=1000
  for tool in ib_read_lat ib_write_lat ib_read_bw ib_write_bw; do
    $tool -d rxe0 -x $G -s $s -n $n > /out/pt-$tool-$s-$round.srv 2>&1 &
    ok=0
    for try in 1 2 3 4 5 6 7 8 9 10; do sleep 1
      if $tool -d rxe0 -x $G -s $s -n $n $RDMARPC_TEST_IP > /out/pt-$tool-$s-$round.txt 2>&1; then ok=1; break; fi
    done
    [ $ok = 1 ] || rc=1
    wait
    echo "$tool $s round $round ok=$ok $(date -u +%T)" >> /out/wr.txt
  done
done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/wr.txt
done
exit $rc
