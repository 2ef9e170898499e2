package loadgen

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBuckets(t *testing.T) {
	prev := -1
	for _, v := range []time.Duration{0, 1, 127, 128, 129, 255, 256, 257, 1000, 4095, 4096, 1e6, 1e6 + 1, 123456789, 1 << 40, 1<<62 + 12345, 1<<63 - 1} {
		i := bucketOf(v)
		lo, hi := bucketBounds(i)
		if v < lo || v > hi {
			t.Errorf("%d: bucket %d holds [%d, %d]", v, i, lo, hi)
		}
		if float64(hi-lo) > float64(lo)/float64(subCount)+1 {
			t.Errorf("%d: bucket [%d, %d] wider than 1/%d of its values", v, lo, hi, subCount)
		}
		if i < prev {
			t.Errorf("%d: bucket %d before the previous value's %d", v, i, prev)
		}
		prev = i
		if i >= (64-subBits+1)<<subBits {
			t.Errorf("%d: bucket %d out of range", v, i)
		}
	}
	// Adjacent buckets tile the line.
	for i := subCount - 2; i < 40*subCount; i++ {
		_, hi := bucketBounds(i)
		lo, _ := bucketBounds(i + 1)
		if lo != hi+1 {
			t.Fatalf("bucket %d ends at %d, bucket %d starts at %d", i, hi, i+1, lo)
		}
	}
}

func TestHistogram(t *testing.T) {
	var a, b Histogram
	// 1 µs … 10 000 µs, once each, split over two histograms.
	for i := 1; i <= 10000; i++ {
		h := &a
		if i%2 == 0 {
			h = &b
		}
		h.Record(time.Duration(i) * time.Microsecond)
	}
	a.Merge(&b)
	if a.Count() != 10000 || a.Min() != time.Microsecond || a.Max() != 10*time.Millisecond {
		t.Fatalf("count %d min %v max %v", a.Count(), a.Min(), a.Max())
	}
	if m := a.Mean(); m != 5000500*time.Nanosecond {
		t.Errorf("mean %v", m)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5 * time.Millisecond}, {0.9, 9 * time.Millisecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}, {1, 10 * time.Millisecond}, {0, time.Microsecond}} {
		got := a.Quantile(tc.q)
		if diff := float64(got-tc.want) / float64(tc.want); diff > 0.01 || diff < -0.01 {
			t.Errorf("quantile %v: %v, want %v within 1%%", tc.q, got, tc.want)
		}
	}
	var sum uint64
	bars := a.Bars(10)
	for i, bar := range bars {
		sum += bar.Count
		if i > 0 && bar.Lo != bars[i-1].Hi {
			t.Errorf("bar %d starts at %v, the previous ends at %v", i, bar.Lo, bars[i-1].Hi)
		}
	}
	if sum != 10000 || bars[0].Lo != a.Min() || bars[9].Hi != a.Max()+1 {
		t.Errorf("bars %+v: sum %d", bars, sum)
	}
	var empty Histogram
	if empty.Quantile(0.5) != 0 || empty.Bars(5) != nil || empty.Mean() != 0 {
		t.Error("an empty histogram has figures")
	}
}

