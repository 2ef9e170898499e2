package conn

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// TestKeepaliveSchedule steps keepalive's reckoning on a made-up clock:
// a peer silent after its last frame is pinged Time after that frame, and
// given up Timeout after the ping, so it is noticed within Time + Timeout.
// (Issue 8 item 8: up to 2×Time + Timeout, because the timer restarted from
// the wake that noticed activity, not from the activity.)
func TestKeepaliveSchedule(t *testing.T) {
	ka := keepalive{Time: 30 * time.Second, Timeout: 20 * time.Second}
	t0 := time.Unix(1000, 0)
	s := KeepaliveState{lastWake: t0, lastActive: t0}
	// A frame arrives 1 s after the start; the first wake, at Time,
	// sees it and sleeps until lastFrame + Time.
	last := t0.Add(time.Second)
	next, act := s.Wake(t0.Add(ka.Time), 1, last, ka.Time, ka.Timeout)
	if act != KeepaliveWait || next != time.Second {
		t.Fatalf("wake at Time: %v for %v, want to wait 1s", act, next)
	}
	now := t0.Add(ka.Time + next)
	next, act = s.Wake(now, 1, last, ka.Time, ka.Timeout)
	if act != KeepalivePing || !now.Equal(last.Add(ka.Time)) || next != ka.Timeout {
		t.Fatalf("at last frame + Time: %v, next %v; want a ping and a wake Timeout later", act, next)
	}
	now = now.Add(next)
	if _, act = s.Wake(now, 1, last, ka.Time, ka.Timeout); act != KeepaliveClose {
		t.Fatalf("Timeout after an unanswered ping: %v, want close", act)
	}
	if d := now.Sub(last); d != ka.Time+ka.Timeout {
		t.Fatalf("noticed %v after the last frame, want Time + Timeout = %v", d, ka.Time+ka.Timeout)
	}
}

// TestKeepalivePingsEveryTime: with Timeout longer than Time, an answered
// ping is followed by the next one Time after the answer, as gRPC-go's
// client pings (it used to wait the whole Timeout first); an unanswered
// one is still given Timeout.
func TestKeepalivePingsEveryTime(t *testing.T) {
	ka := keepalive{Time: 10 * time.Second, Timeout: 20 * time.Second}
	t0 := time.Unix(1000, 0)
	s := KeepaliveState{lastWake: t0, lastActive: t0}
	now, count, last := t0, uint64(0), t0
	var pings []time.Duration
	for len(pings) < 4 {
		next, act := s.Wake(now, count, last, ka.Time, ka.Timeout)
		switch act {
		case KeepaliveClose:
			t.Fatalf("closed at %v although every ping was answered", now.Sub(t0))
		case KeepalivePing:
			pings = append(pings, now.Sub(t0))
			// The answer comes a second later.
			count++
			last = now.Add(time.Second)
		}
		if next <= 0 || next > ka.Time {
			t.Fatalf("at %v: sleep %v, want in (0, Time]", now.Sub(t0), next)
		}
		now = now.Add(next)
	}
	for i := 1; i < len(pings); i++ {
		if gap := pings[i] - pings[i-1]; gap != ka.Time+time.Second {
			t.Fatalf("pings at %v: %v between pings, want Time after the answer (11s)", pings, gap)
		}
	}
	// Now nothing answers: closed Timeout after the ping, not sooner.
	var ping time.Time
	for {
		next, act := s.Wake(now, count, last, ka.Time, ka.Timeout)
		if act == KeepalivePing {
			ping = now
		}
		if act == KeepaliveClose {
			if ping.IsZero() || now.Sub(ping) != ka.Timeout {
				t.Fatalf("closed %v after the unanswered ping, want Timeout (%v)", now.Sub(ping), ka.Timeout)
			}
			return
		}
		now = now.Add(next)
	}
}

// TestKeepaliveTrickle: bytes that keep arriving with no whole frame (one
// large message, slowly) are signs of life: however long it lasts, the
// connection is pinged but never given up. And once they stop, it is
// given up within Time + Timeout of the last byte. (Issue 8 item 8: a 300 KB
// upload at 60 KB/s was cut off.)
func TestKeepaliveTrickle(t *testing.T) {
	ka := keepalive{Time: time.Second, Timeout: time.Second}
	t0 := time.Unix(1000, 0)
	s := KeepaliveState{lastWake: t0, lastActive: t0}
	now, count := t0, uint64(0)
	lastByte := t0
	for range 1000 {
		next, act := s.Wake(now, count, t0, ka.Time, ka.Timeout)
		if act == KeepaliveClose {
			t.Fatalf("closed at %v although bytes kept arriving", now.Sub(t0))
		}
		// A byte arrives halfway to the next wake.
		lastByte = now.Add(next / 2)
		count++
		now = now.Add(next)
	}
	// The bytes stop: the wakes go on until it closes.
	for i := 0; ; i++ {
		next, act := s.Wake(now, count, t0, ka.Time, ka.Timeout)
		if act == KeepaliveClose {
			if d := now.Sub(lastByte); d > ka.Time+ka.Timeout {
				t.Fatalf("closed %v after the last byte, want within Time + Timeout = %v", d, ka.Time+ka.Timeout)
			}
			return
		}
		if i > 10 {
			t.Fatal("a silent connection is never closed")
		}
		now = now.Add(next)
	}
}

// TestByteBudget: acquires beyond the bound wait for releases and honour
// their context; one acquire larger than the bound passes alone.
func TestByteBudget(t *testing.T) {
	b := NewByteBudget(100)
	ctx := context.Background()
	if err := b.Acquire(ctx, 60); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 60) }()
	for !b.Waiting() {
		runtime.Gosched()
	}
	b.Release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Acquire(short, 60); err != context.Canceled {
		t.Fatalf("acquire beyond the bound with a done context: %v", err)
	}
	b.Release(60)
	if err := b.Acquire(ctx, 1000); err != nil {
		t.Fatalf("one acquire larger than the bound, alone: %v", err)
	}
	if b.used.Load() != 1000 {
		t.Fatalf("used %d", b.used.Load())
	}
}

// keepalive is the pair of settings Wake takes, as rpc.Keepalive holds them.
type keepalive struct{ Time, Timeout time.Duration }
