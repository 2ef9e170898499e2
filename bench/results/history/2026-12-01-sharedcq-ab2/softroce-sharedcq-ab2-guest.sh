# Three builds alternated, one boot: before = per-connection completions (the default),
# mid = shared completions (DefaultCompletions flipped), after = shared plus the waiter
# that watches a CQ held by another goroutine (cqGroup.watch) instead of sleeping at once.
# Then the race-enabled package tests over the shared layout, with the watch.
cd /out
rc=0
for i in 1 2; do
  for b in before mid after; do
    l=./ladder-$b; r=./rpcbench-$b; [ $b = after ] && l=./ladder && r=./rpcbench
    $l --dev rxe0 --rungs conn --sizes 64,65536 --conc 1,16 --csv /out/conn-$b-$i.csv > /out/conn-$b-$i.txt 2>&1 || rc=1
    $r --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,64KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rpc-$b-$i.csv > /out/rpc-$b-$i.txt 2>&1 || rc=1
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
(cd /src/transport/rdma && /out/transport-rdma.test -test.v -test.count=1 -test.timeout=15m -rdma.completions=shared \
  '-test.run=TestSharedCompletions|TestRPC$|TestConformance|TestStress|TestShared|TestCloseDropsLateReceive') > /out/tests.log 2>&1 || rc=1
exit $rc
