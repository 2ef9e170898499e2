# rdmaspeed: the doorbell change A/B, 64 B floods and unary echo, separate processes, alternating builds
cd /out
for round in 1 2 3; do
  for b in before after; do
    bin=./rpcbench; [ $b = before ] && bin=./rpcbench-before
    echo "=== round $round $b" >> /out/ab.txt
    $bin --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --duration 2s --warmup 300ms --csv /out/ab-$round-$b.csv >> /out/ab.txt 2>&1
  done
done
exit 0
