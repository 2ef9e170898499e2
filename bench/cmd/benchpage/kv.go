package main

import (
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/rdmarpc/rdmarpc/bench"
)

var kvArea = area{
	title: "The KV store's Get against the echo, rdma:// and tcp://, separate processes",
	about: "kvserver (Pebble, `--sync always`) and an echo server (`rpcbench --serve`) in processes of their own, " +
		"driven by a third, rpcbench with `--kv`: per round and transport, the echo cell then a Get cell of the same " +
		"size and callers (the Get's request carries only the key; its value is the echo's payload). " +
		"The rounds alternate rdma:// and tcp:// in one boot of the test bed's guest. " +
		"The KV target (issue 10): Get p50 at 1 KiB ≤ 1.15× the echo's over the same transport.",
	target:  "make bench-kv",
	figures: kvFigures,
}

// roundFile names a round's CSV: round<N>-<scheme>.csv.
var roundFile = regexp.MustCompile(`^round([0-9]+)-([a-z]+)\.csv$`)

type kvCell struct {
	round      int
	scheme     string
	echo, get  bench.Result
	getPerEcho float64 // Get p50 / echo p50
}

func kvFigures(w io.Writer, dir string) error {
	paths, err := filepath.Glob(filepath.Join(dir, "round*.csv"))
	if err != nil {
		return err
	}
	var cells []kvCell
	for _, p := range paths {
		m := roundFile.FindStringSubmatch(filepath.Base(p))
		if m == nil {
			continue
		}
		round, _ := strconv.Atoi(m[1])
		rs, err := readResults(p)
		if err != nil {
			return err
		}
		for _, e := range rs {
			if e.Impl != "rdmarpc" {
				continue
			}
			g, ok := find(rs, "kv-get", e.Size, e.Concurrency)
			if !ok {
				return fmt.Errorf("%s: no kv-get row for the echo at %s, %d callers", p, sizeName(e.Size), e.Concurrency)
			}
			cells = append(cells, kvCell{round: round, scheme: m[2], echo: e, get: g, getPerEcho: float64(g.P50) / float64(e.P50)})
		}
	}
	if len(cells) == 0 {
		return fmt.Errorf("round*.csv: %w", errNoFigures)
	}
	slices.SortStableFunc(cells, func(a, b kvCell) int {
		if a.round != b.round {
			return a.round - b.round
		}
		return strings.Compare(a.scheme, b.scheme)
	})
	fmt.Fprintf(w, "## Get p50 over echo p50, per round\n\n")
	fmt.Fprintf(w, "Allocations per call are the client's only: the servers run in other processes.\n\n")
	fmt.Fprintf(w, "| round | transport | size | callers | echo p50 µs | Get p50 µs | Get / echo | echo calls/s | Get calls/s | allocs/call echo, Get |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range cells {
		fmt.Fprintf(w, "| %d | %s:// | %s | %d | %.1f | %.1f | %.2f | %.0f | %.0f | %.1f, %.1f |\n", c.round, c.scheme,
			sizeName(c.echo.Size), c.echo.Concurrency, us(c.echo.P50), us(c.get.P50), c.getPerEcho,
			c.echo.CallsPerSec(), c.get.CallsPerSec(), c.echo.AllocsPerCall, c.get.AllocsPerCall)
	}

	// The medians over rounds, per transport and cell; and, round by
	// round, how the transports compare.
	type key struct {
		scheme     string
		size, conc int
	}
	ratios := map[key][]float64{}
	var keys []key
	for _, c := range cells {
		k := key{c.scheme, c.echo.Size, c.echo.Concurrency}
		if _, ok := ratios[k]; !ok {
			keys = append(keys, k)
		}
		ratios[k] = append(ratios[k], c.getPerEcho)
	}
	slices.SortStableFunc(keys, func(a, b key) int { return strings.Compare(a.scheme, b.scheme) })
	fmt.Fprintf(w, "\n## Over the rounds\n\n")
	for _, k := range keys {
		rs := ratios[k]
		fmt.Fprintf(w, "- %s:// at %s, %d %s: Get / echo median %.2f over %d %s (%.2f–%.2f).\n",
			k.scheme, sizeName(k.size), k.conc, plural(k.conc, "caller", "callers"), median(rs),
			len(rs), plural(len(rs), "round", "rounds"), slices.Min(rs), slices.Max(rs))
	}
	var tcpOverRDMA []float64
	for _, c := range cells {
		if c.scheme != "rdma" {
			continue
		}
		for _, d := range cells {
			if d.scheme == "tcp" && d.round == c.round && d.echo.Size == c.echo.Size && d.echo.Concurrency == c.echo.Concurrency {
				tcpOverRDMA = append(tcpOverRDMA, float64(d.echo.P50)/float64(c.echo.P50), float64(d.get.P50)/float64(c.get.P50))
			}
		}
	}
	if len(tcpOverRDMA) > 0 {
		fmt.Fprintf(w, "- tcp:// p50 over rdma:// p50, same round, echo and Get: median %.2f (%.2f–%.2f).\n",
			median(tcpOverRDMA), slices.Min(tcpOverRDMA), slices.Max(tcpOverRDMA))
	}
	return nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
