package rpc

import (
	"context"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport/pipe"
)

// emptyService is one method, /t.S/M, that answers an empty message.
var emptyService = ServiceDesc{
	ServiceName: "t.S",
	Methods: []MethodDesc{{
		MethodName: "M",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ UnaryServerInterceptor) (any, error) {
			var in emptypb.Empty
			if err := dec(&in); err != nil {
				return nil, err
			}
			return &emptypb.Empty{}, nil
		},
	}},
}

func serveEmpty(t *testing.T, tr *pipe.Transport, name string) {
	t.Helper()
	lis, err := tr.Listen(name)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer()
	srv.RegisterService(&emptyService, struct{}{})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
}

// hookCtx runs hook the first time its deadline is asked for, and then
// says the deadline has passed (while Err still says nothing: its timer
// has not fired yet).
type hookCtx struct {
	context.Context
	once sync.Once
	hook func()
}

func (c *hookCtx) Deadline() (time.Time, bool) {
	c.once.Do(c.hook)
	return time.Now().Add(-time.Millisecond), true
}

// TestExpiredCallRacingFailAll: the link fails every pending call (failAll
// owns them) between a call's registration and its deadline check, which
// finds the deadline passed. The call must drain what failAll sent before
// pooling its pendingCall; the next call on the ClientConn then gets its
// own outcome, not that stale error. (Issue 8 item 10.)
func TestExpiredCallRacingFailAll(t *testing.T) {
	tr := pipe.New(pipe.Options{})
	serveEmpty(t, tr, "pool")
	ctx := context.Background()
	cc, err := Dial(ctx, "pipe://pool", WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.mu.Lock()
	l := cc.subs[0].cur
	cc.mu.Unlock()
	hc := &hookCtx{Context: ctx, hook: func() { l.failAll(status.New(codes.Unavailable, "stale: from failAll")) }}
	err = cc.Invoke(hc, "/t.S/M", &emptypb.Empty{}, &emptypb.Empty{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("call past its deadline: %v, want DeadlineExceeded", err)
	}
	for i := range 10 {
		if err := cc.Invoke(ctx, "/t.S/M", &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
			t.Fatalf("call %d after the race: %v", i, err)
		}
	}
}

// TestControlQueueBounded: while the control goroutine is stuck sending to
// a peer that reads nothing, the frames waiting for it stay within the
// bound; beyond it queueControl refuses. (Issue 8 item 11.)
func TestControlQueueBounded(t *testing.T) {
	tr := pipe.New(pipe.Options{MaxBuffered: 1000})
	lis, err := tr.Listen("stuck")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx := context.Background()
	accepted := make(chan error, 1)
	go func() {
		c, err := lis.Accept(ctx)
		if err == nil {
			defer c.Close()
			<-c.Done() // reads nothing
		}
		accepted <- err
	}()
	tc, err := tr.Dial(ctx, "stuck")
	if err != nil {
		t.Fatal(err)
	}
	l := conn.NewLink(tc, conn.LinkConfig{Log: zap.NewNop(), Keepalive: Keepalive{Time: -1, Timeout: time.Hour}.link()})
	defer func() {
		l.Close(status.New(codes.Canceled, "test over"))
		l.Wait()
		<-accepted
	}()
	const limit = 1024
	n := 0
	for l.QueueControl(make([]byte, 100), limit) {
		if n++; n > 2*limit {
			t.Fatalf("queued %d control frames to a peer that reads nothing, bound %d", n, limit)
		}
	}
	// The bound, plus what the pipe took (1000 bytes) and the frame in
	// the stuck Send.
	if n > limit+11 {
		t.Fatalf("%d frames queued, want at most %d", n, limit+11)
	}
}

func TestLimitedLogger(t *testing.T) {
	now := time.Unix(0, 0)
	r := newLimitedLogger(zap.NewNop(), 3, time.Second, func() time.Time { return now })
	allowed := 0
	for range 100 {
		if ok, _ := r.allow(); ok {
			allowed++
		}
	}
	if allowed != 3 {
		t.Fatalf("%d lines allowed at once, want the burst of 3", allowed)
	}
	now = now.Add(2500 * time.Millisecond)
	ok, dropped := r.allow()
	if !ok || dropped != 97 {
		t.Fatalf("after 2.5 s: allowed %v, %d reported dropped; want true, 97", ok, dropped)
	}
	if ok, _ := r.allow(); !ok {
		t.Fatal("the second token of 2.5 s was not there")
	}
	if ok, _ := r.allow(); ok {
		t.Fatal("a third token in 2.5 s")
	}
}
