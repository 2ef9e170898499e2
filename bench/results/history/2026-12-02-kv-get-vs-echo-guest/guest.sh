# KV Get against the echo, separate processes, rdma:// and tcp:// in one boot
cd /out
IP=$RDMARPC_TEST_IP
rc=0
./kvserver --listen rdma://$IP:7471 --listen tcp://$IP:7481 --data-dir /tmp/kv --log-level warn > /out/kvserver.log 2>&1 &
KV=$!
./rpcbench --serve rdma://$IP:7472 > /out/serve-rdma.log 2>&1 &
E1=$!
./rpcbench --serve tcp://$IP:7482 > /out/serve-tcp.log 2>&1 &
E2=$!
sleep 3
for round in 1 2 3 4; do
  for tr in rdma tcp; do
    if [ $tr = rdma ]; then e=7472; k=7471; else e=7482; k=7481; fi
    echo "=== round $round $tr" >> /out/kv.txt
    ./rpcbench --target $tr://$IP:$e --kv $tr://$IP:$k --sizes 1KiB --conc 1 --duration 3s --warmup 300ms >> /out/kv.txt 2>&1 || rc=1
  done
done
kill $KV $E1 $E2
wait
exit $rc
