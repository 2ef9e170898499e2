# clientread A/B, one boot, alternated: rpcbench-before = main 056fead, rpcbench = clientread (lastAlone hysteresis).
cd /out
rc=0
for i in 1 2; do
  for b in before after; do
    r=./rpcbench-$b; [ $b = after ] && r=./rpcbench
    $r --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,4KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rdma-$b-$i.csv > /out/rdma-$b-$i.txt 2>&1 || rc=1
    $r --listen tcp://$RDMARPC_TEST_IP:0 --sizes 64,4KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/tcp-$b-$i.csv > /out/tcp-$b-$i.txt 2>&1 || rc=1
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
