#!/bin/sh
# idleping: the new device tests against a build with both fixes undone (SendBackground as
# Send; lending at the guaranteed window on every use): they must fail.
cd /src/transport/rdma
/out/broken.test -test.v -test.count=1 -test.run='^(TestSendBackground|TestNoLendToIdlePeer)$' > /out/broken.log 2>&1
echo "rc=$?" >> /out/broken.log
exit 0
