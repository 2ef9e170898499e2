package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

var scaleArea = area{
	title: "Idle rdma:// connections at scale: memory, fds, goroutines, CPU",
	about: "transport/rdma's `TestScaleTable` in one boot of the test bed's guest: for each N, a fresh server " +
		"process and N RPC connections to it from one client process (`rpc.Dial`, rdma://), then each side's RSS, " +
		"registered (pinned) memory, fds, goroutines, its CPU over an idle interval, and the p50 of echoes on one " +
		"extra connection and on one of the N. The guest's CPU is emulated: read CPU and latency as rough.",
	target:  "make bench-scale",
	figures: scaleFigures,
}

// logPrefix is what go test -v puts before a t.Log line.
var logPrefix = regexp.MustCompile(`^\s*\S+_test\.go:[0-9]+: `)

// scaleRun is one TestScaleTable run's lines, as the page shows them.
type scaleRun struct {
	options []string // "keepalive on: …"
	table   []string // the table, header first
	costs   []string // the per-connection costs' title and table
	echoes  []string // "N=…: echo p50 on connection …"
}

// parseScale reads the runs of TestScaleTable in a go test -v log. It
// logs each row as it is measured and then the whole table under its
// header: only the rows under a header count.
func parseScale(text string) []scaleRun {
	var (
		runs []scaleRun
		cur  *scaleRun
		dst  *[]string // the table being read, if any
	)
	// run returns the run a line belongs to. The lines before a run's
	// table (its rows as measured, its echoes, its options) come after
	// the previous run's tables: with fresh set, a run that has its table
	// already is over.
	run := func(fresh bool) *scaleRun {
		if cur == nil || (fresh && cur.table != nil) {
			runs = append(runs, scaleRun{})
			cur = &runs[len(runs)-1]
		}
		return cur
	}
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(logPrefix.ReplaceAllString(line, ""))
		switch {
		case strings.HasPrefix(t, "| N | setup/conn"):
			r := run(true)
			r.table, dst = []string{t}, &r.table
		case strings.HasPrefix(t, "| N | side"):
			r := run(false)
			r.costs, dst = append(r.costs, t), &r.costs
		case strings.HasPrefix(t, "|") && dst != nil:
			*dst = append(*dst, t)
		case strings.HasPrefix(t, "Per connection over the idle interval"):
			run(false).costs, dst = []string{t, ""}, nil
		case strings.HasPrefix(t, "keepalive on:"):
			r := run(true)
			r.options, dst = append(r.options, t), nil
		case strings.HasPrefix(t, "N=") && strings.Contains(t, "echo p50 on connection"):
			r := run(true)
			r.echoes, dst = append(r.echoes, t), nil
		default:
			dst = nil
		}
	}
	return runs
}

func scaleFigures(w io.Writer, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "scale.log"))
	if err != nil {
		return err
	}
	runs := parseScale(string(b))
	n := 0
	for _, r := range runs {
		if len(r.table) < 3 {
			continue
		}
		if n++; n > 1 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "## Run %d\n\n", n)
		for _, o := range r.options {
			fmt.Fprintf(w, "%s\n\n", o)
		}
		fmt.Fprintf(w, "%s\n", strings.Join(r.table, "\n"))
		if len(r.echoes) > 0 {
			fmt.Fprintf(w, "\nOn one of the N connections:\n\n")
			for _, e := range r.echoes {
				fmt.Fprintf(w, "- %s\n", e)
			}
		}
		if len(r.costs) > 2 {
			fmt.Fprintf(w, "\n%s\n", strings.Join(r.costs, "\n"))
		}
	}
	if n == 0 {
		return fmt.Errorf("scale.log: %w: no TestScaleTable table", errNoFigures)
	}
	return nil
}
