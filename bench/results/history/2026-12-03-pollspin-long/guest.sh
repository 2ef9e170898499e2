# written by bench/rdmasweep.sh
cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; } > /out/sweep-guest.txt
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --sizes 64 --conc 1 --duration 300ms --warmup 100ms --csv /out/ib.csv > /out/ib.txt 2>&1 || rc=1
./ladder --dev rxe0 --rungs verbs-busy --sizes 64 --conc 1 --csv /out/verbs.csv --duration 2s --warmup 300ms > /out/verbs.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-base-r1.csv  --duration 2s --warmup 300ms > /out/sweep-base-r1.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-long-r1.csv --rdma-poll-spin 2ms --duration 2s --warmup 300ms > /out/sweep-long-r1.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-vlong-r1.csv --rdma-poll-spin 5ms --duration 2s --warmup 300ms > /out/sweep-vlong-r1.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-base-r2.csv  --duration 2s --warmup 300ms > /out/sweep-base-r2.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-long-r2.csv --rdma-poll-spin 2ms --duration 2s --warmup 300ms > /out/sweep-long-r2.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-vlong-r2.csv --rdma-poll-spin 5ms --duration 2s --warmup 300ms > /out/sweep-vlong-r2.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-base-r3.csv  --duration 2s --warmup 300ms > /out/sweep-base-r3.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 4s --warmup 300ms --cpuprofile /out/prof-base.pprof  > /out/prof-base.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-long-r3.csv --rdma-poll-spin 2ms --duration 2s --warmup 300ms > /out/sweep-long-r3.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 4s --warmup 300ms --cpuprofile /out/prof-long.pprof --rdma-poll-spin 2ms > /out/prof-long.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --modes unary,stream --sizes 64 --conc 1,16 --csv /out/sweep-vlong-r3.csv --rdma-poll-spin 5ms --duration 2s --warmup 300ms > /out/sweep-vlong-r3.txt 2>&1 || rc=1
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --sizes 64 --conc 1 --duration 4s --warmup 300ms --cpuprofile /out/prof-vlong.pprof --rdma-poll-spin 5ms > /out/prof-vlong.txt 2>&1 || rc=1
exit $rc
