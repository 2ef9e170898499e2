# written by bench/softroce.sh
cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/ladder.txt
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --csv /out/rdma.csv --png /out/rdma.png --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench.txt 2>&1 || rc=1
./rpcbench --inproc --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rdma-1p.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-1p.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --modes pingpong,stream --csv /out/rdma-stream.csv --sizes 64\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-stream.txt 2>&1 || rc=1
./rpcbench --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-tcp.txt 2>&1 || rc=1
./rpcbench --inproc --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp-1p.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-tcp-1p.txt 2>&1 || rc=1
./rpcbench-before --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rdma-before.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-before.txt 2>&1 || rc=1
./rpcbench-before --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp-before.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-tcp-before.txt 2>&1 || rc=1
./ladder-before --dev rxe0 --rungs conn --csv /out/ladder-before.csv --duration 2s --warmup 300ms > /out/ladder-before.txt 2>&1 || rc=1
./ladder --dev rxe0 --csv /out/ladder.csv --merge /out/rdma.csv\,/out/tcp.csv\,/out/rdma-stream.csv --merge-inproc /out/rdma-1p.csv,/out/tcp-1p.csv --before /out/ladder-before.csv\,/out/rdma-before.csv\,/out/tcp-before.csv --duration 2s --warmup 300ms >> /out/ladder.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes stream --sizes 64 --conc 1 --duration 5s --warmup 300ms --cpuprofile /out/flood-c1.pprof > /out/flood-c1.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes stream --sizes 64 --conc 16 --duration 5s --warmup 300ms --cpuprofile /out/flood-c16.pprof > /out/flood-c16.txt 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/ladder.txt
done
exit $rc
