cd /out
rc=0
for i in 1 2 3; do
  for b in before mid after; do
    l=./ladder-$b; [ $b = after ] && l=./ladder
    $l --dev rxe0 --rungs conn --sizes 64,4096 --conc 1,16 --csv /out/conn-$b-$i.csv > /out/conn-$b-$i.txt 2>&1 || rc=1
  done
done
./rpcbench-before --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1,16 --duration 2s --warmup 300ms --csv /out/rpc-before.csv > /out/rpc-before.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1,16 --duration 2s --warmup 300ms --csv /out/rpc-after.csv > /out/rpc-after.txt 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
