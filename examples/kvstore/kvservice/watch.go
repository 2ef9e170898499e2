package kvservice

import (
	"bytes"
	"context"
	"errors"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// Watch reading.
const (
	// watchReadRevisions and watchReadBytes bound what one watcher holds
	// read from the change log and not yet sent: the log is its queue. It
	// reads only when its client can take what it sends (rpc.SendReady),
	// and about half a stream window at once (one revision more, when a
	// single one is larger), so that a watcher whose client does not read
	// waits holding nothing, and one whose client reads slowly holds at
	// most that much while its Send waits.
	watchReadRevisions = 256
	watchReadBytes     = 32 << 10
	// ProgressEvery is how many revisions without an event for its prefix
	// a watcher passes before it is sent a progress response (no events),
	// so that its resume point stays within the log's retention. One is
	// also sent when the replay of the log first catches up.
	ProgressEvery = 1024
)

// Watch replays the change log from the request's revision, then follows
// new revisions as they are synced. It holds no queue: a watcher that
// reads slowly blocks in Send (the stream's window is full) and reads the
// log on at its own pace; if its next revision is dropped meanwhile it
// ends with OutOfRange.
func (s *Service) Watch(req *kvpb.WatchRequest, stream kvpb.KV_WatchServer) error {
	if req.GetFromRevision() < 0 {
		return status.Errorf(codes.InvalidArgument, "from_revision %d is negative", req.GetFromRevision())
	}
	prefix := req.GetPrefix()
	if len(prefix) > store.MaxKeySize {
		return status.Errorf(codes.InvalidArgument, "watch prefix of %d bytes is longer than the key size limit (%d)", len(prefix), store.MaxKeySize)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(s.shutdown, cancel)()

	next := uint64(req.GetFromRevision())
	if next == 0 {
		// The client learns where "now" was, so that it can resume
		// from there after a reconnect.
		next = s.st.Revision() + 1
		if err := stream.Send(&kvpb.WatchResponse{Revision: int64(next - 1)}); err != nil {
			return err
		}
	}
	skipped, replaying := 0, true
	for {
		if err := rpc.SendReady(stream); err != nil {
			return err
		}
		changes, after, err := s.st.Changes(next, watchReadRevisions, watchReadBytes)
		if err != nil {
			return s.watchError(ctx, err, next)
		}
		for _, c := range changes {
			resp := &kvpb.WatchResponse{Revision: int64(c.Revision)}
			for _, m := range c.Mutations {
				if !bytes.HasPrefix(m.Key, prefix) {
					continue
				}
				ev := &kvpb.Event{Key: m.Key, Value: m.Value}
				if m.Delete {
					ev.Type = kvpb.Event_DELETE
				}
				resp.Events = append(resp.Events, ev)
			}
			if len(resp.Events) == 0 {
				if skipped++; skipped < ProgressEvery {
					continue
				}
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
			skipped = 0
		}
		next = after
		if len(changes) > 0 {
			continue // more may be there already
		}
		if replaying && skipped > 0 {
			if err := stream.Send(&kvpb.WatchResponse{Revision: int64(next - 1)}); err != nil {
				return err
			}
			skipped = 0
		}
		replaying = false
		if err := s.st.WaitRevision(ctx, next-1); err != nil {
			return s.watchError(ctx, err, next)
		}
	}
}

// watchError is the status a watch ends with; next is the revision it
// would have sent next, where a new watch resumes.
func (s *Service) watchError(ctx context.Context, err error, next uint64) error {
	var compacted *store.CompactedError
	switch {
	case errors.As(err, &compacted):
		// etcd's code for the same case: the client asked for a range
		// that is gone, and must read again (Get or Scan, then watch from
		// their revision).
		return status.Error(codes.OutOfRange, compacted.Error())
	case s.shutdown.Err() != nil:
		return status.Errorf(codes.Unavailable, "the server is shutting down: watch again from revision %d", next)
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return toStatus(err)
}
