cd /out
for round in 1 2 3 4; do
  for rev in head new; do
    ./ladder-$rev --dev rxe0 --rungs conn --sizes 64,4096 --conc 1,16 --duration 2s --warmup 300ms > /out/r$round-$rev.txt 2>&1
  done
done
exit 0
