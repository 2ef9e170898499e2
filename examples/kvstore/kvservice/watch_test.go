package kvservice

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/status"
)

// fakeWatch is a Watch stream without a transport: Send hands responses
// to sent, an unbuffered channel, so a test that does not receive is a
// client that does not read.
type fakeWatch struct {
	ctx  context.Context
	sent chan *kvpb.WatchResponse
}

func (f *fakeWatch) Send(r *kvpb.WatchResponse) error {
	select {
	case f.sent <- r:
		return nil
	case <-f.ctx.Done():
		return status.FromContextError(f.ctx.Err()).Err()
	}
}
func (f *fakeWatch) SetHeader(metadata.MD) error  { return nil }
func (f *fakeWatch) SendHeader(metadata.MD) error { return nil }
func (f *fakeWatch) SetTrailer(metadata.MD)       {}
func (f *fakeWatch) Context() context.Context     { return f.ctx }
func (f *fakeWatch) SendMsg(m any) error          { return f.Send(m.(*kvpb.WatchResponse)) }
func (f *fakeWatch) RecvMsg(any) error            { return nil }

func openService(t *testing.T) (*Service, *store.Store) {
	t.Helper()
	st, err := store.Open(store.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(st), st
}

// startWatch runs Watch until the test reads its result from the channel.
func startWatch(s *Service, ctx context.Context, req *kvpb.WatchRequest) (*fakeWatch, <-chan error) {
	f := &fakeWatch{ctx: ctx, sent: make(chan *kvpb.WatchResponse)}
	done := make(chan error, 1)
	go func() { done <- s.Watch(req, f) }()
	return f, done
}

// TestWatchEnds: a watch returns when its client cancels, whether it is
// waiting for a write or blocked sending to a client that does not read,
// and when the service shuts down, with the status each case calls for.
func TestWatchEnds(t *testing.T) {
	for _, tc := range []struct {
		name     string
		blocked  bool // writes are pending that the client does not read
		shutdown bool
		want     codes.Code
	}{
		{"cancel while waiting", false, false, codes.Canceled},
		{"cancel while sending", true, false, codes.Canceled},
		{"shutdown while waiting", false, true, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st := openService(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f, done := startWatch(s, ctx, &kvpb.WatchRequest{})
			if r := <-f.sent; r.GetRevision() != 0 || len(r.GetEvents()) != 0 {
				t.Fatalf("first response of a watch from now: %v, want a progress report at 0", r)
			}
			st.Put([]byte("a"), []byte("1"))
			if r := <-f.sent; r.GetRevision() != 1 || string(r.GetEvents()[0].GetKey()) != "a" {
				t.Fatalf("the watch sent %v, want the put of a at 1", r)
			}
			if tc.blocked {
				for i := range 10 {
					st.Put([]byte(fmt.Sprint(i)), []byte("v"))
				}
			}
			if tc.shutdown {
				s.Shutdown()
			} else {
				cancel()
			}
			if err := <-done; status.Code(err) != tc.want {
				t.Fatalf("the watch returned %v, want %v", err, tc.want)
			}
		})
	}
}

// TestWatchPrefixAndProgress: only the prefix's events are sent; a
// replay that skipped revisions ends with a progress report; so does a
// run of ProgressEvery revisions without an event.
func TestWatchPrefixAndProgress(t *testing.T) {
	s, st := openService(t)
	st.Put([]byte("p/1"), []byte("a"))
	st.Batch([]store.Mutation{{Key: []byte("other"), Value: []byte("x")}, {Key: []byte("p/1"), Delete: true}})
	st.Put([]byte("other"), []byte("y"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, done := startWatch(s, ctx, &kvpb.WatchRequest{Prefix: []byte("p/"), FromRevision: 1})
	want := []string{"1 PUT p/1=a", "2 DELETE p/1=", "3 progress"}
	for _, w := range want {
		r := <-f.sent
		got := fmt.Sprintf("%d progress", r.GetRevision())
		if len(r.GetEvents()) > 0 {
			if len(r.GetEvents()) != 1 {
				t.Fatalf("revision %d: %d events, want 1", r.GetRevision(), len(r.GetEvents()))
			}
			e := r.GetEvents()[0]
			got = fmt.Sprintf("%d %v %s=%s", r.GetRevision(), e.GetType(), e.GetKey(), e.GetValue())
		}
		if got != w {
			t.Fatalf("got %q, want %q", got, w)
		}
	}
	for i := range ProgressEvery {
		st.Put([]byte("other"), []byte(fmt.Sprint(i)))
	}
	if r := <-f.sent; r.GetRevision() != 3+ProgressEvery || len(r.GetEvents()) != 0 {
		t.Fatalf("after %d writes elsewhere: %v, want a progress report at %d", ProgressEvery, r, 3+ProgressEvery)
	}
	cancel()
	<-done
}

func TestWatchBadRequest(t *testing.T) {
	s, _ := openService(t)
	for _, req := range []*kvpb.WatchRequest{
		{FromRevision: -1},
		{Prefix: make([]byte, store.MaxKeySize+1)},
	} {
		_, done := startWatch(s, context.Background(), req)
		if err := <-done; status.Code(err) != codes.InvalidArgument {
			t.Errorf("Watch(%v): %v, want InvalidArgument", req, err)
		}
	}
}
