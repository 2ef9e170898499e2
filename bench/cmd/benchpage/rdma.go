package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// streamWhere says where the stream rows' ends ran: the run's rpcbench
// log tells.
func streamWhere(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "rpcbench-stream.txt"))
	switch {
	case err != nil:
		return ""
	case strings.Contains(string(b), "servers in child processes"):
		return ", client and server in separate processes"
	case strings.Contains(string(b), "servers in this process"):
		return ", both ends in one process"
	}
	return ""
}

var rdmaArea = area{
	title: "The latency ladder: rdma:// on Soft-RoCE, from perftest to the RPC",
	about: "One boot of the test bed's guest (qemu TCG, `rdma_rxe` on a dummy device; testbed/README.md), " +
		"every rung at 64 B, 4 KiB and 64 KiB, 1 and 16 in flight: `ib_send_lat`/`ib_send_bw` (perftest), " +
		"raw verbs through the Go binding busy-polling and on the completion channel, the transport's Conn, " +
		"the RPC echo over rdma:// and over tcp://, and a raw TCP ping-pong. The guest's CPU is emulated: " +
		"read the ratios inside the boot, not the times.",
	target:  "make bench-rdma",
	figures: rdmaFigures,
}

// ladderText is what the page takes from ladder.txt.
type ladderText struct {
	guest    []string // the guest's description, first lines
	intro    []string // the lines that explain the table
	table    []string // the ladder's table, header first
	summary  []string // "rpc-rdma / rpc-tcp …"
	targets  []string // issue 25's targets, "target: " taken off
	counters []string // the device's RNR and retry counters
	host     string   // "host: …"
	baseline bool     // a before/after table followed (BASELINE)
	before   []string // that table, header first
}

// parseLadder reads bench/softroce.sh's ladder.txt: the guest's lines,
// the rungs' progress lines (skipped), the ladder's table, the optional
// before/after table (skipped), the counters and the host's line.
func parseLadder(text string) (ladderText, error) {
	var (
		l        ladderText
		in       bool // inside the table
		inBefore bool // inside the before/after table
	)
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimRight(line, " ")
		switch {
		case strings.HasPrefix(t, "guest:") || strings.HasPrefix(t, "MemTotal:"):
			l.guest = append(l.guest, strings.Join(strings.Fields(t), " "))
		case strings.HasPrefix(t, "The ladder:") || strings.HasPrefix(t, "Per call") || strings.HasPrefix(t, "vcsw:"):
			l.intro = append(l.intro, t)
		case strings.HasPrefix(t, "rung ") && l.table == nil:
			l.table, in = append(l.table, t), true
		case strings.HasPrefix(t, "Before (baseline build)"):
			l.baseline, in, inBefore = true, false, true
			l.before = append(l.before, t)
		case strings.HasPrefix(t, "rpc-rdma / rpc-tcp"):
			l.summary, in = append(l.summary, t), false
		case strings.HasPrefix(t, "Issue 25's targets"):
			in = false
		case strings.HasPrefix(t, "target: "):
			l.targets, in = append(l.targets, strings.TrimPrefix(t, "target: ")), false
		case strings.HasPrefix(t, "rxe0 "):
			l.counters, in, inBefore = append(l.counters, t[len("rxe0 "):]), false, false
		case strings.HasPrefix(t, "host:"):
			l.host, in, inBefore = t, false, false
		case in:
			l.table = append(l.table, t)
		case inBefore && t != "":
			l.before = append(l.before, t)
		}
	}
	for len(l.table) > 0 && l.table[len(l.table)-1] == "" {
		l.table = l.table[:len(l.table)-1]
	}
	if len(l.table) < 2 {
		return l, fmt.Errorf("ladder.txt: %w: no ladder table", errNoFigures)
	}
	return l, nil
}

func rdmaFigures(w io.Writer, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "ladder.txt"))
	if err != nil {
		return err
	}
	l, err := parseLadder(string(b))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "## The ladder\n\n")
	for _, s := range l.intro {
		fmt.Fprintf(w, "%s\n", s)
	}
	fmt.Fprintf(w, "\n```\n%s\n```\n\n", strings.Join(l.table, "\n"))
	for _, s := range l.summary {
		fmt.Fprintf(w, "%s.\n", s)
	}
	if len(l.targets) > 0 {
		fmt.Fprintf(w, "\nIssue 25's targets, rdma:// with client and server in separate processes, in this boot:\n\n")
		for _, s := range l.targets {
			fmt.Fprintf(w, "- %s\n", s)
		}
	}
	if len(l.counters) > 0 {
		fmt.Fprintf(w, "\nrxe0's counters after the run: %s.\n", strings.Join(l.counters, ", "))
	}
	if len(l.guest) > 0 || l.host != "" {
		fmt.Fprintf(w, "\n%s\n", strings.Join(append(l.guest, l.host), "; "))
	}
	if l.baseline {
		fmt.Fprintf(w, "\nThis run also measured a baseline build (the command's BASELINE); from [ladder.txt](%s/ladder.txt):\n", filepath.Base(dir))
		if len(l.before) > 1 {
			fmt.Fprintf(w, "\n```\n%s\n```\n", strings.Join(l.before, "\n"))
		}
	}
	if slices.ContainsFunc(l.table, func(s string) bool { return strings.HasPrefix(s, "rpc-rdma-1p ") }) {
		fmt.Fprintf(w, "\nrpc-rdma and rpc-tcp have client and server in separate processes (rpcbench's server in a child process); "+
			"rpc-rdma-1p and rpc-tcp-1p are the same echo with both ends in one process (rpcbench --inproc), "+
			"and every other rung but perftest's has both ends in one process.\n")
	} else {
		fmt.Fprintf(w, "\nEvery rung but perftest's has both ends in one process. RPC over rdma:// and tcp:// with client and server "+
			"in separate processes is not measured here yet (see [kv.md](kv.md) for an echo between processes).\n")
	}

	streams, err := readResults(filepath.Join(dir, "rdma-stream.csv"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n## Streams over rdma://\n\nA stream ping-pong (one message each way at a time) and a flood "+
		"(calls/s: messages echoed per second; no latency), next to perftest at the same size%s.\n\n", streamWhere(dir))
	fmt.Fprintf(w, "| impl | size | streams | p50 µs | p99 µs | calls/s | MB/s |\n|---|---|---|---|---|---|---|\n")
	for _, r := range streams {
		fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.1f | %.0f | %.2f |\n", r.Impl, sizeName(r.Size), r.Concurrency,
			us(r.P50), us(r.P99), r.CallsPerSec(), r.MBPerSec())
	}
	return nil
}
