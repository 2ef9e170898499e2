# rndv3 boot 1: windowed rendezvous tests under -race; issue 23's table (fragments,
# per-transfer registration, windows) with perftest; TestRendezvous under -race with windows
cd /out
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
trc=0
rc=0
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r)"; date -u; } > /out/tests.txt
(cd /src/transport/rdma && timeout 700 /out/rdma-race.test -rdma.windows -test.run '^TestRendezvous(Pool|ReplyAfterCreditOnly|BadKey|StaleKey|WindowTail|Cancel|LentReleasedTwice)$' -test.count 3 -test.v -test.timeout 10m) >> /out/tests.txt 2>&1 || trc=1
echo "short rc=$trc $(date -u)" >> /out/tests.txt
(cd /src/transport/rdma/internal/verbs && timeout 300 /out/verbs.test -test.run '^TestMemoryWindow$' -test.count 3 -test.v) >> /out/tests.txt 2>&1 || trc=1
echo "verbs rc=$trc $(date -u)" >> /out/tests.txt
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/rndv.txt
F="--sizes 64KiB,1MiB,16MiB --conc 1 --modes unary,stream --duration 8s --warmup 1s"
run() { # name binary flags...
  name=$1 bin=$2; shift 2
  echo "=== $name $(date -u)" >> /out/rndv.txt
  ./$bin --listen rdma://$RDMARPC_TEST_IP:0 --csv /out/rndv-$name.csv "$@" > /out/rpcbench-rndv-$name.txt 2>&1 || rc=1
}
run off rpcbench $F --rdma-rendezvous off
run reg rpcbench $F
run win rpcbench-win $F
run win-32KiB rpcbench-win $F --rdma-rendezvous 32KiB --sizes 64KiB
run reg-32KiB rpcbench $F --rdma-rendezvous 32KiB --sizes 64KiB
run reg-2 rpcbench $F
run win-2 rpcbench-win $F
run off-2 rpcbench $F --rdma-rendezvous off
echo "=== perftest $(date -u)" >> /out/rndv.txt
G=$RDMARPC_TEST_GID_INDEX
for s in 65536 1048576 16777216; do
  n=20; [ $s -gt 1048576 ] || n=200; [ $s -gt 65536 ] || n=1000
  for tool in ib_read_lat ib_read_bw ib_send_lat ib_send_bw; do
    $tool -d rxe0 -x $G -s $s -n $n > /out/pt-$tool-$s.srv 2>&1 &
    ok=0
    for try in 1 2 3 4 5 6 7 8 9 10; do
      sleep 1
      if $tool -d rxe0 -x $G -s $s -n $n $RDMARPC_TEST_IP > /out/pt-$tool-$s.txt 2>&1; then ok=1; break; fi
    done
    [ $ok = 1 ] || rc=1
    wait
  done
done
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/rndv.txt
done
echo "=== done $(date -u)" >> /out/rndv.txt
(cd /src/transport/rdma && timeout 900 /out/rdma-race.test -rdma.windows -test.run '^(TestRendezvous|TestRendezvousRefused)$' -test.v -test.timeout 14m) >> /out/tests.txt 2>&1 || trc=1
echo "tests rc=$trc $(date -u)" >> /out/tests.txt
[ $trc = 0 ] || rc=1
exit $rc
