cd /out
for round in 1 2 3; do
  for rev in 6d4fcf2 6307d86 13d6352 7aed1b7 c5e28fe 4e5c1b8 87d28be; do
    ./ladder-$rev --dev rxe0 --rungs conn --sizes 64 --conc 1,16 --duration 2s --warmup 300ms > /out/r$round-$rev.txt 2>&1
  done
done
exit 0
