# 64 KiB regression check: base 55ed9e9, rpcrung merge d179665, both merges 2152db4, head 7aa2b0e; alternated 2 rounds.
cd /out
rc=0
for i in 1 2; do
  for b in base rpcrung both head; do
    ./rpcbench-$b --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,64KiB --conc 1 --duration 2s --warmup 300ms --csv /out/rdma-$b-$i.csv > /out/rdma-$b-$i.txt 2>&1 || rc=1
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
