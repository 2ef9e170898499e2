package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// The ladders, each rung over the one before it. ib_send's row has no
// concurrency (perftest's latency is ib_send_lat's ping-pong, its rate
// ib_send_bw's stream): it stands under every concurrency.
var ladders = [][]string{
	{"ib_send", "verbs-busy", "verbs-event", "conn", "rpc-rdma"},
	{"tcp-raw", "rpc-tcp"},
}

var csvHeader = []string{"rung", "size_bytes", "concurrency", "calls", "seconds", "calls_per_s",
	"p50_us", "p99_us", "csw_per_call", "wakeups_per_call", "cgo_per_call", "allocs_per_call", "cpu_us_per_call"}

func writeCSV(path string, rs []result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write(csvHeader)
	ff := func(v float64, p int) string { return strconv.FormatFloat(v, 'f', p, 64) }
	for _, r := range rs {
		w.Write([]string{r.Rung, strconv.Itoa(r.Size), strconv.Itoa(r.Conc), strconv.FormatInt(r.Calls, 10),
			ff(r.Elapsed.Seconds(), 3), ff(r.callsPerSec(), 1), ff(us(r.P50), 1), ff(us(r.P99), 1),
			ff(r.Cost.CSW, 3), ff(r.Cost.Wakeups, 2), ff(r.Cost.Cgo, 2), ff(r.Cost.Mallocs, 2), ff(us(r.Cost.CPU), 2)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readCSV reads rpcbench's CSV (bench.WriteCSV) by column name: its
// rdmarpc rows become rpc-<transport>, its ib_send rows ib_send.
func readCSV(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("empty")
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	if _, ok := col["rung"]; ok {
		return readOwnCSV(recs, col)
	}
	for _, need := range []string{"impl", "transport", "size_bytes", "concurrency", "calls", "seconds", "calls_per_s", "p50_us", "p99_us"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("no column %q", need)
		}
	}
	var out []result
	for _, rec := range recs[1:] {
		num := func(name string) float64 {
			i, ok := col[name]
			if !ok || i >= len(rec) {
				return 0
			}
			v, _ := strconv.ParseFloat(rec[i], 64)
			return v
		}
		r := result{
			Rung: "rpc-" + rec[col["transport"]], Size: int(num("size_bytes")), Conc: int(num("concurrency")),
			Calls: int64(num("calls")), P50: usDur(num("p50_us")), P99: usDur(num("p99_us")),
			Cost: perCall{CSW: num("csw_per_call"), Wakeups: num("wakeups_per_call"), Cgo: num("cgo_per_call"),
				Mallocs: num("allocs_per_call"), CPU: usDur(num("cpu_us_per_call"))},
		}
		if rec[col["impl"]] == "ib_send" {
			r.Rung = "ib_send"
		}
		// Keep the rate as written (perftest's is ib_send_bw's).
		if cps := num("calls_per_s"); cps > 0 {
			r.Elapsed = time.Duration(float64(r.Calls) / cps * float64(time.Second))
			if r.Calls == 0 {
				r.Calls, r.Elapsed = int64(cps), time.Second
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// readOwnCSV reads what writeCSV wrote.
func readOwnCSV(recs [][]string, col map[string]int) ([]result, error) {
	var out []result
	for _, rec := range recs[1:] {
		num := func(name string) float64 {
			i, ok := col[name]
			if !ok || i >= len(rec) {
				return 0
			}
			v, _ := strconv.ParseFloat(rec[i], 64)
			return v
		}
		out = append(out, result{
			Rung: rec[col["rung"]], Size: int(num("size_bytes")), Conc: int(num("concurrency")),
			Calls: int64(num("calls")), Elapsed: time.Duration(num("seconds") * float64(time.Second)),
			P50: usDur(num("p50_us")), P99: usDur(num("p99_us")),
			Cost: perCall{CSW: num("csw_per_call"), Wakeups: num("wakeups_per_call"), Cgo: num("cgo_per_call"),
				Mallocs: num("allocs_per_call"), CPU: usDur(num("cpu_us_per_call"))},
		})
	}
	return out, nil
}

// printBeforeAfter compares the rungs measured from a baseline build in
// the same boot (before) with this build's: p50 and calls/s, and each one's
// p50 over verbs-busy's.
func printBeforeAfter(w io.Writer, rs, before []result, sizes, concs []int) {
	if len(before) == 0 {
		return
	}
	fmt.Fprintln(w, "\nBefore (baseline build) and after (this build), same boot:")
	fmt.Fprintf(w, "%-12s %6s %4s %11s %11s %7s %11s %11s %7s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s\n",
		"rung", "size", "conc", "p50 before", "p50 after", "after/", "calls/s bef", "calls/s aft", "after/", "×busy bef", "×busy aft", "csw bef", "csw aft",
		"wake bef", "wake aft", "allc bef", "allc aft", "cpuµs bef", "cpuµs aft")
	for _, size := range sizes {
		for _, conc := range concs {
			busy, hasBusy := find(rs, "verbs-busy", size, conc)
			for _, b := range before {
				if b.Size != size || b.Conc != conc {
					continue
				}
				a, ok := find(rs, b.Rung, size, conc)
				if !ok || b.P50 <= 0 || b.callsPerSec() <= 0 {
					continue
				}
				xb, xa := "", ""
				if hasBusy && busy.P50 > 0 {
					xb = fmt.Sprintf("%.2f", float64(b.P50)/float64(busy.P50))
					xa = fmt.Sprintf("%.2f", float64(a.P50)/float64(busy.P50))
				}
				fmt.Fprintf(w, "%-12s %6d %4d %11.1f %11.1f %7.2f %11.0f %11.0f %7.2f %9s %9s %8.2f %8.2f %8.2f %8.2f %8.1f %8.1f %8.1f %8.1f\n",
					b.Rung, size, conc, us(b.P50), us(a.P50), float64(a.P50)/float64(b.P50),
					b.callsPerSec(), a.callsPerSec(), a.callsPerSec()/b.callsPerSec(), xb, xa, b.Cost.CSW, a.Cost.CSW,
					b.Cost.Wakeups, a.Cost.Wakeups, b.Cost.Mallocs, a.Cost.Mallocs, us(b.Cost.CPU), us(a.Cost.CPU))
			}
		}
	}
}

func usDur(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

func find(rs []result, rung string, size, conc int) (result, bool) {
	for _, r := range rs {
		if r.Rung == rung && r.Size == size && (r.Conc == conc || rung == "ib_send") {
			return r, true
		}
	}
	return result{}, false
}

// printTable prints every ladder per size and concurrency: p50, p99,
// calls/s, the p50 and calls/s ratios to the rung below and to verbs-busy,
// and the per-call costs.
func printTable(w io.Writer, rs []result, sizes, concs []int) {
	fmt.Fprintln(w, "\nThe ladder: each rung over the one below it (×below: p50 ratio; rate×: calls/s ratio), and over verbs-busy (×busy).")
	fmt.Fprintln(w, "Per call: both ends in one process; wakeups estimated from the runtime's sampled scheduling latencies; ib_send has none (a C program).")
	fmt.Fprintf(w, "%-12s %6s %4s %10s %10s %10s %7s %7s %7s %7s %8s %6s %7s %8s\n",
		"rung", "size", "conc", "p50 µs", "p99 µs", "calls/s", "×below", "rate×", "×busy", "csw", "wakeups", "cgo", "allocs", "cpu µs")
	for _, size := range sizes {
		for _, conc := range concs {
			for _, ladder := range ladders {
				var below *result
				busy, hasBusy := find(rs, "verbs-busy", size, conc)
				for _, rung := range ladder {
					r, ok := find(rs, rung, size, conc)
					if !ok {
						continue
					}
					ratio, rate, xb := "", "", ""
					if below != nil && below.P50 > 0 {
						ratio = fmt.Sprintf("%.2f", float64(r.P50)/float64(below.P50))
						if r.callsPerSec() > 0 {
							rate = fmt.Sprintf("%.2f", below.callsPerSec()/r.callsPerSec())
						}
					}
					if hasBusy && busy.P50 > 0 && rung != "ib_send" && ladder[0] == "ib_send" {
						xb = fmt.Sprintf("%.2f", float64(r.P50)/float64(busy.P50))
					}
					costs := fmt.Sprintf("%7.2f %8.2f %6.1f %7.1f %8.1f", r.Cost.CSW, r.Cost.Wakeups, r.Cost.Cgo, r.Cost.Mallocs, us(r.Cost.CPU))
					if rung == "ib_send" {
						costs = fmt.Sprintf("%7s %8s %6s %7s %8s", "-", "-", "-", "-", "-")
					}
					fmt.Fprintf(w, "%-12s %6d %4d %10.1f %10.1f %10.0f %7s %7s %7s %s\n",
						rung, size, conc, us(r.P50), us(r.P99), r.callsPerSec(), ratio, rate, xb, costs)
					below = &r
				}
			}
			fmt.Fprintln(w)
		}
	}
	if rdma, ok := find(rs, "rpc-rdma", 64, 1); ok {
		if tcp, ok := find(rs, "rpc-tcp", 64, 1); ok && tcp.P50 > 0 {
			fmt.Fprintf(w, "rpc-rdma / rpc-tcp at 64 B conc 1: p50 %.2f\n", float64(rdma.P50)/float64(tcp.P50))
		}
	}
}
