cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/ladder.txt
for r in 1 2 3; do
  ./ladder-ac --dev rxe0 --rungs verbs-busy --sizes 64 --conc 1 --duration 2s --warmup 300ms > /out/alt-busy-$r.txt 2>&1 || rc=1
  for v in before ac y4; do
    ./ladder-$v --dev rxe0 --rungs conn --duration 2s --warmup 300ms > /out/alt-$v-$r.txt 2>&1 || rc=1
  done
done
for r in 1 2 3; do
  for v in before ac y4; do
    ./rpcbench-$v --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,4KiB --conc 1,16 --duration 2s --warmup 300ms > /out/altrpc-$v-$r.txt 2>&1 || rc=1
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/alt-counters.txt
done
exit $rc
