package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rdmarpc/rdmarpc/bench"
)

var tcpArea = area{
	title: "rdmarpc over tcp:// against raw TCP, drpc and gRPC-go, loopback",
	about: "A unary Echo carrying the cell's size each way, its callers calling back to back on one connection " +
		"(raw TCP and drpc carry one call per connection, so they use as many connections as callers), " +
		"rdmarpc then each peer back to back per cell ([bench/README.md](../README.md) says exactly what each does). " +
		"Streams (a ping-pong and a flood on one stream per caller) are measured against gRPC-go only. " +
		"Only ratios inside one run mean anything on a shared machine.",
	target:  "make bench",
	figures: tcpFigures,
}

// peers are the implementations rdmarpc is compared with, in the order of
// the ratio columns.
var peers = []struct{ impl, name string }{
	{"raw", "raw"},
	{"drpc", "drpc"},
	{"grpc", "gRPC-go"},
}

func readResults(path string) ([]bench.Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, err := bench.ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// find returns the result of impl at size and concurrency.
func find(rs []bench.Result, impl string, size, conc int) (bench.Result, bool) {
	for _, r := range rs {
		if r.Impl == impl && r.Size == size && r.Concurrency == conc {
			return r, true
		}
	}
	return bench.Result{}, false
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ratio formats a/b, or "—" when either is missing.
func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// perCall formats a per-call cost, or "—" for a CSV that did not count it.
func perCall(v float64, format string) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

// sizeName writes a size as the pages do: 64 B, 1 KiB, 64 KiB.
func sizeName(n int) string {
	s := bench.SizeName(n)
	i := strings.IndexFunc(s, unicode.IsLetter)
	return s[:i] + " " + s[i:]
}

func tcpFigures(w io.Writer, dir string) error {
	rs, err := readResults(filepath.Join(dir, "peers.csv"))
	if err != nil {
		return err
	}
	inproc, err := readResults(filepath.Join(dir, "inproc.csv"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var ours []bench.Result
	split := false
	for _, r := range rs {
		if r.Impl == "rdmarpc" {
			ours = append(ours, r)
			split = split || r.Server != (bench.EndCosts{})
		}
	}
	if len(ours) == 0 {
		return fmt.Errorf("peers.csv: %w for rdmarpc", errNoFigures)
	}
	fmt.Fprintf(w, "## rdmarpc, and its p50 over each peer's\n\n")
	if split {
		fmt.Fprintf(w, "Each server (rdmarpc's and every peer's) in a process of its own, the client in another, as users run them. ")
		fmt.Fprintf(w, "CPU, voluntary context switches and allocations per call are each end's own (getrusage and runtime.MemStats in each process), client / server. ")
	} else {
		fmt.Fprintf(w, "Client and server in one process; allocations and CPU per call are the whole process's (both ends). ")
	}
	fmt.Fprintf(w, "p50 / peer below 1: rdmarpc is faster; calls/s / gRPC-go above 1: rdmarpc does more.\n\n")
	fmt.Fprintf(w, "| size | callers | p50 µs | p99 µs | calls/s | CPU µs/call | vol. cs/call | allocs/call |")
	for _, p := range peers {
		fmt.Fprintf(w, " p50 / %s |", p.name)
	}
	fmt.Fprintf(w, " calls/s / gRPC-go | p50 µs, one process |\n|---|---|---|---|---|---|---|---|")
	for range peers {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintf(w, "---|---|\n")
	for _, r := range ours {
		fmt.Fprintf(w, "| %s | %d | %.1f | %.1f | %.0f | %s | %s | %s |", sizeName(r.Size), r.Concurrency,
			us(r.P50), us(r.P99), r.CallsPerSec(), ends(r, us(r.CPUPerCall), us(r.Server.CPU), "%.1f"),
			ends(r, r.VCSWPerCall, r.Server.VCSW, "%.2f"), ends(r, r.AllocsPerCall, r.Server.Allocs, "%.1f"))
		for _, p := range peers {
			pr, _ := find(rs, p.impl, r.Size, r.Concurrency)
			fmt.Fprintf(w, " %s |", ratio(us(r.P50), us(pr.P50)))
		}
		g, _ := find(rs, "grpc", r.Size, r.Concurrency)
		ip := "—"
		if s, ok := find(inproc, "rdmarpc", r.Size, r.Concurrency); ok {
			ip = fmt.Sprintf("%.1f", us(s.P50))
		}
		fmt.Fprintf(w, " %s | %s |\n", ratio(r.CallsPerSec(), g.CallsPerSec()), ip)
	}
	if inproc == nil {
		fmt.Fprintf(w, "\nThe last column waits for a run with client and server in one process (`rpcbench --inproc`, inproc.csv here).\n")
	}
	if err := instrFigures(w, dir); err != nil {
		return err
	}
	if err := streamFigures(w, dir); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Every implementation\n\n")
	fmt.Fprintf(w, "| impl | size | callers | p50 µs | p99 µs | p99.9 µs | calls/s | CPU µs/call | vol. cs/call | allocs/call |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	byImpl := slices.Clone(rs)
	rank := func(impl string) int {
		for i, p := range peers {
			if p.impl == impl {
				return i + 1
			}
		}
		if impl == "rdmarpc" {
			return 0
		}
		return len(peers) + 1
	}
	slices.SortStableFunc(byImpl, func(a, b bench.Result) int { return rank(a.Impl) - rank(b.Impl) })
	for _, r := range byImpl {
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.1f | %.1f | %.0f | %s | %s | %s |\n", r.Impl, sizeName(r.Size), r.Concurrency,
			us(r.P50), us(r.P99), us(r.P999), r.CallsPerSec(), ends(r, us(r.CPUPerCall), us(r.Server.CPU), "%.1f"),
			ends(r, r.VCSWPerCall, r.Server.VCSW, "%.2f"), ends(r, r.AllocsPerCall, r.Server.Allocs, "%.1f"))
	}
	return nil
}

// ends formats a per-call cost of both ends, client / server, when the
// server was measured in its own process; else the one process's figure.
func ends(r bench.Result, client, server float64, format string) string {
	if r.Server == (bench.EndCosts{}) {
		return perCall(client, format)
	}
	return perCall(client, format) + " / " + perCall(server, format)
}

// instrFigures writes the instructions per call of instr.csv (rpcbench
// --callgrind), when the run has one.
func instrFigures(w io.Writer, dir string) error {
	rs, err := readResults(filepath.Join(dir, "instr.csv"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Instructions per call\n\n")
	fmt.Fprintf(w, "Each end under valgrind's callgrind (`rpcbench --callgrind`), client / server, thousands: what the machine's load does not move, ")
	fmt.Fprintf(w, "though the Go runtime's idle spinning and the collector still vary it by a few percent. Calls were back to back, one caller.\n\n")
	fmt.Fprintf(w, "| size | callers | rdmarpc |")
	for _, p := range peers {
		fmt.Fprintf(w, " %s |", p.name)
	}
	for _, p := range peers {
		fmt.Fprintf(w, " rdmarpc / %s |", p.name)
	}
	fmt.Fprintf(w, "\n|---|---|---|")
	for range peers {
		fmt.Fprintf(w, "---|---|")
	}
	fmt.Fprintf(w, "\n")
	k := func(r bench.Result) string {
		if r.InstrPerCall == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f / %.1f", r.InstrPerCall/1e3, r.Server.Instr/1e3)
	}
	for _, r := range rs {
		if r.Impl != "rdmarpc" {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s |", sizeName(r.Size), r.Concurrency, k(r))
		for _, p := range peers {
			pr, _ := find(rs, p.impl, r.Size, r.Concurrency)
			fmt.Fprintf(w, " %s |", k(pr))
		}
		for _, p := range peers {
			pr, _ := find(rs, p.impl, r.Size, r.Concurrency)
			fmt.Fprintf(w, " %s |", ratio(r.InstrPerCall+r.Server.Instr, pr.InstrPerCall+pr.Server.Instr))
		}
		fmt.Fprintf(w, "\n")
	}
	return nil
}

// streamFigures writes rdmarpc's stream cells of streams.csv (rpcbench
// --compare grpc --modes pingpong,stream) beside gRPC-go's, when the run
// has one.
func streamFigures(w io.Writer, dir string) error {
	rs, err := readResults(filepath.Join(dir, "streams.csv"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Streams, against gRPC-go\n\n")
	fmt.Fprintf(w, "One long-lived bidirectional stream per caller: pingpong sends one message and waits for its echo, stream floods and counts the echoes. ")
	fmt.Fprintf(w, "Each server in a process of its own; per-message costs are each end's own, client / server. ")
	fmt.Fprintf(w, "p50 / gRPC-go below 1: rdmarpc is faster; messages/s / gRPC-go above 1: rdmarpc moves more.\n\n")
	fmt.Fprintf(w, "| mode | size | callers | p50 µs | messages/s | CPU µs/message | vol. cs/message | allocs/message | p50 / gRPC-go | messages/s / gRPC-go |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		mode, ok := strings.CutPrefix(r.Impl, "rdmarpc/")
		if !ok {
			continue
		}
		g, _ := find(rs, "grpc/"+mode, r.Size, r.Concurrency)
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s |\n", mode, sizeName(r.Size), r.Concurrency,
			perCall(us(r.P50), "%.1f"), r.CallsPerSec(), ends(r, us(r.CPUPerCall), us(r.Server.CPU), "%.1f"),
			ends(r, r.VCSWPerCall, r.Server.VCSW, "%.2f"), ends(r, r.AllocsPerCall, r.Server.Allocs, "%.1f"),
			ratio(us(r.P50), us(g.P50)), ratio(r.CallsPerSec(), g.CallsPerSec()))
	}
	return nil
}
