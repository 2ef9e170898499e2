package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/credit"
)

func TestBudget(t *testing.T) {
	var b budget
	b.limit = 100
	if err := b.take(60); err != nil {
		t.Fatal(err)
	}
	err := b.take(41)
	if !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), "41 bytes more wanted, 60 of 100 in use") {
		t.Fatalf("take beyond the limit = %v", err)
	}
	b.give(60)
	if err := b.take(100); err != nil || b.inUse() != 100 {
		t.Fatalf("after giving back: %v, %d in use", err, b.inUse())
	}
	unlimited := budget{}
	if err := unlimited.take(1 << 50); err != nil {
		t.Fatal(err)
	}
}

// TestBudgetRefusalLogged: the first handshake refused for the budget
// logs, once, the budget, where it came from, what a connection costs, how
// many fit and what to raise; later ones only return their error (a flood
// of refused handshakes is one line), and other errors log nothing.
func TestBudgetRefusalLogged(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	b := budget{limit: 8 << 20, source: "RLIMIT_MEMLOCK (8 MiB), without CAP_IPC_LOCK", log: zap.New(core),
		cost: layoutCost{layout: ReceivePerConnection, perConn: 1 << 20, fixed: 1 << 20}}
	b.refusedHandshake(errors.New("not the budget"))
	if err := b.take(7 << 20); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		err := b.take(2 << 20)
		if !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
			t.Fatalf("take beyond the limit = %v", err)
		}
		b.refusedHandshake(fmt.Errorf("handshake: %w", err))
	}
	if logs.Len() != 1 {
		t.Fatalf("%d lines logged for 3 refusals and another error, want 1", logs.Len())
	}
	f := logs.All()[0].ContextMap()
	for k, want := range map[string]string{"budget": "8 MiB", "from": "RLIMIT_MEMLOCK", "in_use": "7 MiB",
		"per_connection": "1 MiB", "fixed": "1 MiB", "layout": "ReceivePerConnection",
		"advice": "LimitMEMLOCK", "error": "2097152 bytes more wanted"} {
		if v := fmt.Sprint(f[k]); !strings.Contains(v, want) {
			t.Errorf("log field %s = %q, want it to say %q", k, v, want)
		}
	}
	if n, _ := f["connections_fit"].(int64); n != 7 {
		t.Errorf("connections_fit = %v, want 7", f["connections_fit"])
	}
	for _, want := range []string{"ulimit -l", "LimitMEMLOCK=", "IPC_LOCK", "memlock", "ReceiveShared"} {
		if !strings.Contains(f["advice"].(string), want) {
			t.Errorf("advice %q does not say %q", f["advice"], want)
		}
	}
}

// TestChooseReceive: a zero Options.Receive is the per-connection layout
// when the budget holds perConnectionMin connections of it, the shared
// receive queue below (an 8 MiB RLIMIT_MEMLOCK), and what Options say
// otherwise; the costs the choice and the log use are the layouts'
// registrations.
func TestChooseReceive(t *testing.T) {
	const mib = 1 << 20
	perConn := costOf(Options{Receive: ReceivePerConnection}.withSizes())
	if perConn.perConn != 18*64<<10 || perConn.fixed != 16*64<<10 {
		t.Fatalf("per-connection layout costs %+v, want 18 receive buffers of 64 KiB a connection and a 16-slot arena chunk", perConn)
	}
	shared := costOf(Options{Receive: ReceiveShared}.withSizes())
	if shared.perConn != 3*16<<10+8<<10 || shared.fixed != (16+lendFloor)*16<<10 {
		t.Fatalf("shared layout costs %+v", shared)
	}
	if n := shared.fit(8 * mib); n < 100 {
		t.Fatalf("8 MiB holds %d connections of the shared layout by its estimate, want at least 100", n)
	}
	atMin := perConnectionMin*perConn.perConn + perConn.fixed
	for _, tc := range []struct {
		name string
		o    Options
		want ReceiveLayout
	}{
		{"no budget", Options{MemoryBudget: -1}, ReceivePerConnection},
		{"8 MiB memlock", Options{MemoryBudget: 8 * mib}, ReceiveShared},
		{"64 MiB memlock", Options{MemoryBudget: 64 * mib}, ReceiveShared},
		{"just below the minimum", Options{MemoryBudget: atMin - 1}, ReceiveShared},
		{"at the minimum", Options{MemoryBudget: atMin}, ReceivePerConnection},
		{"a quarter of 16 GiB", Options{MemoryBudget: 4 << 30}, ReceivePerConnection},
		{"explicit per-connection wins", Options{MemoryBudget: 8 * mib, Receive: ReceivePerConnection}, ReceivePerConnection},
		{"explicit shared wins", Options{MemoryBudget: -1, Receive: ReceiveShared}, ReceiveShared},
		{"small buffers fit", Options{MemoryBudget: 8 * mib, BufferSize: 4096, RecvBuffers: 2}, ReceivePerConnection},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o.withDefaults()
			if o.Receive != tc.want {
				t.Fatalf("Receive = %v, want %v", o.Receive.name(), tc.want.name())
			}
			if o.Receive == ReceiveShared && tc.o.Completions == 0 && defaultCompletions == 0 && o.Completions != CompletionsShared {
				t.Errorf("a chosen shared receive queue comes with %v completions, want shared", o.Completions)
			}
			if tc.o.MemoryBudget > 0 && New(tc.o).budget.cost.layout != tc.want {
				t.Errorf("the transport's cost is not its layout's")
			}
		})
	}
}

