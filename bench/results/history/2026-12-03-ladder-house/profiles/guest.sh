cd /out
for rev in 6d4fcf2 6307d86 87d28be; do
  ./ladder-$rev --dev rxe0 --rungs conn --sizes 64 --conc 1 --duration 6s --warmup 300ms --cpuprofile /out/$rev.pprof > /out/$rev.txt 2>&1
done
exit 0
