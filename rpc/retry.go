package rpc

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/status"
)

// previousAttemptsKey is the request metadata a retried attempt carries,
// gRPC's: how many attempts went before it.
const previousAttemptsKey = "grpc-previous-rpc-attempts"

// retryCall is the end of the client interceptor chain: it applies the
// method's config from the service config, and makes the call again, as
// its retryPolicy allows, while it fails with a retryable code before the
// server sent response headers (once they arrive the call is committed),
// the retry throttle lets it, and the caller's context lasts. A call that
// never left is resent by cc.call itself, without counting as an attempt.
func (cc *ClientConn) retryCall(ctx context.Context, method string, req, reply any, _ *ClientConn, opts ...CallOption) (err error) {
	cc.beginCall()
	defer cc.endCall()
	cc.chz.Calls.Start()
	defer func() { cc.chz.Calls.End(err == nil) }()
	mc := cc.sc.method(method)
	if mc != nil && mc.waitForReady != nil {
		// The call's own options come later and win, as in gRPC.
		opts = append([]CallOption{WaitForReady(*mc.waitForReady)}, opts...)
	}
	if mc != nil && mc.timeout > 0 {
		// The method's timeout bounds the whole call, retries included;
		// the caller's deadline wins when it is sooner.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, mc.timeout)
		defer cancel()
	}
	p, maxAttempts := cc.retryPolicyOf(mc)
	if p == nil {
		return cc.call(ctx, method, req, reply, cc, opts...)
	}
	if pm, ok := req.(proto.Message); ok && proto.Size(pm) > retryBufferOf(cc.opts.callOptions, opts) {
		// Beyond the retry buffer the call is committed to one attempt,
		// as gRPC-go's.
		return cc.call(ctx, method, req, reply, cc, opts...)
	}
	var header, trailer metadata.MD
	opts = append(opts[:len(opts):len(opts)], callOptionFunc(func(ci *callInfo) { ci.attemptHeader, ci.attemptTrailer = &header, &trailer }))
	sincePushback := 0 // retries since the server last said when
	for attempt := 1; ; attempt++ {
		actx := ctx
		if attempt > 1 {
			actx = metadata.AppendToOutgoingContext(ctx, previousAttemptsKey, strconv.Itoa(attempt-1))
		}
		header, trailer = nil, nil
		err := cc.call(actx, method, req, reply, cc, opts...)
		if err == nil {
			cc.throttle.success()
			return nil
		}
		wait, pushed, stop := pushback(trailer)
		if stop {
			cc.throttle.failure() // the server's "do not retry" counts as a failure
			return err
		}
		if !p.retryable[status.Code(err)] {
			return err
		}
		if allowed := cc.throttle.failure(); !allowed || attempt >= maxAttempts || len(header) > 0 || ctx.Err() != nil {
			return err
		}
		if pushed {
			sincePushback = 0
		} else {
			sincePushback++
			wait = p.delay(sincePushback)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// delay is the wait before the n-th retry since the server last set one
// with grpc-retry-pushback-ms (1 for the first): random in [0, min(initialBackoff × multiplier^(n-1), maxBackoff)),
// as gRPC's.
func (p *retryPolicy) delay(attempt int) time.Duration {
	d := float64(p.initialBackoff)
	for i := 1; i < attempt && d < float64(p.maxBackoff); i++ {
		d *= p.backoffMultiplier
	}
	d = min(d, float64(p.maxBackoff))
	return time.Duration(rand.Float64() * d)
}

// retryThrottle is gRPC's retry throttle (A6): a token bucket of maxTokens
// that loses one token per failed attempt and gains tokenRatio per
// successful call; retries go out only while more than half the tokens are
// left, so a fleet that fails is not hammered with retries. A nil throttle
// allows every retry.
type retryThrottle struct {
	mu     sync.Mutex
	max    float64
	ratio  float64
	tokens float64
}

func newRetryThrottle(c throttleConfig) *retryThrottle {
	return &retryThrottle{max: c.maxTokens, ratio: c.tokenRatio, tokens: c.maxTokens}
}

func (t *retryThrottle) success() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.tokens = min(t.max, t.tokens+t.ratio)
	t.mu.Unlock()
}

// failure counts a failed attempt and reports whether a retry may follow.
func (t *retryThrottle) failure() bool {
	if t == nil {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tokens = max(0, t.tokens-1)
	return t.tokens > t.max/2
}
