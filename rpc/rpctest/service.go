package rpctest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
	"github.com/rdmarpc/rdmarpc/status"
)

// testService implements the Test service and records what its handlers
// saw, so the suite can check the server's side of a call.
type testService struct {
	testpb.UnimplementedTestServer

	mu      sync.Mutex
	blocked map[string]*blockRecord
}

// blockRecord is one Block call as the server saw it.
type blockRecord struct {
	started   chan struct{} // closed when the handler starts
	release   chan struct{} // closed by the suite to make Block return OK
	ended     chan struct{} // closed when the handler returns
	deadline  time.Time     // the handler context's deadline, if any
	startedAt time.Time     // when the handler started
	err       error         // the handler context's error when it ended
}

func newTestService() *testService {
	return &testService{blocked: make(map[string]*blockRecord)}
}

// block returns the record for tag, creating it.
func (s *testService) block(tag string) *blockRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.blocked[tag]
	if r == nil {
		r = &blockRecord{started: make(chan struct{}), release: make(chan struct{}), ended: make(chan struct{})}
		s.blocked[tag] = r
	}
	return r
}

func (s *testService) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	if in.ReplySize > 0 {
		return &testpb.EchoResponse{Payload: make([]byte, in.ReplySize)}, nil
	}
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

func (s *testService) Block(ctx context.Context, in *testpb.BlockRequest) (*testpb.BlockResponse, error) {
	r := s.block(in.Tag)
	r.startedAt = time.Now()
	r.deadline, _ = ctx.Deadline()
	close(r.started)
	defer close(r.ended)
	select {
	case <-r.release:
		return &testpb.BlockResponse{}, nil
	case <-ctx.Done():
		r.err = ctx.Err()
		return nil, ctx.Err()
	}
}

func (s *testService) Fail(ctx context.Context, in *testpb.FailRequest) (*testpb.FailResponse, error) {
	st := status.New(codes.Code(in.Code), in.Message)
	if in.Detail != "" {
		var err error
		if st, err = st.WithDetails(wrapperspb.String(in.Detail)); err != nil {
			return nil, err
		}
	}
	return nil, st.Err()
}

func (s *testService) Panic(ctx context.Context, in *testpb.PanicRequest) (*testpb.PanicResponse, error) {
	panic("rpctest: the Panic method panics, as asked")
}

func (s *testService) Metadata(ctx context.Context, in *testpb.MetadataRequest) (*testpb.MetadataResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var entries []string
	for k, vs := range md {
		for _, v := range vs {
			entries = append(entries, k+"="+v)
		}
	}
	sort.Strings(entries)
	if err := rpc.SetHeader(ctx, metadata.Pairs("echo-header-bin", strings.Join(entries, ","))); err != nil {
		return nil, err
	}
	if err := rpc.SetTrailer(ctx, metadata.Pairs("echo-trailer", fmt.Sprint(len(entries)), "raw-bin", "\x00\x01\xff")); err != nil {
		return nil, err
	}
	return &testpb.MetadataResponse{Entries: entries}, nil
}
