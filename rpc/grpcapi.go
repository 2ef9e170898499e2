package rpc

import (
	"context"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials/insecure"
)

// This file holds gRPC-go entry points that programs ported from it still
// use, although gRPC-go deprecates some of them: DialContext, WithBlock,
// WithInsecure, and the Empty options users embed to write their own.

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
	for {
		s := cc.GetState()
		if s == connectivity.Ready {
			return cc, nil
		}
		if !cc.WaitForStateChange(ctx, s) {
			cc.Close()
			return nil, ctx.Err()
		}
	}
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
