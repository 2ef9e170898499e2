cd /out
for round in 1 2 3 4; do
  for rev in 6d4fcf2 6307d86 head fix; do
    ./ladder-$rev --dev rxe0 --rungs conn --sizes 64 --conc 1,16 --duration 2s --warmup 300ms > /out/r$round-$rev.txt 2>&1
  done
done
for rev in head fix; do
  ./ladder-$rev --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 6s --warmup 300ms --cpuprofile /out/$rev.pprof > /out/p-$rev.txt 2>&1
done
exit 0
