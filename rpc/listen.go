package rpc

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/transport"
)

// ListenOption configures Listen.
type ListenOption func(*listenOptions)

type listenOptions struct {
	fallback string
	log      *zap.Logger
}

// ListenFallback makes Listen use the transport of another scheme ("tcp")
// on the same address when no device serves the target's
// (transport.ErrNoDevice), logging one line when it does.
func ListenFallback(scheme string) ListenOption {
	return func(o *listenOptions) { o.fallback = scheme }
}

// ListenLogger sets where Listen logs its fallback. Default zap.NewNop().
func ListenLogger(l *zap.Logger) ListenOption { return func(o *listenOptions) { o.log = l } }

// Listen listens on target ("tcp://host:port", "rdma://ip:port") with the
// transport registered for its scheme, for Server.Serve.
func Listen(target string, opts ...ListenOption) (transport.Listener, error) {
	o := listenOptions{log: zap.NewNop()}
	for _, opt := range opts {
		opt(&o)
	}
	lis, err := transport.Listen(target)
	if err == nil || o.fallback == "" || !errors.Is(err, transport.ErrNoDevice) {
		return lis, err
	}
	_, addr, perr := transport.ParseTarget(target)
	if perr != nil {
		return nil, perr
	}
	fb := o.fallback + "://" + addr
	lis, ferr := transport.Listen(fb)
	if ferr != nil {
		return nil, fmt.Errorf("%w; falling back to %s: %w", err, fb, ferr)
	}
	o.log.Named("rpc").Warn("no device serves the address: listening with the fallback transport",
		zap.String("target", target), zap.String("fallback", fb), zap.Error(err))
	return lis, nil
}
