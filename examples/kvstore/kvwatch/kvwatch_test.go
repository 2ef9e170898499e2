package kvwatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// script is a fake server: each Watch call gets the next list of
// responses, then the error that ends it.
type script struct {
	kvpb.KVClient // nil: only Watch is called
	calls         []call
	froms         []int64
}

type call struct {
	resps []*kvpb.WatchResponse
	end   error
}

func (s *script) Watch(_ context.Context, req *kvpb.WatchRequest, _ ...rpc.CallOption) (rpc.ServerStreamingClient[kvpb.WatchResponse], error) {
	s.froms = append(s.froms, req.GetFromRevision())
	c := s.calls[0]
	s.calls = s.calls[1:]
	return &fakeStream{c: c}, nil
}

type fakeStream struct {
	rpc.ClientStream // nil: only Recv is called
	c                call
}

func (f *fakeStream) Recv() (*kvpb.WatchResponse, error) {
	if len(f.c.resps) == 0 {
		return nil, f.c.end
	}
	r := f.c.resps[0]
	f.c.resps = f.c.resps[1:]
	return r, nil
}

func rev(n int64) *kvpb.WatchResponse { return &kvpb.WatchResponse{Revision: n} }

func follow(s *script, o Options, fn func(*kvpb.WatchResponse) error) error {
	o.Backoff = backoff.Config{BaseDelay: time.Microsecond, Multiplier: 1, MaxDelay: time.Microsecond}
	dial := func(context.Context) (kvpb.KVClient, func() error, error) { return s, func() error { return nil }, nil }
	return Follow(context.Background(), dial, o, fn)
}

// TestFollowResumes: after Unavailable it watches again from the revision
// after the last one handed over; a code retrying cannot help ends it.
func TestFollowResumes(t *testing.T) {
	s := &script{calls: []call{
		{[]*kvpb.WatchResponse{rev(3), rev(4)}, status.Error(codes.Unavailable, "connection lost")},
		{nil, status.Error(codes.Unavailable, "still down")},
		{[]*kvpb.WatchResponse{rev(5)}, status.Error(codes.OutOfRange, "compacted")},
	}}
	var got []int64
	err := follow(s, Options{From: 3}, func(r *kvpb.WatchResponse) error { got = append(got, r.GetRevision()); return nil })
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("Follow: %v, want OutOfRange", err)
	}
	if len(got) != 3 || got[2] != 5 {
		t.Fatalf("handed over %v, want [3 4 5]", got)
	}
	if want := []int64{3, 5, 5}; len(s.froms) != 3 || s.froms[0] != want[0] || s.froms[1] != want[1] || s.froms[2] != want[2] {
		t.Fatalf("watched from %v, want %v", s.froms, want)
	}
}

// TestFollowCallbackError: fn's error ends Follow as it is, and the
// revision fn refused is not counted as handed over.
func TestFollowCallbackError(t *testing.T) {
	stop := errors.New("stop")
	s := &script{calls: []call{{[]*kvpb.WatchResponse{rev(1), rev(2)}, nil}}}
	err := follow(s, Options{}, func(r *kvpb.WatchResponse) error {
		if r.GetRevision() == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Follow: %v, want the callback's error", err)
	}
}
