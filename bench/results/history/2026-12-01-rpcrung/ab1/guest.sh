# rpcrung A/B, one boot, alternated: rpcbench-before = main 55ed9e9, rpcbench-after = rpcrung.
cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/info.txt
./ladder --dev rxe0 --rungs verbs-busy,conn --sizes 64 --conc 1 --duration 2s --warmup 300ms > /out/ladder-ref.txt 2>&1 || rc=1
for i in 1 2; do
  for b in before after; do
    ./rpcbench-$b --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,4KiB,64KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rdma-$b-$i.csv > /out/rdma-$b-$i.txt 2>&1 || rc=1
  done
done
./rpcbench-after --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 6s --warmup 300ms --cpuprofile /out/rpc-after.prof > /out/rpc-after-prof.txt 2>&1 || rc=1
./ladder --dev rxe0 --rungs conn --csv /out/l.csv --merge /out/rdma-after-2.csv --sizes 64 --conc 1 --duration 2s --warmup 300ms > /out/ladder-after.txt 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
(cd /src/transport/rdma && /out/rdma.test -test.v -test.run '^(TestRPCUnaryAllocs|TestConformance)$' -test.count=1 -test.timeout=8m) > /out/allocs-conf.log 2>&1 || rc=1
(cd /src/transport/rdma && /out/rdma-race.test -test.v -test.run '^(TestRPC|TestConformance)$' -test.count=1 -test.timeout=20m) > /out/race.log 2>&1 || rc=1
(cd /src/transport/rdma && /out/rdma-race.test -test.v -test.run '^(TestRPC|TestConformance|TestPeerDiesMidCall)$' -rdma.completions=shared -test.count=1 -test.timeout=20m) > /out/race-shared.log 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "after tests: rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
echo "rc=$rc" > /out/done.txt
exit $rc
