package rpc

import (
	"maps"
	"strconv"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
)

// WithDisableRetry turns retries off, as gRPC-go's option: the service
// config's retry policies are ignored (a call that never left the client
// is still sent again: it was not an attempt).
func WithDisableRetry() DialOption { return func(o *dialOptions) { o.disableRetry = true } }

// WithMaxCallAttempts caps the attempts of a call (the first one and its
// retries) whatever the service config's retry policy asks, as gRPC-go's
// option. n below 2 means the default, 5.
func WithMaxCallAttempts(n int) DialOption {
	return func(o *dialOptions) { o.maxCallAttempts = n }
}

// retryPolicyOf is the retry policy the client applies to calls of a
// method with config mc, and the most attempts it allows; nil without one
// or with WithDisableRetry.
func (cc *ClientConn) retryPolicyOf(mc *methodConfig) (*retryPolicy, int) {
	if mc == nil || mc.retry == nil || cc.opts.disableRetry {
		return nil, 0
	}
	limit := cc.opts.maxCallAttempts
	if limit < 2 {
		limit = defaultMaxCallAttempts
	}
	return mc.retry, min(mc.retry.maxAttempts, limit)
}

// pushbackKey is the trailer by which a server tells a client when, or
// whether, to retry (gRFC A6).
const pushbackKey = "grpc-retry-pushback-ms"

// pushback reads a failed attempt's grpc-retry-pushback-ms: a delay to wait
// before the next attempt instead of the backoff (ok), or stop when the
// server says not to retry (a negative or malformed value, or several).
func pushback(trailer metadata.MD) (d time.Duration, ok, stop bool) {
	v := trailer[pushbackKey]
	switch len(v) {
	case 0:
		return 0, false, false
	case 1:
	default:
		return 0, false, true
	}
	ms, err := strconv.ParseInt(v[0], 10, 32)
	if err != nil || ms < 0 {
		return 0, false, true
	}
	return time.Duration(ms) * time.Millisecond, true, false
}

// MethodConfig is what the service config says of a method, as gRPC-go's
// (deprecated there, kept for its callers). MaxReqSize and MaxRespSize are
// nil: rdmarpc does not read maxRequestMessageBytes and
// maxResponseMessageBytes from a service config.
type MethodConfig struct {
	WaitForReady *bool
	Timeout      *time.Duration
	MaxReqSize   *int
	MaxRespSize  *int
	RetryPolicy  *RetryPolicy
}

// RetryPolicy is a method's retry policy as the service config gives it.
type RetryPolicy struct {
	MaxAttempts          int
	InitialBackoff       time.Duration
	MaxBackoff           time.Duration
	BackoffMultiplier    float64
	RetryableStatusCodes map[codes.Code]bool
}

// GetMethodConfig is what the client's service config says of method
// ("/package.Service/Method"), as gRPC-go's: the method's own entry, else
// its service's, else the default one; the zero MethodConfig without any.
func (cc *ClientConn) GetMethodConfig(method string) MethodConfig {
	mc := cc.sc.method(method)
	if mc == nil {
		return MethodConfig{}
	}
	var out MethodConfig
	if mc.waitForReady != nil {
		w := *mc.waitForReady
		out.WaitForReady = &w
	}
	if mc.timeout > 0 {
		t := mc.timeout
		out.Timeout = &t
	}
	if p := mc.retry; p != nil {
		out.RetryPolicy = &RetryPolicy{MaxAttempts: p.maxAttempts, InitialBackoff: p.initialBackoff,
			MaxBackoff: p.maxBackoff, BackoffMultiplier: p.backoffMultiplier, RetryableStatusCodes: maps.Clone(p.retryable)}
	}
	return out
}
