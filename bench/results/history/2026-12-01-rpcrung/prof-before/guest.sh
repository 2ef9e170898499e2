cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/info.txt
./ladder --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 6s --warmup 300ms --cpuprofile /out/conn.prof > /out/conn.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 6s --warmup 300ms --csv /out/rpc.csv --cpuprofile /out/rpc.prof > /out/rpc.txt 2>&1 || rc=1
./ladder --dev rxe0 --rungs conn --csv /out/l.csv --merge /out/rpc.csv --sizes 64 --conc 1 --duration 2s --warmup 300ms > /out/ladder.txt 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
