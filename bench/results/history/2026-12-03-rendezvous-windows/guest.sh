# one boot: the rendezvous guest tests under -race, then the figures (bench/results/history/2026-12-03-rendezvous-windows/guest.sh)
cd /out
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
trc=0
(cd /src/transport/rdma && timeout 900 /out/rdma-race.test -test.run '^(TestRendezvous|TestRendezvousRefused|TestRendezvousCancel|TestRendezvousBadKey|TestRendezvousPool|TestRendezvousStaleKey|TestRendezvousWindowTail|TestRendezvousLentReleasedTwice)$' -test.v -test.timeout 14m) > /out/tests.txt 2>&1 || trc=1
(cd /src/transport/rdma/internal/verbs && timeout 300 /out/verbs.test -test.run '^(TestMemoryWindow|TestRDMARead)$' -test.v) >> /out/tests.txt 2>&1 || trc=1
echo "tests rc=$trc" >> /out/tests.txt
cd /out
rc=0
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
{ echo "guest: $(nproc) vCPUs, kernel $(uname -r), qemu TCG"; grep MemTotal /proc/meminfo; } > /out/bench.txt
(cd /src/transport/rdma && timeout 1500 /out/rdma.test -test.run '^$' -test.bench 'BenchmarkRendezvous/.*/(off|all)/' -test.benchtime 1s -test.timeout 25m -test.v) >> /out/bench.txt 2>&1 || rc=1
(cd /src/transport/rdma/internal/verbs && timeout 300 /out/verbs.test -test.run '^$' -test.bench 'BindWindow|RegisterRemoteRead|RegisterLocal' -test.benchtime 20x) >> /out/bench.txt 2>&1 || rc=1
G=$RDMARPC_TEST_GID_INDEX
for s in 65536 1048576 16777216; do
  case $s in 65536) n=1000;; 1048576) n=200;; *) n=20;; esac
  for tool in ib_read_lat ib_read_bw; do
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
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/bench.txt
done
[ $trc = 0 ] || rc=1
exit $rc
