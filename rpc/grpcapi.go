package rpc

import (
	"context"
	"fmt"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
)

// This file holds gRPC-go entry points that programs ported from it still
// use, although gRPC-go deprecates some of them: DialContext, WithBlock,
// FailOnNonTempDialError, WithReturnConnectionError, WithInsecure, and the
// Empty options users embed to write their own.

// DialContext is gRPC-go's DialContext: it makes a ClientConn as NewClient
// does, but a target without a scheme is one address (passthrough), and it
// starts connecting at once. It returns at once, unless WithBlock is among
// opts: then it returns when the first connection is Ready, or, when ctx
// ends first, closes the ClientConn and returns ctx.Err(), as gRPC-go's.
// Dial (which takes a context and fails on the first failed attempt) is
// this package's blocking form.
func DialContext(ctx context.Context, target string, opts ...DialOption) (*ClientConn, error) {
	cc, err := newClient(target, "passthrough", opts)
	if err != nil {
		return nil, err
	}
	cc.Connect()
	if !cc.opts.block {
		return cc, nil
	}
	var last error // the failure seen last in TransientFailure
	for {
		s := cc.GetState()
		switch {
		case s == connectivity.Ready:
			return cc, nil
		case s == connectivity.TransientFailure:
			last = cc.failure()
			if cc.opts.failOnDialError {
				cc.Close()
				return nil, last
			}
		}
		if !cc.WaitForStateChange(ctx, s) {
			if cc.opts.returnConnError && last == nil {
				last = cc.failure()
			}
			cc.Close()
			if cc.opts.returnConnError {
				return nil, fmt.Errorf("%w: %w", ctx.Err(), last)
			}
			return nil, ctx.Err()
		}
	}
}

// FailOnNonTempDialError, with true, makes a DialContext with WithBlock
// return the error of the first failed connection attempt instead of
// trying again until its context ends. rdmarpc takes every failure as
// final here (gRPC-go only those it deems not temporary), which rpc.Dial
// does too.
func FailOnNonTempDialError(f bool) DialOption {
	return func(o *dialOptions) { o.failOnDialError = f }
}

// WithReturnConnectionError makes DialContext block (WithBlock) and, when
// its context ends first, return an error that wraps both the context's
// error and the last failure it saw (an attempt's error, or that no backend
// is ready), as gRPC-go's.
func WithReturnConnectionError() DialOption {
	return func(o *dialOptions) { o.block, o.returnConnError = true, true }
}

// WithBlock makes DialContext wait until the ClientConn is Ready, retrying
// failed dials with backoff, within its context. NewClient ignores it, as
// gRPC-go's.
func WithBlock() DialOption { return func(o *dialOptions) { o.block = true } }

// WithInsecure is WithTransportCredentials(insecure.NewCredentials()), as
// gRPC-go's (which deprecates it for that).
func WithInsecure() DialOption { return WithTransportCredentials(insecure.NewCredentials()) }

// EmptyCallOption does nothing as a CallOption: a type that embeds it is a
// CallOption, so users can define their own for their interceptors to find,
// as with gRPC-go's.
type EmptyCallOption struct{}

func (EmptyCallOption) apply(*callInfo) {}

// EmptyServerOption does nothing as a ServerOption: a type that embeds it is
// a ServerOption, as with gRPC-go's.
type EmptyServerOption struct{}

func (EmptyServerOption) apply(*serverOptions) {}
