package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
)

// sweepCell is one cell bench/rdmasweep.sh measures per option set: the
// rung's name as readCSV gives it, and its concurrency.
type sweepCell struct {
	rung string
	conc int
}

var sweepCells = []sweepCell{
	{"rpc-rdma", 1}, {"rpc-rdma", 16}, {"rpc-rdma/stream", 1}, {"rpc-rdma/stream", 16},
}

// printSweep prints what bench/rdmasweep.sh measured in dir: for each
// cell, each option set (label) and round, p50, p99, calls/s, the issue 25
// ratios (echo p50 over verbs-busy's and ib_send_lat's, a flood's rate
// over ib_send_bw's) and the per-call costs at both ends (client +
// server).
func printSweep(w io.Writer, dir string, labels []string, rounds int) error {
	// Without perftest's or the verbs rung's figures (perftest fails to
	// time a run when it cannot measure the clock, as on a loaded host) the
	// table goes without those ratios.
	ib, err := readCSV(filepath.Join(dir, "ib.csv"), false)
	if err != nil {
		fmt.Fprintf(w, "no perftest figures: %v\n", err)
	}
	verbs, err := readCSV(filepath.Join(dir, "verbs.csv"), false)
	if err != nil {
		fmt.Fprintf(w, "no verbs-busy figures: %v\n", err)
	}
	lat, hasIB := find(ib, "ib_send", 64, 0)
	busy, hasBusy := find(verbs, "verbs-busy", 64, 1)
	if hasIB {
		fmt.Fprintf(w, "ib_send 64 B: ib_send_lat p50 %.1f µs, ib_send_bw %.0f msg/s\n", us(lat.P50), lat.CallsPerSec())
	}
	if hasBusy {
		fmt.Fprintf(w, "verbs-busy 64 B conc 1: p50 %.1f µs, %.0f calls/s\n", us(busy.P50), busy.CallsPerSec())
	}
	fmt.Fprintln(w, "\nPer option set and round, client and server in separate processes; per call: vcsw, cgo calls and CPU at both ends (client + server).")
	fmt.Fprintf(w, "%-18s %4s %-10s %2s %9s %9s %9s %7s %7s %7s %13s %11s %17s\n",
		"cell", "conc", "options", "r", "p50 µs", "p99 µs", "calls/s", "×busy", "×lat", "÷bw", "vcsw c+s", "cgo c+s", "cpu µs c+s")
	for _, cell := range sweepCells {
		for _, label := range labels {
			for r := 1; r <= rounds; r++ {
				rs, err := readCSV(filepath.Join(dir, "sweep-"+label+"-r"+strconv.Itoa(r)+".csv"), false)
				if err != nil {
					fmt.Fprintf(w, "%-18s %4d %-10s %2d (no figures: %v)\n", cell.rung, cell.conc, label, r, err)
					continue
				}
				x, ok := find(rs, cell.rung, 64, cell.conc)
				if !ok {
					continue
				}
				xb, xl, xw := "", "", ""
				if x.P50 > 0 && hasBusy && busy.P50 > 0 {
					xb = fmt.Sprintf("%.2f", float64(x.P50)/float64(busy.P50))
				}
				if x.P50 > 0 && hasIB && lat.P50 > 0 {
					xl = fmt.Sprintf("%.2f", float64(x.P50)/float64(lat.P50))
				}
				if x.P50 == 0 && hasIB && lat.CallsPerSec() > 0 {
					xw = fmt.Sprintf("%.3f", x.CallsPerSec()/lat.CallsPerSec())
				}
				fmt.Fprintf(w, "%-18s %4d %-10s %2d %9.1f %9.1f %9.0f %7s %7s %7s %6.2f+%-6.2f %5.1f+%-5.1f %8.1f+%-8.1f\n",
					cell.rung, cell.conc, label, r, us(x.P50), us(x.P99), x.CallsPerSec(), xb, xl, xw,
					x.VCSWPerCall, x.Server.VCSW, x.CgoPerCall, x.Server.Cgo, us(x.CPUPerCall), us(x.Server.CPU))
			}
		}
		fmt.Fprintln(w)
	}
	return nil
}
