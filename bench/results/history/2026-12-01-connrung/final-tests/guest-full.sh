cd /out
rc=0
(cd /src/transport/rdma && timeout 1700 /out/rdma-race.test -test.v -test.skip=TestThousandConnections -test.count=1 -test.timeout=28m) > /out/test-full-race.log 2>&1 || rc=1
echo "full rc=$rc" > /out/tests.rc
for f in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "${f##*/} $(cat $f)"; done > /out/hw_counters.txt
exit $rc
