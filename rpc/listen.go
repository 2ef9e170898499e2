package rpc

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"
)

// ListenOption configures Listen.
type ListenOption func(*listenOptions)

type listenOptions struct {
	fallback string
	log      *zap.Logger
	creds    credentials.TransportCredentials
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
	lis, err := listen(target, o.creds)
	if err == nil || o.fallback == "" || !errors.Is(err, transport.ErrNoDevice) {
		return lis, err
	}
	_, addr, perr := transport.ParseTarget(target)
	if perr != nil {
		return nil, perr
	}
	fb := o.fallback + "://" + addr
	lis, ferr := listen(fb, o.creds)
	if ferr != nil {
		return nil, fmt.Errorf("%w; falling back to %s: %w", err, fb, ferr)
	}
	o.log.Named("rpc").Warn("no device serves the address: listening with the fallback transport",
		zap.String("target", target), zap.String("fallback", fb), zap.Error(err))
	return lis, nil
}

// listen listens on target, through creds when they do something.
func listen(target string, creds credentials.TransportCredentials) (transport.Listener, error) {
	if !secure(creds) {
		return transport.Listen(target)
	}
	tr, addr, err := transport.ForTarget(target)
	if err != nil {
		return nil, err
	}
	cl, ok := tr.(transport.CredentialsListener)
	if !ok {
		return nil, fmt.Errorf("rpc: the transport for %s (%T) cannot run transport credentials", target, tr)
	}
	return cl.ListenWithCredentials(addr, creds)
}
