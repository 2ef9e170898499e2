package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
)

// The ladders, each rung over the one before it. ib_send's row has no
// concurrency (perftest's latency is ib_send_lat's ping-pong, its rate
// ib_send_bw's stream): it stands under every concurrency. The RPC rungs
// have client and server in separate processes; their -1p rows (rpcbench
// --inproc, read by readCSV with inProc) have both in one, over the
// separate processes' row.
var ladders = [][]string{
	{"ib_send", "verbs-busy", "verbs-event", "conn", "rpc-rdma", "rpc-rdma-1p"},
	{"tcp-raw", "rpc-tcp", "rpc-tcp-1p"},
}

// inProcSuffix names the RPC rungs measured with both ends in one process.
const inProcSuffix = "-1p"

// writeCSV writes this run's cells in bench's CSV form, the rung as impl.
func writeCSV(path string, rs []bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := bench.WriteCSV(f, rs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readCSV reads a CSV of bench's form: this command's cells, or
// rpcbench's, whose rdmarpc rows become rpc-<transport>, or
// rpc-<transport>-1p with inProc (ib_send's stay ib_send, the rate as
// perftest gave it). A ladder CSV from before the command moved to bench/
// (a baseline build's) has a rung column: read by readRungCSV.
func readCSV(path string, inProc bool) ([]bench.Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(string(b), "rung,") {
		return readRungCSV(b)
	}
	rs, err := bench.ReadCSV(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	for i := range rs {
		// rdmarpc, or rdmarpc/pingpong and rdmarpc/stream (rpcbench --modes).
		if rest, ok := strings.CutPrefix(rs[i].Impl, "rdmarpc"); ok {
			rs[i].Impl = "rpc-" + rs[i].Transport + rest
			if inProc {
				rs[i].Impl += inProcSuffix
			}
		}
	}
	return rs, nil
}

// readRungCSV reads the ladder's CSV as it was written before the move:
// rung, size_bytes, concurrency, calls, seconds, calls_per_s, p50_us,
// p99_us and the per-call costs.
func readRungCSV(b []byte) ([]bench.Result, error) {
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	var out []bench.Result
	for _, rec := range recs[1:] {
		num := func(name string) float64 {
			i, ok := col[name]
			if !ok || i >= len(rec) {
				return 0
			}
			v, _ := strconv.ParseFloat(rec[i], 64)
			return v
		}
		out = append(out, bench.Result{
			Impl: rec[col["rung"]], Size: int(num("size_bytes")), Concurrency: int(num("concurrency")),
			Calls: int64(num("calls")), Elapsed: time.Duration(num("seconds") * float64(time.Second)),
			P50: usDur(num("p50_us")), P99: usDur(num("p99_us")),
			CSWPerCall: num("csw_per_call"), WakeupsPerCall: num("wakeups_per_call"), CgoPerCall: num("cgo_per_call"),
			AllocsPerCall: num("allocs_per_call"), CPUPerCall: usDur(num("cpu_us_per_call")),
		})
	}
	return out, nil
}

// printBeforeAfter compares the rungs measured from a baseline build in
// the same boot (before) with this build's: p50 and calls/s, and each one's
// p50 over verbs-busy's.
func printBeforeAfter(w io.Writer, rs, before []bench.Result, sizes, concs []int) {
	if len(before) == 0 {
		return
	}
	fmt.Fprintln(w, "\nBefore (baseline build) and after (this build), same boot; per-call costs at both ends, as in the ladder:")
	fmt.Fprintf(w, "%-16s %6s %4s %11s %11s %7s %11s %11s %7s %9s %9s %8s %8s %8s %8s %8s %8s %8s %8s %9s %9s\n",
		"rung", "size", "conc", "p50 before", "p50 after", "after/", "calls/s bef", "calls/s aft", "after/", "×busy bef", "×busy aft", "vcsw bef", "vcsw aft",
		"wake bef", "wake aft", "cgo bef", "cgo aft", "allc bef", "allc aft", "cpuµs bef", "cpuµs aft")
	for _, size := range sizes {
		for _, conc := range concs {
			busy, hasBusy := find(rs, "verbs-busy", size, conc)
			for _, b := range before {
				if b.Size != size || b.Concurrency != conc {
					continue
				}
				a, ok := find(rs, b.Impl, size, conc)
				if !ok || b.CallsPerSec() <= 0 || a.CallsPerSec() <= 0 || (b.P50 <= 0) != (a.P50 <= 0) {
					continue
				}
				after := "-" // a flood has no latency: calls/s only
				if b.P50 > 0 {
					after = fmt.Sprintf("%.2f", float64(a.P50)/float64(b.P50))
				}
				xb, xa := "", ""
				if hasBusy && busy.P50 > 0 && b.P50 > 0 {
					xb = fmt.Sprintf("%.2f", float64(b.P50)/float64(busy.P50))
					xa = fmt.Sprintf("%.2f", float64(a.P50)/float64(busy.P50))
				}
				eb, ea := bothEnds(b), bothEnds(a)
				fmt.Fprintf(w, "%-16s %6d %4d %11.1f %11.1f %7s %11.0f %11.0f %7.2f %9s %9s %8.2f %8.2f %8.2f %8.2f %8.1f %8.1f %8.1f %8.1f %9.1f %9.1f\n",
					b.Impl, size, conc, us(b.P50), us(a.P50), after,
					b.CallsPerSec(), a.CallsPerSec(), a.CallsPerSec()/b.CallsPerSec(), xb, xa, eb.VCSW, ea.VCSW,
					eb.Wakeups, ea.Wakeups, eb.Cgo, ea.Cgo, eb.Allocs, ea.Allocs, us(eb.CPU), us(ea.CPU))
			}
		}
	}
}

// bothEnds is a row's per-call costs at both ends: this process's plus,
// when the server ran in a process of its own, the server's. A row from a
// CSV without voluntary context switches (a ladder before they were
// written) shows all of its context switches.
func bothEnds(r bench.Result) bench.EndCosts {
	vcsw := r.VCSWPerCall
	if vcsw == 0 {
		vcsw = r.CSWPerCall
	}
	return bench.EndCosts{
		CPU: r.CPUPerCall + r.Server.CPU, VCSW: vcsw + r.Server.VCSW, Allocs: r.AllocsPerCall + r.Server.Allocs,
		Cgo: r.CgoPerCall + r.Server.Cgo, Wakeups: r.WakeupsPerCall + r.Server.Wakeups,
	}
}

func usDur(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

func find(rs []bench.Result, rung string, size, conc int) (bench.Result, bool) {
	for _, r := range rs {
		if r.Impl == rung && r.Size == size && (r.Concurrency == conc || rung == "ib_send") {
			return r, true
		}
	}
	return bench.Result{}, false
}

// printTable prints every ladder per size and concurrency: p50, p99,
// calls/s, the p50 and calls/s ratios to the rung below and to verbs-busy,
// and the per-call costs.
func printTable(w io.Writer, rs []bench.Result, sizes, concs []int) {
	fmt.Fprintln(w, "\nThe ladder: each rung over the one below it (×below: p50 ratio; rate×: calls/s ratio), and over verbs-busy (×busy).")
	fmt.Fprintln(w, "Per call, both ends summed: rpc-rdma and rpc-tcp have client and server in separate processes, the -1p rows and every other rung both ends in one process;")
	fmt.Fprintln(w, "vcsw: voluntary context switches (threads that slept); wakeups estimated from the runtime's sampled scheduling latencies; ib_send has none (a C program).")
	fmt.Fprintf(w, "%-12s %6s %4s %10s %10s %10s %7s %7s %7s %7s %8s %6s %7s %8s\n",
		"rung", "size", "conc", "p50 µs", "p99 µs", "calls/s", "×below", "rate×", "×busy", "vcsw", "wakeups", "cgo", "allocs", "cpu µs")
	for _, size := range sizes {
		for _, conc := range concs {
			for _, ladder := range ladders {
				var below *bench.Result
				busy, hasBusy := find(rs, "verbs-busy", size, conc)
				for _, rung := range ladder {
					r, ok := find(rs, rung, size, conc)
					if !ok {
						continue
					}
					ratio, rate, xb := "", "", ""
					if below != nil && below.P50 > 0 {
						ratio = fmt.Sprintf("%.2f", float64(r.P50)/float64(below.P50))
						if r.CallsPerSec() > 0 {
							rate = fmt.Sprintf("%.2f", below.CallsPerSec()/r.CallsPerSec())
						}
					}
					if hasBusy && busy.P50 > 0 && rung != "ib_send" && ladder[0] == "ib_send" {
						xb = fmt.Sprintf("%.2f", float64(r.P50)/float64(busy.P50))
					}
					e := bothEnds(r)
					costs := fmt.Sprintf("%7.2f %8.2f %6.1f %7.1f %8.1f", e.VCSW, e.Wakeups, e.Cgo, e.Allocs, us(e.CPU))
					if rung == "ib_send" {
						costs = fmt.Sprintf("%7s %8s %6s %7s %8s", "-", "-", "-", "-", "-")
					}
					fmt.Fprintf(w, "%-12s %6d %4d %10.1f %10.1f %10.0f %7s %7s %7s %s\n",
						rung, size, conc, us(r.P50), us(r.P99), r.CallsPerSec(), ratio, rate, xb, costs)
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
	printTargets(w, rs)
}

// printTargets prints issue 25's targets for rdma:// at 64 B, with client
// and server in separate processes, where the run measured both sides:
// the echo's p50 over verbs-busy's (at most 1.5) and over ib_send_lat's
// (at most 2), and a stream flood's messages per second over ib_send_bw's
// message rate (at least 0.5), at each concurrency measured.
func printTargets(w io.Writer, rs []bench.Result) {
	var lines []string
	ib, hasIB := find(rs, "ib_send", 64, 0)
	if echo, ok := find(rs, "rpc-rdma", 64, 1); ok && echo.P50 > 0 {
		if busy, ok := find(rs, "verbs-busy", 64, 1); ok && busy.P50 > 0 {
			lines = append(lines, fmt.Sprintf("rpc-rdma 64 B conc 1 p50 / verbs-busy p50: %.2f (target ≤ 1.5)", float64(echo.P50)/float64(busy.P50)))
		}
		if hasIB && ib.P50 > 0 {
			lines = append(lines, fmt.Sprintf("rpc-rdma 64 B conc 1 p50 / ib_send_lat p50: %.2f (target ≤ 2)", float64(echo.P50)/float64(ib.P50)))
		}
	}
	for _, conc := range []int{1, 16} {
		if f, ok := find(rs, "rpc-rdma/stream", 64, conc); ok && hasIB && ib.CallsPerSec() > 0 {
			lines = append(lines, fmt.Sprintf("rpc-rdma/stream 64 B flood, %d stream(s): %.0f msg/s / ib_send_bw %.0f msg/s: %.2f (target ≥ 0.5)",
				conc, f.CallsPerSec(), ib.CallsPerSec(), f.CallsPerSec()/ib.CallsPerSec()))
		}
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nIssue 25's targets, rdma://, client and server in separate processes:")
	for _, l := range lines {
		fmt.Fprintln(w, "target: "+l)
	}
}
