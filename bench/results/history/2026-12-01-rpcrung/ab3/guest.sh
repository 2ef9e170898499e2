# rpcrung A/B 3, one boot: 64 B and 4 KiB, conc 1 and 16, four rounds alternated (before = main 55ed9e9).
cd /out
rc=0
for i in 1 2 3 4; do
  for b in before after; do
    ./rpcbench-$b --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,4KiB --conc 16,1 --duration 2s --warmup 300ms --csv /out/rdma-$b-$i.csv > /out/rdma-$b-$i.txt 2>&1 || rc=1
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
