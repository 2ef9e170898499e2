# rndv3 boot 2: windowed regions on by default (b8a5475's tree). First the tests under -race:
# TestRendezvousBadKey x10 (the close-order fix), the per-transfer line of tests.txt, the
# rendezvous tests, the transport's conformance and stress suites; then two more rounds of
# per-transfer registration (rpcbench-reg: rendezvousWindows=false) against windows
# (rpcbench-win, the default) at 1 and 16 MiB, and rendezvous against fragments at 64 and
# 256 KiB (where the threshold goes).
cd /out
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
trc=0
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r)"; date -u; } > /out/tests.txt
(cd /src/transport/rdma && timeout 600 /out/rdma-race.test -test.run '^TestRendezvousBadKey$' -test.count 10 -test.v -test.timeout 9m) >> /out/tests.txt 2>&1 || trc=1
echo "badkey rc=$trc $(date -u)" >> /out/tests.txt
(cd /src/transport/rdma && timeout 600 /out/rdma-race.test -rdma.windows=false -test.run '^TestRendezvous(BadKey|StaleKey|Cancel|Pool|LentReleasedTwice|ReplyAfterCreditOnly)$' -test.v -test.timeout 9m) >> /out/tests.txt 2>&1 || trc=1
echo "per-transfer rc=$trc $(date -u)" >> /out/tests.txt
(cd /src/transport/rdma && timeout 1000 /out/rdma-race.test -test.run '^TestRendezvous' -test.v -test.timeout 16m) >> /out/tests.txt 2>&1 || trc=1
echo "rendezvous rc=$trc $(date -u)" >> /out/tests.txt
(cd /src/transport/rdma/internal/verbs && timeout 300 /out/verbs.test -test.run '^(TestMemoryWindow|TestRDMARead)$' -test.v) >> /out/tests.txt 2>&1 || trc=1
echo "verbs rc=$trc $(date -u)" >> /out/tests.txt
(cd /src/transport/rdma && timeout 1500 /out/rdma-race.test -test.run '^(TestSharedConformance|TestConformance|TestStress)$' -test.v -test.timeout 24m) >> /out/tests.txt 2>&1 || trc=1
echo "tests rc=$trc $(date -u)" >> /out/tests.txt
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/rndv.txt
F="--sizes 1MiB,16MiB --conc 1 --modes unary,stream --duration 8s --warmup 1s"
T="--conc 1 --modes unary,stream --duration 8s --warmup 1s"
run() { # name binary flags...
  name=$1 bin=$2; shift 2
  echo "=== $name $(date -u)" >> /out/rndv.txt
  ./$bin --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rndv-$name.csv "$@" > /out/rpcbench-rndv-$name.txt 2>&1 || rc=1
}
run win-128KiB rpcbench-win $T --sizes 256KiB --rdma-rendezvous 128KiB
run off-256KiB rpcbench-win $T --sizes 256KiB --rdma-rendezvous off
run reg-3 rpcbench-reg $F
run win-3 rpcbench-win $F
run win-128KiB-2 rpcbench-win $T --sizes 256KiB --rdma-rendezvous 128KiB
run off-256KiB-2 rpcbench-win $T --sizes 256KiB --rdma-rendezvous off
run reg-4 rpcbench-reg $F
run win-4 rpcbench-win $F
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/rndv.txt
done
echo "=== done $(date -u)" >> /out/rndv.txt
# 1 GiB each way (TestTwoHostsRendezvousHuge), server and client as two processes in this
# one guest (RDMARPC_VM_MEM=6144), no -race.
(cd /src/transport/rdma && ROLE=server timeout 1200 /out/rdma.test -test.run '^TestTwoHostsRendezvousHuge$' -rdma.huge=1024 -test.v -test.timeout 19m > /out/huge.server.txt 2>&1; echo "rc=$?" >> /out/huge.server.txt) &
(cd /src/transport/rdma && ROLE=client PEER_IP=$RDMARPC_TEST_IP timeout 1200 /out/rdma.test -test.run '^TestTwoHostsRendezvousHuge$' -rdma.huge=1024 -test.v -test.timeout 19m > /out/huge.client.txt 2>&1; echo "rc=$?" >> /out/huge.client.txt)
wait
[ $trc = 0 ] || rc=1
exit $rc
