cd /out
rc=0
for i in 1 2 3; do
  ./ladder-before --dev rxe0 --rungs conn --sizes 64,4096 --conc 1,16 --csv /out/conn-before-$i.csv > /out/conn-before-$i.txt 2>&1 || rc=1
  ./ladder --dev rxe0 --rungs conn --sizes 64,4096 --conc 1,16 --csv /out/conn-after-$i.csv > /out/conn-after-$i.txt 2>&1 || rc=1
  ./rpcbench-before --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,64KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rpc-before-$i.csv > /out/rpc-before-$i.txt 2>&1 || rc=1
  ./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,64KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rpc-after-$i.csv > /out/rpc-after-$i.txt 2>&1 || rc=1
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
