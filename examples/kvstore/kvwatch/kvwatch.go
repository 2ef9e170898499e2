package kvwatch

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// Dialer connects to a server: a client and the function that closes its
// connection.
type Dialer func(ctx context.Context) (kvpb.KVClient, func() error, error)

// Options say what to follow and how to retry. The zero value follows
// every key from now on.
type Options struct {
	// Prefix selects the keys.
	Prefix []byte
	// From is the first revision; 0 means from now on.
	From int64
	// Backoff spaces the reconnects; the zero value is 100 ms growing to
	// 5 s.
	Backoff backoff.Config
	// OnRetry, if set, is told each time the watch broke and is about to
	// be dialed again: why, and the revision it resumes from.
	OnRetry func(err error, from int64)
	// CallOptions are added to the Watch call.
	CallOptions []rpc.CallOption
}

// MaxRecvMsgSize is the response size Follow accepts: one revision's
// events can be a little larger than the write that made them, which the
// server took at up to its request limit (4 MiB by default).
const MaxRecvMsgSize = 16 << 20

// Follow watches, and calls fn with each response in revision order
// (responses without events are progress reports: fn may ignore them).
// When the stream breaks with Unavailable (the connection is gone, the
// server restarts) it dials again and resumes after the last revision fn
// was given. It returns when ctx is done (ctx's error), when fn returns
// an error (that error), or when the server ends the watch for a reason
// retrying cannot change: OutOfRange when the resume revision has been
// compacted, for instance.
func Follow(ctx context.Context, dial Dialer, o Options, fn func(*kvpb.WatchResponse) error) error {
	if o.Backoff.BaseDelay <= 0 {
		o.Backoff = backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second}
	}
	from := o.From
	failures := 0
	for {
		progressed, err := watchOnce(ctx, dial, o, &from, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var fnErr fnError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		if status.Code(err) != codes.Unavailable {
			return err
		}
		if progressed {
			failures = 0
		}
		failures++
		if o.OnRetry != nil {
			o.OnRetry(err, from)
		}
		t := time.NewTimer(o.Backoff.Delay(failures))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// fnError carries the callback's error out of watchOnce.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }

// watchOnce runs one Watch call from *from, advancing it past each
// revision handed to fn; progressed reports whether any was.
func watchOnce(ctx context.Context, dial Dialer, o Options, from *int64, fn func(*kvpb.WatchResponse) error) (progressed bool, _ error) {
	kv, closeConn, err := dial(ctx)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unavailable, err.Error())
		}
		return false, err
	}
	defer closeConn()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := append([]rpc.CallOption{rpc.MaxCallRecvMsgSize(MaxRecvMsgSize)}, o.CallOptions...)
	stream, err := kv.Watch(ctx, &kvpb.WatchRequest{Prefix: o.Prefix, FromRevision: *from}, opts...)
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The server never ends a watch with OK; treat it as a
			// break.
			err = status.Error(codes.Unavailable, "the server ended the watch")
		}
		if err != nil {
			return progressed, err
		}
		if err := fn(resp); err != nil {
			return progressed, fnError{err}
		}
		*from, progressed = resp.GetRevision()+1, true
	}
}
