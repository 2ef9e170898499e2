package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/perftest"
)

// rawVerbs gives perftest's figures for a size, from runs of ib_send_lat and
// ib_send_bw on this host or from their saved output.
type rawVerbs struct {
	run  *perftest.Options // run perftest with these, or
	lat  map[int]perftest.LatRow
	bw   map[int]perftest.BWRow
	path string // where the saved output came from, for errors
	log  io.Writer
}

// warn reports a perftest run that gave its figures and failed afterwards:
// the figures are used, the failure is shown.
func (rv *rawVerbs) warn(err error) {
	fmt.Fprintf(rv.log, "  warning: using the figures perftest printed before failing: %v\n", err)
}

func newRawVerbs(o options, target string, log io.Writer) (*rawVerbs, error) {
	switch {
	case o.ibDev != "":
		ip := o.ibIP
		if ip == "" {
			h, err := bench.Host(target)
			if err != nil {
				return nil, err
			}
			ip = h
		}
		return &rawVerbs{run: &perftest.Options{Device: o.ibDev, GIDIndex: o.ibGID, ServerIP: ip, Port: o.ibPort, Iterations: o.ibIters}, log: log}, nil
	case o.ibLat != "" || o.ibBW != "":
		if o.ibLat == "" || o.ibBW == "" {
			return nil, errors.New("give both --ib-lat and --ib-bw")
		}
		rv := &rawVerbs{lat: map[int]perftest.LatRow{}, bw: map[int]perftest.BWRow{}, path: o.ibLat + " and " + o.ibBW}
		for _, p := range bench.SplitList(o.ibLat) {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			rows, err := perftest.ParseLat(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			for _, r := range rows {
				rv.lat[r.Bytes] = r
			}
		}
		for _, p := range bench.SplitList(o.ibBW) {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			rows, err := perftest.ParseBW(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			for _, r := range rows {
				rv.bw[r.Bytes] = r
			}
		}
		return rv, nil
	}
	return nil, nil
}

// result is perftest's row for size, as a Result of impl "ib_send":
// latencies are round trips, throughput is ib_send_bw's.
func (rv *rawVerbs) result(ctx context.Context, size int) (bench.Result, error) {
	var (
		lat perftest.LatRow
		bw  perftest.BWRow
		err error
		ok  bool
	)
	if rv.run != nil {
		if lat, err = perftest.RunLat(ctx, size, *rv.run); err != nil && !errors.Is(err, perftest.ErrAfterResult) {
			return bench.Result{}, err
		} else if err != nil {
			rv.warn(err)
		}
		if bw, err = perftest.RunBW(ctx, size, *rv.run); err != nil && !errors.Is(err, perftest.ErrAfterResult) {
			return bench.Result{}, err
		} else if err != nil {
			rv.warn(err)
		}
	} else {
		if lat, ok = rv.lat[size]; !ok {
			return bench.Result{}, fmt.Errorf("no ib_send_lat row for %d bytes in %s", size, rv.path)
		}
		if bw, ok = rv.bw[size]; !ok {
			return bench.Result{}, fmt.Errorf("no ib_send_bw row for %d bytes in %s", size, rv.path)
		}
	}
	return bench.Result{
		Impl: "ib_send", Transport: "verbs", Size: size, Calls: int64(lat.Iterations),
		P50: perftest.RoundTrip(lat.Typical), P99: perftest.RoundTrip(lat.P99), P999: perftest.RoundTrip(lat.P999),
		CallsPerSecOverride: bw.MsgRateMpps * 1e6, MBPerSecOverride: bw.AvgMBps(),
	}, nil
}
