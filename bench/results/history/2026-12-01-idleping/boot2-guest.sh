#!/bin/sh
# idleping boot 2: TestScaleTable at N=1000, 40 s idle (one 30 s keepalive round), before
# (2e153ee: main + the cost columns) and after (7096a13) alternated, default Options (a
# 12 GiB guest: 1.1 GiB registered per side) and shared receive queues.
cd /src/transport/rdma
rc=0
run() { # name binary opts
  echo "=== $1 $(date +%T)"
  timeout 900 "/out/$2" -test.v -test.run='^TestScaleTable$' -test.count=1 -scale.n=1000 -scale.idle=40s -scale.opts="$3" > "/out/$1.log" 2>&1 || rc=1
  grep -E '^\s+(scalebench_test.go:[0-9]+: )?\|' "/out/$1.log" | sed 's/^ *scalebench_test.go:[0-9]*: //'
}
run before-default-1 before.test default
run after-default-1 after.test default
run before-shared-3 before.test shared
run after-shared-3 after.test shared
run before-default-2 before.test default
run after-default-2 after.test default
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" | tee -a /out/counters.txt
done
exit $rc
