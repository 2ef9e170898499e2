package manual_test

import (
	"errors"
	"testing"

	"github.com/rdmarpc/rdmarpc/resolver"
	"github.com/rdmarpc/rdmarpc/resolver/manual"
)

type cc struct {
	states []resolver.State
	errs   []error
	reject error
}

func (c *cc) UpdateState(s resolver.State) error { c.states = append(c.states, s); return c.reject }
func (c *cc) ReportError(err error)              { c.errs = append(c.errs, err) }

func TestManual(t *testing.T) {
	r := manual.NewBuilderWithScheme("test-manual")
	resolver.Register(r)
	if err := r.UpdateState(resolver.State{}); !errors.Is(err, manual.ErrNotBuilt) {
		t.Fatalf("UpdateState before Build: %v", err)
	}
	r.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: "a:1"}}})
	tg, b, err := resolver.ParseTarget("test-manual:///svc")
	if err != nil || b != r {
		t.Fatalf("ParseTarget: %v, builder %v", err, b)
	}
	c := &cc{}
	res, err := b.Build(tg, c, resolver.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.states) != 1 || c.states[0].Addresses[0].Addr != "a:1" {
		t.Fatalf("initial state %v", c.states)
	}
	c.reject = errors.New("no")
	if err := r.UpdateState(resolver.State{Addresses: []resolver.Address{{Addr: "b:2"}}}); err != c.reject {
		t.Fatalf("UpdateState returned %v, want the ClientConn's answer", err)
	}
	r.ReportError(errors.New("down"))
	if r.CC() != resolver.ClientConn(c) {
		t.Fatalf("CC() = %v, want the ClientConn it was built for", r.CC())
	}
	res.ResolveNow(resolver.ResolveNowOptions{})
	res.ResolveNow(resolver.ResolveNowOptions{})
	if len(c.states) != 2 || len(c.errs) != 1 || r.ResolveNowCount() != 2 {
		t.Fatalf("states %v, errors %v, %d ResolveNow", c.states, c.errs, r.ResolveNowCount())
	}
	res.Close()
	if err := r.UpdateState(resolver.State{}); !errors.Is(err, manual.ErrNotBuilt) || len(c.states) != 2 {
		t.Fatalf("UpdateState after Close: %v, %d states", err, len(c.states))
	}
	defer func() {
		if recover() == nil {
			t.Fatal("CC() after Close did not panic")
		}
	}()
	r.CC()
}
