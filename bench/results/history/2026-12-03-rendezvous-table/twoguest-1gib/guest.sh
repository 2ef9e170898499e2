# rndv3: TestTwoHostsRendezvousHuge, 1 GiB each way between the two guests (RDMARPC_VM2_MEM=4096), no -race
[ -d /out/lib ] && export LD_LIBRARY_PATH=/out/lib
grep MemTotal /proc/meminfo > /out/huge.$ROLE.txt
cd /src/transport/rdma && timeout 800 /out/rdma.test -test.run '^TestTwoHostsRendezvousHuge$' -rdma.huge=1024 -test.v -test.timeout 13m >> /out/huge.$ROLE.txt 2>&1
rc=$?
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" >> /out/huge.$ROLE.txt
done
exit $rc
