package rdma

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
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

// TestBudgetRefusalLogged: the first refusal logs, once, the budget, where
// it came from, what was wanted and what to raise; later ones only return
// their error (a flood of refused handshakes is one line).
func TestBudgetRefusalLogged(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	b := budget{limit: 8 << 20, source: "RLIMIT_MEMLOCK (8 MiB), without CAP_IPC_LOCK", log: zap.New(core)}
	if err := b.take(7 << 20); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := b.take(2 << 20); !errors.Is(err, ErrMemoryBudget) || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
			t.Fatalf("take beyond the limit = %v", err)
		}
	}
	if logs.Len() != 1 {
		t.Fatalf("%d lines logged for 3 refusals, want 1", logs.Len())
	}
	f := logs.All()[0].ContextMap()
	for k, want := range map[string]string{"budget": "8 MiB", "from": "RLIMIT_MEMLOCK", "wanted": "2 MiB", "in_use": "7 MiB", "advice": "LimitMEMLOCK"} {
		if v, _ := f[k].(string); !strings.Contains(v, want) {
			t.Errorf("log field %s = %q, want it to say %q", k, v, want)
		}
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
				var (
					mu       sync.Mutex
					accepted []transport.Conn
					wg       sync.WaitGroup
				)
				wg.Go(func() {
					for {
						c, err := lis.Accept(ctx)
						if err != nil {
							return
						}
						mu.Lock()
						accepted = append(accepted, c)
						mu.Unlock()
					}
				})
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
				wg.Wait()
				for _, c := range accepted {
					c.Close()
				}
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