// fakeClock is a clock whose SleepUntil moves time on at once, to the
// wake-up time if that is later than the clock; it records how far each
// sleep was from the clock's time then.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, max(t.Sub(c.now), 0))
	if t.After(c.now) {
		c.now = t
	}
	return ctx.Err()
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestPacer(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1000, 0)}
	p := NewPacer(100, clock)
	ctx := context.Background()
	for range 10 {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := clock.Now().Sub(time.Unix(1000, 0)); got != 90*time.Millisecond {
		t.Fatalf("10 calls at 100/s took %v of the clock; want 90ms", got)
	}
	for i, d := range clock.sleeps {
		want := 10 * time.Millisecond
		if i == 0 {
			want = 0
		}
		if d != want {
			t.Fatalf("sleep %d: %v, want %v (sleeps %v)", i, d, want, clock.sleeps)
		}
	}
	// After a stall, calls go on at the rate, without a burst to catch up.
	clock.advance(time.Second)
	clock.sleeps = nil
	for range 3 {
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if want := []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond}; !equal(clock.sleeps, want) {
		t.Fatalf("after a stall: sleeps %v, want %v", clock.sleeps, want)
	}
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var errOdd = errors.New("odd")

func TestRunCalls(t *testing.T) {
	var made, done atomic.Int64
	workers := make([]atomic.Int64, 4)
	r, err := Run(context.Background(), Config{Concurrency: 4, Calls: 1000}, func(_ context.Context, w int) error {
		workers[w].Add(1)
		if made.Add(1)%10 == 0 {
			return errOdd
		}
		return nil
	}, func(err error) string { return err.Error() }, &done)
	if err != nil {
		t.Fatal(err)
	}
	if made.Load() != 1000 || r.Calls() != 1000 || done.Load() != 1000 {
		t.Fatalf("made %d calls, counted %d, done %d; want 1000", made.Load(), r.Calls(), done.Load())
	}
	if len(r.Errors) != 1 || r.Errors["odd"] != 100 {
		t.Fatalf("errors %v; want odd: 100", r.Errors)
	}
	var sum int64
	for i := range workers {
		sum += workers[i].Load()
	}
	if sum != 1000 {
		t.Fatalf("workers made %d calls", sum)
	}
}

func TestRunRate(t *testing.T) {
	start := time.Unix(1000, 0)
	clock := &fakeClock{now: start}
	r, err := Run(context.Background(), Config{Concurrency: 3, Calls: 50, Rate: 10, Clock: clock},
		func(context.Context, int) error { return nil }, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The 50th call's slot is 49 intervals of 100ms after the first.
	if got := clock.Now().Sub(start); r.Calls() != 50 || got != 4900*time.Millisecond {
		t.Fatalf("%d calls at 10/s took %v of the clock; want 50 in 4.9s", r.Calls(), got)
	}
}

func TestRunDuration(t *testing.T) {
	var done atomic.Int64
	r, err := Run(context.Background(), Config{Concurrency: 2, Duration: time.Millisecond},
		func(ctx context.Context, _ int) error { return ctx.Err() }, func(err error) string { return err.Error() }, &done)
	if err != nil {
		t.Fatal(err)
	}
	// Calls in flight when the duration ends are not canceled.
	if len(r.Errors) != 0 || uint64(done.Load()) != r.Calls() {
		t.Fatalf("errors %v, %d done of %d", r.Errors, done.Load(), r.Calls())
	}
}

func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	r, err := Run(ctx, Config{Concurrency: 2, Calls: 1 << 40}, func(context.Context, int) error {
		if n.Add(1) == 100 {
			cancel()
		}
		return nil
	}, nil, nil)
	if !errors.Is(err, context.Canceled) || r == nil || r.Calls() < 100 {
		t.Fatalf("canceled run: %v, %+v", err, r)
	}
}

func TestRunConfig(t *testing.T) {
	call := func(context.Context, int) error { return nil }
	for _, cfg := range []Config{
		{Concurrency: 0, Calls: 1},
		{Concurrency: 1},
		{Concurrency: 1, Calls: 1, Duration: time.Second},
		{Concurrency: 1, Calls: 1, Rate: -1},
	} {
		if _, err := Run(context.Background(), cfg, call, nil, nil); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// lateCtx is a context whose end reaches the contexts made from it only
// when tell is called: context.WithCancel over a context with an AfterFunc
// method registers there, and the method may run its functions later (the
// RPC server's handler contexts run them on goroutines of their own). A
// standard context has the same gap, only shorter: its cancel stores the
// error (Err reports it from then on) and closes Done before it cancels the
// contexts made from it, one by one, and the cancelling goroutine can be
// descheduled in between.
type lateCtx struct {
	mu     sync.Mutex
	done   chan struct{}
	err    error
	afters []*func()
}

func newLateCtx() *lateCtx { return &lateCtx{done: make(chan struct{})} }

func (c *lateCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *lateCtx) Done() <-chan struct{}       { return c.done }
func (c *lateCtx) Value(any) any               { return nil }

func (c *lateCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *lateCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &f
	c.afters = append(c.afters, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, b := range c.afters {
			if b == a {
				c.afters = append(c.afters[:i], c.afters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// cancel ends c; the contexts made from it are not told yet.
func (c *lateCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = context.Canceled
	close(c.done)
}

// tell tells the contexts made from c that it ended.
func (c *lateCtx) tell() {
	c.mu.Lock()
	afters := c.afters
	c.afters = nil
	c.mu.Unlock()
	for _, f := range afters {
		(*f)()
	}
}

// TestRunEndsWithCtx: once ctx has ended no call starts, even before the
// contexts made from ctx have heard of it. Two workers wait in calls that
// end with ctx; ctx ends: the run made those 2 calls. Run used to look only
// at a context of its own made from ctx, and its workers went on starting
// calls that failed at once until the count ran out (1000 calls, where
// rdmarpc bench's TestBenchInterrupted, on a standard context under load,
// saw 231, 590 and 1000 calls of about 2 µs each, all Canceled).
func TestRunEndsWithCtx(t *testing.T) {
	ctx := newLateCtx()
	defer ctx.tell()
	inCall := make(chan struct{}, 2)
	go func() {
		<-inCall
		<-inCall
		ctx.cancel()
	}()
	var made atomic.Int64
	r, err := Run(ctx, Config{Concurrency: 2, Calls: 1000}, func(ctx context.Context, _ int) error {
		if made.Add(1) <= 2 {
			inCall <- struct{}{}
		}
		<-ctx.Done()
		return ctx.Err()
	}, func(err error) string { return err.Error() }, nil)
	if !errors.Is(err, context.Canceled) || r == nil {
		t.Fatalf("run over a context that ended: %v, %+v", err, r)
	}
	if made.Load() != 2 || r.Calls() != 2 || r.Errors[context.Canceled.Error()] != 2 {
		t.Fatalf("made %d calls, counted %d (errors %v); want the 2 in flight when ctx ended", made.Load(), r.Calls(), r.Errors)
	}
}
