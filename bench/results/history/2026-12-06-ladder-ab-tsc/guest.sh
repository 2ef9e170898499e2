cd /out
cat /sys/devices/system/clocksource/clocksource0/current_clocksource > clock.txt
./ladder-6d4fcf2 --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 5s --warmup 300ms > /out/warm.txt 2>&1
round=1
while [ $round -le 30 ]; do
  if [ $((round % 2)) = 1 ]; then revs="6d4fcf2 HEAD"; else revs="HEAD 6d4fcf2"; fi
  for rev in $revs; do
    ./ladder-$rev --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 1500ms --warmup 200ms > /out/r$round-$rev.txt 2>&1
  done
  round=$((round + 1))
done
rdma statistic show > /out/counters.txt 2>&1
