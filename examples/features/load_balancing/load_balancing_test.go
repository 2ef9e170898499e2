package load_balancing

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
	"github.com/rdmarpc/rdmarpc/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// answers are the servers named in the lines of out after header, up to
// the next header.
func answers(t *testing.T, out, header string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(out, header+"\n")
	if !ok {
		t.Fatalf("no %q in output:\n%s", header, out)
	}
	rest, _, _ = strings.Cut(rest, "---")
	var from []string
	for _, l := range strings.Split(strings.TrimSpace(rest), "\n") {
		_, f, ok := strings.Cut(l, "(from ")
		if !ok {
			t.Fatalf("line %q names no server", l)
		}
		from = append(from, strings.TrimSuffix(f, ")"))
	}
	return from
}

func TestLoadBalancing(t *testing.T) {
	addrs := cli.StartServer(t, Server, 2, "--addr", "tcp://127.0.0.1:0,tcp://127.0.0.1:0")
	var out bytes.Buffer
	if err := Client(context.Background(), []string{"--addr", strings.Join(addrs, ","), "--n", "10"}, &out); err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	pf := answers(t, out.String(), "--- calling Echo.Say with pick_first ---")
	if len(pf) != 10 {
		t.Fatalf("pick_first: %d answers, want 10", len(pf))
	}
	for _, f := range pf {
		if f != pf[0] {
			t.Fatalf("pick_first: answers from %s and %s, want one server", pf[0], f)
		}
	}
	// The example's round_robin calls may all come before the second
	// connection is up (round_robin picks among the ready ones, as
	// gRPC-go's does), so its output shows only that both policies ran;
	// TestRoundRobinAlternates checks the turns.
	rr := answers(t, out.String(), "--- calling Echo.Say with round_robin ---")
	if len(rr) != 10 {
		t.Fatalf("round_robin: %d answers, want 10", len(rr))
	}
	for _, f := range rr {
		if "tcp://"+f != addrs[0] && "tcp://"+f != addrs[1] {
			t.Fatalf("round_robin: an answer from %s, not one of %v", f, addrs)
		}
	}
}

// TestRoundRobinAlternates: once round_robin has both backends ready, the
// calls take turns between them.
func TestRoundRobinAlternates(t *testing.T) {
	addrs := cli.StartServer(t, Server, 2, "--addr", "tcp://127.0.0.1:0,tcp://127.0.0.1:0")
	target, err := cli.StaticTarget(addrs)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := rpc.NewClient(target, rpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := echopb.NewEchoClient(cc)
	from := func() string {
		r, err := c.Say(context.Background(), &echopb.SayRequest{Message: "hi"})
		if err != nil {
			t.Fatal(err)
		}
		_, f, _ := strings.Cut(r.Message, "(from ")
		return strings.TrimSuffix(f, ")")
	}
	// Call until the second backend answers: its connection is up then.
	// Each call returns at once, so this waits only for that connection.
	first, start := from(), time.Now()
	last := from()
	for last == first {
		if time.Since(start) > time.Minute {
			t.Fatalf("round_robin: only %s answered for a minute", first)
		}
		last = from()
	}
	for i := range 10 {
		f := from()
		if f == last {
			t.Fatalf("call %d after both answered: %s twice in a row, want turns", i, f)
		}
		last = f
	}
}
