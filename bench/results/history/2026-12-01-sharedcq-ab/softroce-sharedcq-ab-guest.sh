# The shared completion queue against per-connection ones, one boot, alternated:
# ladder-before/rpcbench-before = the sharedcq branch with DefaultCompletions =
# CompletionsPerConnection, ladder/rpcbench = the same code with CompletionsShared.
cd /out
rc=0
for i in 1 2 3; do
  for b in before after; do
    l=./ladder-$b; r=./rpcbench-$b; [ $b = after ] && l=./ladder && r=./rpcbench
    $l --dev rxe0 --rungs conn --sizes 64,65536 --conc 1,16 --csv /out/conn-$b-$i.csv > /out/conn-$b-$i.txt 2>&1 || rc=1
    $r --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64,64KiB --conc 1,16 --duration 2s --warmup 300ms --csv /out/rpc-$b-$i.csv > /out/rpc-$b-$i.txt 2>&1 || rc=1
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/counters.txt
done
exit $rc
