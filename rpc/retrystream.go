package rpc

import (
	"context"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/status"
)

// newStreamFromConfig is the end of the stream chain: newStream with the
// method's waitForReady, timeout and retry policy from the service config,
// counted from its start to the stream's end for the idle
// timeout (a stream's context ends with it).
func (cc *ClientConn) newStreamFromConfig(ctx context.Context, desc *StreamDesc, method string, opts ...CallOption) (ClientStream, error) {
	var cancel context.CancelFunc
	mc := cc.sc.method(method)
	if mc != nil {
		if mc.waitForReady != nil {
			opts = append([]CallOption{WaitForReady(*mc.waitForReady)}, opts...)
		}
		if mc.timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, mc.timeout)
		}
	}
	end := func() {
		if cancel != nil {
			cancel()
		}
		cc.endCall()
	}
	cc.beginCall()
	cc.chz.Calls.Start()
	var cs ClientStream
	var err error
	if p, maxAttempts := cc.retryPolicyOf(mc); p != nil {
		cs, err = cc.newRetryStream(ctx, desc, method, p, maxAttempts, opts)
	} else {
		cs, err = cc.newStream(ctx, desc, method, cc, opts...)
		if err == nil {
			cs.(*clientStream).countCall()
		}
	}
	if err != nil {
		end()
		cc.chz.Calls.End(false)
		return nil, err
	}
	if cancel != nil || cc.opts.idleTimeout > 0 {
		sctx := cs.Context
		if rs, ok := cs.(*retryStream); ok {
			sctx = rs.context // its Context commits the stream
		}
		context.AfterFunc(sctx(), end)
	}
	return cs, nil
}

// defaultRetryBufferSize bounds the requests a call keeps for replay
// (MaxRetryRPCBufferSize), as gRPC-go's default per-call retry buffer:
// past it the call commits.
const defaultRetryBufferSize = 256 << 10

// retryStream is a stream of a method with a retry policy. Until it is
// committed (a HEADERS frame or a message came, or its sent messages
// outgrew the retry buffer, or one was not a protobuf message, or the
// caller asked for its Context, as gRPC-go's) it keeps
// copies of what it sent, and when the attempt fails with a retryable code
// it opens the stream again and replays them, as the policy and the
// throttle allow. Its context is its own, done when the caller's is or the
// stream has ended for good.
type retryStream struct {
	cc     *ClientConn
	ctx    context.Context
	cancel context.CancelFunc
	desc   *StreamDesc
	method string
	opts   []CallOption
	policy *retryPolicy
	// maxAttempts is the policy's, capped by WithMaxCallAttempts; buffer
	// the call's retry buffer size.
	maxAttempts, buffer int

	retryMu sync.Mutex // one retry at a time (Header and RecvMsg may race)

	mu         sync.Mutex
	cur        *clientStream
	attempt    int
	committed  bool
	sent       []proto.Message
	size       int
	closedSend bool
	// sincePushback counts retries since the server last said when to
	// retry (grpc-retry-pushback-ms): the backoff grows with it.
	sincePushback int

	// callEnded: the RPC's end was counted on the channel (channelz).
	callEnded atomic.Bool
}

// endCall counts the RPC's end on the channel, once: when RecvMsg or
// Header returns its outcome. A stream its caller abandons before that is
// not counted as ended.
func (s *retryStream) endCall(ok bool) {
	if s.callEnded.CompareAndSwap(false, true) {
		s.cc.chz.Calls.End(ok)
	}
}

func (cc *ClientConn) newRetryStream(ctx context.Context, desc *StreamDesc, method string, p *retryPolicy, maxAttempts int, opts []CallOption) (ClientStream, error) {
	cs, err := cc.newStream(ctx, desc, method, cc, opts...)
	if err != nil {
		return nil, err
	}
	s := &retryStream{cc: cc, desc: desc, method: method, opts: opts, policy: p, cur: cs.(*clientStream), attempt: 1,
		maxAttempts: maxAttempts, buffer: retryBufferOf(cc.opts.callOptions, opts)}
	s.ctx, s.cancel = context.WithCancel(ctx)
	return s, nil
}

