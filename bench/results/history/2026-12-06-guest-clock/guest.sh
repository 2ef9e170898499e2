cd /out
CS=/sys/devices/system/clocksource/clocksource0
cat /proc/cmdline > cmdline.txt
orig=$(cat $CS/current_clocksource)
echo "orig=$orig available=$(cat $CS/available_clocksource)" > cs.txt
dmesg | grep -i -E "clocksource|tsc" >> cs.txt 2>&1
for round in 1 2; do
  for cs in hpet tsc; do
    echo $cs > $CS/current_clocksource 2>>cs.txt || echo "cannot set $cs" >> cs.txt
    echo "== round $round want $cs have $(cat $CS/current_clocksource)" >> out.txt
    ./clk >> out.txt 2>&1
    ./rpcbench --listen rdma://$RDMARPC_TEST_IP:0 --ib-dev rxe0 --modes unary,pingpong,stream --sizes 64 --conc 1 --duration 3s --warmup 300ms >> out.txt 2>&1
  done
done
echo $orig > $CS/current_clocksource
