package load_balancing

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/features/internal/cli"
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
	rr := answers(t, out.String(), "--- calling Echo.Say with round_robin ---")
	seen := map[string]int{}
	for _, f := range rr {
		seen[f]++
	}
	if len(rr) != 10 || len(seen) != 2 {
		t.Fatalf("round_robin: %d answers from %v, want 10 from both servers", len(rr), seen)
	}
}