// Context is the stream's context. Asking for it commits the stream to
// its current attempt, as gRPC-go's does: what the caller learns from it
// (its peer, say) stays true.
func (s *retryStream) Context() context.Context {
	s.mu.Lock()
	s.commitLocked()
	s.mu.Unlock()
	return s.ctx
}

// context is the stream's context, for the client's own use: it does not
// commit.
func (s *retryStream) context() context.Context { return s.ctx }

func (s *retryStream) current() *clientStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

func (s *retryStream) Trailer() metadata.MD { return s.current().Trailer() }

func (s *retryStream) commitLocked() {
	s.committed, s.sent, s.size = true, nil, 0
}

func (s *retryStream) SendMsg(m any) error {
	s.mu.Lock()
	if !s.committed {
		pm, ok := m.(proto.Message)
		if ok && s.size+proto.Size(pm) <= s.buffer {
			s.sent = append(s.sent, proto.Clone(pm))
			s.size += proto.Size(pm)
		} else {
			s.commitLocked()
		}
	}
	cur := s.cur
	s.mu.Unlock()
	err := cur.SendMsg(m)
	if err != nil && s.current() != cur {
		return nil // a new attempt replayed m
	}
	return err
}

func (s *retryStream) CloseSend() error {
	s.mu.Lock()
	s.closedSend = true
	cur := s.cur
	s.mu.Unlock()
	return cur.CloseSend()
}

func (s *retryStream) Header() (metadata.MD, error) {
	for {
		cur := s.current()
		h, err := cur.Header()
		if err == nil {
			return h, nil
		}
		if !s.retry(cur, err) {
			s.endCall(false)
			return h, err
		}
	}
}

func (s *retryStream) RecvMsg(m any) error {
	for {
		cur := s.current()
		err := cur.RecvMsg(m)
		if err == nil {
			s.mu.Lock()
			s.commitLocked()
			s.mu.Unlock()
			return nil
		}
		if err == io.EOF {
			s.cc.throttle.success()
			s.cancel()
			s.endCall(true)
			return err
		}
		if !s.retry(cur, err) {
			s.cancel()
			s.endCall(false)
			return err
		}
	}
}

// retry decides whether the attempt cur, which failed with err, is made
// again, and if so waits the backoff and starts the next attempt. It
// reports whether there is a new attempt to use.
func (s *retryStream) retry(cur *clientStream, err error) bool {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	s.mu.Lock()
	if s.cur != cur {
		s.mu.Unlock()
		return true // another goroutine retried already
	}
	cur.mu.Lock()
	sawHeaders := cur.sawHeaders
	cur.mu.Unlock()
	if s.committed || sawHeaders {
		s.commitLocked()
		s.mu.Unlock()
		return false
	}
	wait, pushed, stop := pushback(cur.Trailer())
	if stop {
		s.cc.throttle.failure() // the server's "do not retry" counts as a failure
	}
	if stop || !s.policy.retryable[status.Code(err)] {
		s.commitLocked()
		s.mu.Unlock()
		return false
	}
	if !s.cc.throttle.failure() || s.attempt >= s.maxAttempts || s.ctx.Err() != nil {
		s.commitLocked()
		s.mu.Unlock()
		return false
	}
	if pushed {
		s.sincePushback = 0
	} else {
		s.sincePushback++
		wait = s.policy.delay(s.sincePushback)
	}
	attempt := s.attempt
	s.mu.Unlock()

	t := time.NewTimer(wait)
	select {
	case <-t.C:
	case <-s.ctx.Done():
		t.Stop()
		return false
	}

	// SendMsg waits for the replay: what it adds to sent is sent once, in
	// order, by the replay or by itself on the new attempt.
	s.mu.Lock()
	defer s.mu.Unlock()
	actx := metadata.AppendToOutgoingContext(s.ctx, previousAttemptsKey, strconv.Itoa(attempt))
	ns, err := s.cc.newStream(actx, s.desc, s.method, s.cc, s.opts...)
	if err != nil {
		s.commitLocked()
		return false
	}
	next := ns.(*clientStream)
	for _, m := range s.sent {
		if next.SendMsg(m) != nil {
			break // the new attempt failed too: its RecvMsg says how
		}
	}
	if s.closedSend {
		next.CloseSend()
	}
	s.cur, s.attempt = next, attempt+1
	return true
}
