# rpcrung A/B 2, one boot, alternated three rounds: rpcbench-before = main 55ed9e9, rpcbench-after = rpcrung.
cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/info.txt
./ladder --dev rxe0 --rungs verbs-busy,conn --sizes 64 --conc 1 --duration 2s --warmup 300ms > /out/ladder-ref.txt 2>&1 || rc=1
for i in 1 2 3; do
  for b in before after; do
    ./rpcbench-$b --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,4KiB,64KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rdma-$b-$i.csv > /out/rdma-$b-$i.txt 2>&1 || rc=1
  done
done
for b in before after; do
  ./rpcbench-$b --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 5s --warmup 300ms --cpuprofile /out/rpc-$b.prof --csv /out/prof-$b.csv > /out/prof-$b.txt 2>&1 || rc=1
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
cat /proc/loadavg > /out/guest-load.txt
exit $rc
