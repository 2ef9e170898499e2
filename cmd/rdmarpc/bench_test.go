package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/internal/loadgen"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/tcp"
)

func TestBenchJSON(t *testing.T) {
	target := startProbe(t)
	pngPath := filepath.Join(t.TempDir(), "latency.png")
	out, stderr, err := runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "300", "-c", "4", "--connections", "2",
		"-d", `{"text": "load"}`, "-H", "x-bench: 1", "--json", "--png", pngPath, target, "probe.v1.Probe/Echo")...)
	if err != nil {
		t.Fatalf("bench: %v; stderr %s", err, stderr)
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	if s.Calls != 300 || len(s.Codes) != 1 || s.Codes["OK"] != 300 || s.Concurrency != 4 || s.Connections != 2 || s.Method != "/probe.v1.Probe/Echo" {
		t.Fatalf("summary %+v; want 300 OK calls from 4 workers on 2 connections", s)
	}
	l := s.Latency
	if !(0 < l.Min && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) || s.CallsPerSec <= 0 {
		t.Fatalf("latencies out of order: %+v, %v calls/s", l, s.CallsPerSec)
	}
	var inBars uint64
	for _, b := range s.Histogram {
		inBars += b.Count
	}
	if inBars != 300 {
		t.Fatalf("histogram holds %d calls, want 300", inBars)
	}
	fh, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := png.Decode(fh); err != nil {
		t.Fatalf("--png: %v", err)
	}
}

func TestBenchText(t *testing.T) {
	target := startProbe(t)
	out, stderr, err := runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "50", "-c", "2", target, "probe.v1.Probe/Echo")...)
	if err != nil {
		t.Fatalf("bench: %v; stderr %s", err, stderr)
	}
	for _, want := range []string{"Summary:\n", "  Calls:        50 in ", "  p99.9  ", "Histogram (µs):\n", "Status codes:\n  OK  50\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet bench wrote to it: %q", stderr)
	}
}

func TestBenchCSV(t *testing.T) {
	target := startProbe(t)
	out, _, err := runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "40", "--csv", "--rps", "100000", target, "probe.v1.Probe/Echo")...)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 2 || len(rows[0]) != len(loadgen.CSVHeader) || len(rows[1]) != len(rows[0]) {
		t.Fatalf("--csv: %v, %q", err, out)
	}
	col := map[string]string{}
	for i, h := range rows[0] {
		col[h] = rows[1][i]
	}
	if col["calls"] != "40" || col["errors"] != "0" || col["rate_limit"] != "100000" {
		t.Fatalf("--csv row %v", col)
	}
	if _, err := strconv.ParseFloat(col["p999_us"], 64); err != nil {
		t.Fatalf("p999_us %q: %v", col["p999_us"], err)
	}
}

func TestBenchFailures(t *testing.T) {
	target := startProbe(t)
	// Every call fails: the codes say how, and the run is an error.
	out, _, err := runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "20", "--json", "-d", `{"code": 8}`, target, "probe.v1.Probe/Fail")...)
	if err == nil || !strings.Contains(err.Error(), "no call succeeded") {
		t.Fatalf("bench of a failing method: %v", err)
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Codes["ResourceExhausted"] != 20 || len(s.Codes) != 1 {
		t.Fatalf("summary %+v (%v); want 20 ResourceExhausted", s, err)
	}
	// Per-call deadlines are counted as such.
	out, _, err = runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "4", "-c", "2", "--json", "--timeout", "10ms", target, "probe.v1.Probe/Block")...)
	if err == nil {
		t.Fatal("bench of a method that never answers succeeded")
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil || s.Codes["DeadlineExceeded"] != 4 {
		t.Fatalf("summary %+v (%v); want 4 DeadlineExceeded", s, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "5", "--duration", "1s"}, "not both"},
		{[]string{"-c", "0"}, "-c must be at least 1"},
		{[]string{"-c", "2", "--connections", "3"}, "--connections must be between 1 and -c"},
		{[]string{"--rps", "-1"}, "--rps must not be negative"},
		{[]string{"--json", "--csv"}, "--json or --csv"},
		{[]string{"-d", "{"}, "not JSON"},
		{[]string{"-d", "{} {}"}, "more than one JSON object"},
	} {
		_, _, err := runCmd(t, newBenchCmd(), "", args(probeFlags, tc.args, target, "probe.v1.Probe/Echo")...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bench %v: %v; want %q", tc.args, err, tc.want)
		}
	}
	if _, _, err := runCmd(t, newBenchCmd(), "", args(probeFlags, target, "probe.v1.Probe/Watch")...); err == nil || !strings.Contains(err.Error(), "server streaming method") {
		t.Errorf("bench of a streaming method: %v", err)
	}
}

