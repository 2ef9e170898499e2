#!/bin/sh
# idleping: TestScaleTable at N=1000, 40 s idle (one 30 s keepalive round), before/after
# alternated, default Options and shared receive queues. Runs whatever *.test binaries
# exist in /out when it reaches them (after.test may arrive while the guest waits to boot).
cd /src/transport/rdma
rc=0
run() { # name binary opts
  [ -x "/out/$2" ] || { echo "skip $1: no $2"; return; }
  echo "=== $1 $(date +%T)"
  timeout 900 "/out/$2" -test.v -test.run='^TestScaleTable$' -test.count=1 -scale.n=1000 -scale.idle=40s -scale.opts="$3" > "/out/$1.log" 2>&1 || rc=1
  grep -E '^\s+scalebench_test.go:[0-9]+: \|' "/out/$1.log" | sed 's/^ *scalebench_test.go:[0-9]*: //'
}
for i in 1 2; do
  run before-default-$i before.test default
  run after-default-$i after.test default
  run before-shared-$i before.test shared
  run after-shared-$i after.test shared
done
# -race: the new test and the suites CI runs that the change touches.
if [ -x /out/race.test ]; then
  echo "=== race $(date +%T)"
  timeout 1500 /out/race.test -test.v -test.count=1 -test.timeout=25m -test.run='^(TestSendBackground|TestConformance|TestStress|TestRPC.*|TestScale.*|TestPeerDiesMidCall|TestConnectCloseLeaks)$' > /out/race.log 2>&1 || rc=1
  grep -E '^(--- |ok|FAIL|PASS)' /out/race.log | grep -v -- '--- PASS' | tail -20
  timeout 900 /out/race.test -test.v -test.count=1 -test.timeout=14m -rdma.completions=shared -test.run='^(TestSendBackground|TestRPC|TestConformance)$' > /out/race-shared.log 2>&1 || rc=1
  grep -E '^(--- |ok|FAIL|PASS)' /out/race-shared.log | grep -v -- '--- PASS' | tail -20
fi
for c in rcvd_rnr_err send_rnr_err retry_exceeded_err retry_rnr_exceeded_err; do
  echo "rxe0 $c $(cat /sys/class/infiniband/rxe0/ports/1/hw_counters/$c)" | tee -a /out/counters.txt
done
exit $rc
