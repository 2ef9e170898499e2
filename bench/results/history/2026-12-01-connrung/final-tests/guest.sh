cd /out
rc=0
t() { name=$1; shift; (cd /src/transport/rdma && timeout 1500 "$@") > /out/test-$name.log 2>&1; r=$?; echo "$name rc=$r" >> /out/tests.rc; [ $r = 0 ] || rc=1; }
t allocs /out/rdma.test -test.v -test.run='^(TestRPCUnaryAllocs)$' -test.count=1 -test.timeout=10m
t race-perconn /out/rdma-race.test -test.v -test.run='^(TestRPC|TestConformance|TestStress|TestPeerDiesMidCall|TestConnectCloseLeaks)$' -test.count=1 -test.timeout=25m
t race-shared /out/rdma-race.test -test.v -test.run='^(TestRPC|TestConformance|TestPeerDiesMidCall)$' -rdma.completions=shared -test.count=1 -test.timeout=25m
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "${f##*/} $(cat $f)"; done > /out/hw_counters.txt
exit $rc