// TestMemoryBudgetRefuses opens many connections to a server whose budget
// holds a few, and from a client whose budget holds a few: the handshakes
// beyond are refused with the budget's error on the side that ran out (and
// the peer's refusal on the other), and once all are closed nothing is
// left registered, on the device or in the budgets.
func TestMemoryBudgetRefuses(t *testing.T) {
	ip := guestIP(t)
	before := resources(t)
	const fits, tries = 8, 64
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for _, tc := range []struct {
		layout  string
		private bool
	}{{"arena", false}, {"private", true}} {
		o := Options{Receive: ReceivePerConnection, BufferSize: 4096, RecvBuffers: 4, SendSlots: 4, PrivateSendSlots: tc.private}
		perConn, once := registeredCost(o)
		small, big := o, o
		small.MemoryBudget, big.MemoryBudget = fits*perConn+once, -1
		for _, side := range []string{"listening", "dialing"} {
			t.Run(tc.layout+"/"+side, func(t *testing.T) {
				srvTr, cliTr := New(small), New(big)
				if side == "dialing" {
					srvTr, cliTr = New(big), New(small)
				}
				lis, err := srvTr.Listen(net.JoinHostPort(ip, "0"))
				if err != nil {
					t.Fatal(err)
				}
				acc := acceptAll(ctx, lis, nil)
				var dialed []transport.Conn
				refused := 0
				for range tries {
					c, err := cliTr.Dial(ctx, lis.Addr().String())
					if err == nil {
						dialed = append(dialed, c)
						continue
					}
					refused++
					want := ErrRefused // the server ran out and said so
					if side == "dialing" {
						want = ErrMemoryBudget
					}
					if !errors.Is(err, want) || !strings.Contains(err.Error(), "registered-memory budget exhausted") {
						t.Fatalf("dial beyond the budget: %v, want %v naming the budget", err, want)
					}
				}
				if len(dialed) != fits || refused != tries-fits {
					t.Errorf("%d connections made, %d refused; the budget holds %d", len(dialed), refused, fits)
				}
				for _, c := range dialed {
					c.Close()
				}
				lis.Close()
				acc.closeAll()
				for _, tr := range []*Transport{srvTr, cliTr} {
					if n := tr.Gauges()["registered_bytes"]; n != 0 {
						t.Errorf("%d bytes still counted as registered after every connection closed", n)
					}
				}
			})
		}
	}
	after := resources(t)
	for _, k := range []string{"pd", "cq", "qp", "mr"} {
		if after[k] != before[k] {
			t.Errorf("%s count %d after the connections, %d before: a leak", k, after[k], before[k])
		}
	}
}

// registeredCost is the registered memory each connection takes with o (a
// peer of the same BufferSize), and what the transport takes once for all
// of them: the shared send arena's first chunk.
func registeredCost(o Options) (perConn, once int64) {
	perConn = int64((o.RecvBuffers + credit.Extra) * o.BufferSize)
	send := int64(o.SendSlots * o.BufferSize)
	if o.PrivateSendSlots {
		return perConn + send, 0
	}
	return perConn, send
}
