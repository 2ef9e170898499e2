# written by bench/softroce.sh
cd /out
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/ladder.txt
./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --csv /out/rdma.csv --png /out/rdma.png --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench.txt 2>&1 || rc=1
./rpcbench --listen tcp://$RDMARPC_TEST_IP:0 --csv /out/tcp.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-tcp.txt 2>&1 || rc=1
./rpcbench-before --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rdma-before.csv --sizes 64\,4KiB\,64KiB --conc 1\,16 --duration 2s --warmup 300ms > /out/rpcbench-before.txt 2>&1 || rc=1
./ladder-before --dev rxe0 --rungs conn --csv /out/ladder-before.csv --duration 2s --warmup 300ms > /out/ladder-before.txt 2>&1 || rc=1
./ladder --dev rxe0 --csv /out/ladder.csv --merge /out/rdma.csv,/out/tcp.csv --before /out/ladder-before.csv\,/out/rdma-before.csv --duration 2s --warmup 300ms >> /out/ladder.txt 2>&1 || rc=1
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/ladder.txt
done
for v in before A AC y1 after before2; do
  b=./ladder-$v; [ $v = after ] && b=./ladder; [ $v = before2 ] && b=./ladder-before
  $b --dev rxe0 --rungs conn --duration 2s --warmup 300ms > /out/abl-$v.txt 2>&1 || rc=1
done
./ladder-base --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 4s --cpuprofile /out/prof-before-conn64.prof > /out/prof-before-conn64.txt 2>&1 || rc=1
./ladder --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 4s --cpuprofile /out/prof-after-conn64.prof > /out/prof-after-conn64.txt 2>&1 || rc=1
./ladder-base --dev rxe0 --rungs conn --sizes 4096 --conc 16 --duration 4s --cpuprofile /out/prof-before-conn4k16.prof > /out/prof-before-conn4k16.txt 2>&1 || rc=1
./ladder --dev rxe0 --rungs conn --sizes 4096 --conc 16 --duration 4s --cpuprofile /out/prof-after-conn4k16.prof > /out/prof-after-conn4k16.txt 2>&1 || rc=1
echo "ladder done $(cut -d' ' -f1 /proc/uptime)" > /out/progress
t() { name=$1; shift; (cd /src/transport/rdma && timeout 1800 "$@") > /out/test-$name.log 2>&1; r=$?; echo "$name rc=$r" >> /out/tests.rc; [ $r = 0 ] || rc=1; }
t allocs /out/rdma.test -test.v -test.run='^(TestRPCUnaryAllocs)$' -test.count=1 -test.timeout=10m
t verbsallocs sh -c 'cd ../rdma/internal/verbs && /out/verbs.test -test.v -test.run=TestCompChannelWaitAllocs -test.count=1 -test.timeout=5m'
t race-perconn /out/rdma-race.test -test.v -test.run='^(TestRPC|TestConformance|TestStress|TestPeerDiesMidCall|TestConnectCloseLeaks)$' -test.count=1 -test.timeout=25m
t race-shared /out/rdma-race.test -test.v -test.run='^(TestRPC|TestConformance|TestPeerDiesMidCall)$' -rdma.completions=shared -test.count=1 -test.timeout=25m
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "${f##*/} $(cat $f)"; done > /out/hw_counters.txt
exit $rc
