package kvservice

import (
	"context"
	"errors"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/status"
)

// Service is the KV service over one store.
type Service struct {
	kvpb.UnimplementedKVServer
	st           *store.Store
	shutdown     context.Context // done once Shutdown was called
	stopWatching context.CancelFunc
}

// New returns the service of st. The caller keeps owning st.
func New(st *store.Store) *Service {
	ctx, cancel := context.WithCancel(context.Background())
	return &Service{st: st, shutdown: ctx, stopWatching: cancel}
}

// Shutdown ends every watch, now and later, with Unavailable: a watch
// never ends by itself, so a graceful stop, which waits for streams, calls
// this first. A watch blocked sending to a client that does not read ends
// when its connection is closed.
func (s *Service) Shutdown() { s.stopWatching() }

func (s *Service) Get(_ context.Context, req *kvpb.GetRequest) (*kvpb.GetResponse, error) {
	v, found, rev, err := s.st.GetRevision(req.GetKey())
	if err != nil {
		return nil, toStatus(err)
	}
	return &kvpb.GetResponse{Found: found, Value: v, Revision: int64(rev)}, nil
}

func (s *Service) Put(_ context.Context, req *kvpb.PutRequest) (*kvpb.PutResponse, error) {
	if err := s.st.Put(req.GetKey(), req.GetValue()); err != nil {
		return nil, toStatus(err)
	}
	return &kvpb.PutResponse{}, nil
}

func (s *Service) Delete(_ context.Context, req *kvpb.DeleteRequest) (*kvpb.DeleteResponse, error) {
	if err := s.st.Delete(req.GetKey()); err != nil {
		return nil, toStatus(err)
	}
	return &kvpb.DeleteResponse{}, nil
}

func (s *Service) Batch(_ context.Context, req *kvpb.BatchRequest) (*kvpb.BatchResponse, error) {
	muts := make([]store.Mutation, len(req.GetMutations()))
	for i, m := range req.GetMutations() {
		switch op := m.GetOp().(type) {
		case *kvpb.Mutation_Put:
			muts[i] = store.Mutation{Key: op.Put.GetKey(), Value: op.Put.GetValue()}
		case *kvpb.Mutation_Delete:
			muts[i] = store.Mutation{Key: op.Delete, Delete: true}
		default:
			return nil, status.Errorf(codes.InvalidArgument, "mutation %d is neither a put nor a delete", i)
		}
	}
	if err := s.st.Batch(muts); err != nil {
		return nil, toStatus(err)
	}
	return &kvpb.BatchResponse{}, nil
}

func (s *Service) CompareAndSwap(_ context.Context, req *kvpb.CompareAndSwapRequest) (*kvpb.CompareAndSwapResponse, error) {
	want := store.Absent()
	if req.Expected != nil { // proto3 optional bytes: nil means unset
		want = store.Holds(req.Expected)
	}
	if err := s.st.CompareAndSwap(req.GetKey(), want, req.GetValue()); err != nil {
		return nil, toStatus(err)
	}
	return &kvpb.CompareAndSwapResponse{}, nil
}

// toStatus maps a store error to a status error.
func toStatus(err error) error {
	var conflict *store.ConflictError
	switch {
	case errors.As(err, &conflict):
		st := status.New(codes.Aborted, err.Error())
		if d, derr := st.WithDetails(&kvpb.CompareAndSwapConflict{Found: conflict.Found, Current: conflict.Current}); derr == nil {
			st = d
		}
		return st.Err()
	case errors.Is(err, store.ErrCompacted):
		return status.Error(codes.OutOfRange, err.Error())
	case errors.Is(err, store.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, store.ErrDiskFull):
		// gRPC's code for "the entire file system is out of space": the
		// client may retry once space is freed, not at once.
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, store.ErrFailed):
		return status.Error(codes.Internal, err.Error())
	case errors.Is(err, store.ErrClosed):
		return status.Error(codes.Unavailable, "the store is closed: the server is shutting down")
	default:
		return status.Errorf(codes.Internal, "storage: %v", err)
	}
}

// Conflict returns the detail of an Aborted CompareAndSwap error: what the
// key held. ok is false for any other error.
func Conflict(err error) (c *kvpb.CompareAndSwapConflict, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.Aborted {
		return nil, false
	}
	for _, d := range st.Details() {
		if c, ok := d.(*kvpb.CompareAndSwapConflict); ok {
			return c, true
		}
	}
	return nil, false
}