// countingTransport is TCP that counts the messages its connections send,
// as transport/rdma counts what it does: bench must print what the counters
// grew by during the run, per call.
type countingTransport struct {
	transport.Transport
	sends atomic.Uint64
}

type countingConn struct {
	transport.Conn
	t *countingTransport
}

func (c *countingTransport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	tc, err := c.Transport.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{tc, c}, nil
}

func (c *countingTransport) Counters() map[string]uint64 {
	return map[string]uint64{"sends": c.sends.Load(), "unmoved": 7}
}

func (c countingConn) Send(ctx context.Context, msg []byte) error {
	c.t.sends.Add(1)
	return c.Conn.Send(ctx, msg)
}

func (c countingConn) SendBuffer(ctx context.Context, b transport.Buffer) error {
	c.t.sends.Add(1)
	return c.Conn.SendBuffer(ctx, b)
}

func TestBenchCounters(t *testing.T) {
	target := startProbe(t)
	ct := &countingTransport{Transport: tcp.New(tcp.Options{})}
	transport.Register("countingtcp", ct)
	ctarget := strings.Replace(target, "tcp://", "countingtcp://", 1)
	out, _, err := runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "100", "-c", "2", "--connections", "2", "--json", ctarget, "probe.v1.Probe/Echo")...)
	if err != nil {
		t.Fatal(err)
	}
	var s loadgen.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	// Each call sends its request at least (the connection may add control
	// frames); a counter that did not move is left out.
	if len(s.Counters) != 1 || s.Counters["sends"] < 1 {
		t.Fatalf("counters per call %v; want sends, at least 1 per call, alone", s.Counters)
	}
	out, _, err = runCmd(t, newBenchCmd(), "", args(probeFlags, "-n", "100", ctarget, "probe.v1.Probe/Echo")...)
	if err != nil || !strings.Contains(out, "Transport counters per call (this process's transport):\n  sends  ") {
		t.Fatalf("text: %v\n%s", err, out)
	}
}

func TestBenchInterrupted(t *testing.T) {
	target := startProbe(t)
	gen := probeServers.Load()
	// What late Block handlers of an earlier test's server leave (two did
	// in CI: this test then cancelled before its own calls began).
	for range 2 {
		select {
		case blockStarted <- gen - 1:
		default:
		}
	}
	ownStarted := func() {
		for g := range blockStarted {
			if g == gen {
				return
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newBenchCmd()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args(probeFlags, "-n", "1000", "-c", "2", "--timeout", "0", "--json", target, "probe.v1.Probe/Block"))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	// Both workers are in a call that only ends when canceled: Ctrl-C.
	ownStarted()
	ownStarted()
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "interrupted after 2 calls") {
		t.Fatalf("interrupted bench: %v\n%s", err, out.String())
	}
	var s loadgen.Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil || s.Calls != 2 || s.Codes["Canceled"] != 2 {
		t.Fatalf("summary of an interrupted bench: %+v (%v); want 2 Canceled calls", s, err)
	}
}

// TestProgressBar: the bar shows a count against a total (-n), or the time
// run against the duration with the calls so far (--duration), never a
// count against an unknown total ("82/-").
func TestProgressBar(t *testing.T) {
	for _, tc := range []struct {
		calls   int64
		d       time.Duration
		n       int64
		elapsed time.Duration
		want    string
	}{
		{calls: 5000, n: 82, elapsed: time.Second, want: "82/5000"},
		{d: 3 * time.Second, n: 82, elapsed: 1500 * time.Millisecond, want: "82 calls, 1.5s of 3s"},
	} {
		var out bytes.Buffer
		b := newBar(&out, tc.calls, tc.d)
		b.update(tc.n, tc.elapsed)
		if s := out.String(); !strings.Contains(s, tc.want) || strings.Contains(s, "/-") {
			t.Errorf("-n %d --duration %v: the bar shows %q, want %q in it", tc.calls, tc.d, s, tc.want)
		}
	}
}
