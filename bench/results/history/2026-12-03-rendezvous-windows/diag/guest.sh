cd /out
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
rc=0
(cd /src/transport/rdma && timeout 400 /out/rdma-race.test -test.run '^(TestRendezvousPool|TestRendezvousBadKey)$' -test.v -test.timeout 6m) > /out/default.txt 2>&1 || rc=1
(cd /src/transport/rdma && timeout 400 /out/rdma-race.test -rdma.windows -test.run '^(TestRendezvousBadKey|TestRendezvousPool)$' -test.v -test.timeout 5m) > /out/windows.txt 2>&1 || rc=1
exit $rc
