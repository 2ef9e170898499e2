# clientread A/B, one boot, alternated: rpcbench-before = main 056fead, rpcbench = clientread 9ab844e.
cd /out
rc=0
for i in 1 2 3; do
  for b in before after; do
    r=./rpcbench-$b; [ $b = after ] && r=./rpcbench
    $r --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,4KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rdma-$b-$i.csv > /out/rdma-$b-$i.txt 2>&1 || rc=1
    $r --listen tcp://$RDMARPC_TEST_IP:0 --sizes 64,4KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/tcp-$b-$i.csv > /out/tcp-$b-$i.txt 2>&1 || rc=1
  done
done
(cd /src/transport/rdma && /out/rdma.test -test.v -test.run '^TestRPCUnaryAllocs$' -test.count=1 -test.timeout=5m) > /out/allocs.log 2>&1 || rc=1
(cd /src/transport/rdma && /out/rdma-race.test -test.v -test.run '^(TestRPC|TestConformance)$' -test.count=1 -test.timeout=20m) > /out/race.log 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
