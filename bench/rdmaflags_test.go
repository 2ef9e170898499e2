package bench_test

import (
	"flag"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/transport/rdma"
)

func TestRDMAFlags(t *testing.T) {
	var f bench.RDMAFlags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse([]string{"--rdma-poll-spin", "-1ns", "--rdma-receive", "shared", "--rdma-completions", "own"}); err != nil {
		t.Fatal(err)
	}
	o, err := f.Options()
	if err != nil || o.PollSpin != -1 || o.Receive != rdma.ReceiveShared || o.Completions != rdma.CompletionsPerConnection {
		t.Errorf("Options() = %+v, %v", o, err)
	}
	if got, want := f.String(), "poll-spin=off receive=shared completions=own"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	back, err := bench.DecodeRDMAFlags(f.Encode())
	if err != nil || back != f {
		t.Errorf("DecodeRDMAFlags(%q) = %+v, %v; want %+v", f.Encode(), back, err, f)
	}
	if d, err := bench.DecodeRDMAFlags(""); err != nil || !d.IsDefault() || d.String() != "poll-spin=default receive=default completions=default" {
		t.Errorf(`DecodeRDMAFlags("") = %+v (%s), %v`, d, d, err)
	}
	if s := (bench.RDMAFlags{PollSpin: 2 * time.Millisecond}).String(); s != "poll-spin=2ms receive=default completions=default" {
		t.Errorf("String() = %q", s)
	}
	for _, bad := range []string{"x", "1ms,own", "1ms,mine,", "soon,,", "1ms,,both"} {
		if _, err := bench.DecodeRDMAFlags(bad); err == nil {
			t.Errorf("DecodeRDMAFlags(%q) accepted", bad)
		}
	}
	if _, err := (bench.RDMAFlags{Completions: "both"}).Options(); err == nil {
		t.Error("Options() accepted completions=both")
	}
}
