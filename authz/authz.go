package authz

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// errDenied is what a refused call gets, gRPC-go's words.
var errDenied = status.Error(codes.PermissionDenied, "authz: unauthorized RPC request rejected")

// StaticInterceptor authorizes calls by a policy fixed when it was made.
type StaticInterceptor struct {
	p *policy
}

// NewStatic returns interceptors that authorize calls by authzPolicy, a
// policy in gRPC's JSON format (see the package doc); an invalid policy is
// an error saying where.
func NewStatic(authzPolicy string) (*StaticInterceptor, error) {
	p, err := parsePolicy(authzPolicy)
	if err != nil {
		return nil, err
	}
	return &StaticInterceptor{p: p}, nil
}

// UnaryInterceptor lets a call through to handler if the policy allows it,
// and fails it PermissionDenied otherwise.
func (i *StaticInterceptor) UnaryInterceptor(ctx context.Context, req any, info *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
	if !i.p.allowed(callOf(ctx, info.FullMethod)) {
		return nil, errDenied
	}
	return handler(ctx, req)
}

// StreamInterceptor lets a stream through to handler if the policy allows
// it, and fails it PermissionDenied otherwise.
func (i *StaticInterceptor) StreamInterceptor(srv any, ss rpc.ServerStream, info *rpc.StreamServerInfo, handler rpc.StreamHandler) error {
	if !i.p.allowed(callOf(ss.Context(), info.FullMethod)) {
		return errDenied
	}
	return handler(srv, ss)
}

// callOf is what the policy looks at for a call whose handler context is
// ctx.
func callOf(ctx context.Context, method string) *call {
	c := &call{method: method}
	c.md, _ = metadata.FromIncomingContext(ctx)
	if p, ok := peer.FromContext(ctx); ok {
		c.auth = p.AuthInfo
	}
	return c
}

// FileWatcherInterceptor authorizes calls by the policy in a file, read
// again at each refresh: a file that has become unreadable or invalid
// leaves the last good policy in force.
type FileWatcherInterceptor struct {
	file  string
	cur   atomic.Pointer[StaticInterceptor]
	last  []byte // the file's content when last read (the watcher's)
	stop  chan struct{}
	done  chan struct{}
	close sync.Once
}

// NewFileWatcher returns interceptors that authorize calls by the policy
// in file, which must be valid now, and reread it every refresh. Close
// stops the rereading.
func NewFileWatcher(file string, refresh time.Duration) (*FileWatcherInterceptor, error) {
	if file == "" {
		return nil, fmt.Errorf("authz: authorization policy file path is empty")
	}
	if refresh <= 0 {
		return nil, fmt.Errorf("authz: requires refresh interval(%v) greater than 0s", refresh)
	}
	w := &FileWatcherInterceptor{file: file, stop: make(chan struct{}), done: make(chan struct{})}
	if err := w.load(); err != nil {
		return nil, err
	}
	go w.watch(refresh)
	return w, nil
}

// load reads the file and, when it changed and holds a valid policy, makes
// it the one in force.
func (w *FileWatcherInterceptor) load() error {
	b, err := os.ReadFile(w.file)
	if err != nil {
		return fmt.Errorf("authz: policyFile(%s) read failed: %v", w.file, err)
	}
	if w.cur.Load() != nil && string(b) == string(w.last) {
		return nil
	}
	si, err := NewStatic(string(b))
	if err != nil {
		return fmt.Errorf("authz: %s: %v", w.file, err)
	}
	w.cur.Store(si)
	w.last = b
	return nil
}

// watch rereads the file every refresh until Close.
func (w *FileWatcherInterceptor) watch(refresh time.Duration) {
	defer close(w.done)
	t := time.NewTicker(refresh)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			_ = w.load() // the last good policy stays
		}
	}
}

// Close stops rereading the file and returns once the reader has stopped;
// the interceptors keep the last policy.
func (w *FileWatcherInterceptor) Close() {
	w.close.Do(func() { close(w.stop) })
	<-w.done
}

// UnaryInterceptor is StaticInterceptor.UnaryInterceptor with the policy
// in force.
func (w *FileWatcherInterceptor) UnaryInterceptor(ctx context.Context, req any, info *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
	return w.cur.Load().UnaryInterceptor(ctx, req, info, handler)
}

// StreamInterceptor is StaticInterceptor.StreamInterceptor with the policy
// in force.
func (w *FileWatcherInterceptor) StreamInterceptor(srv any, ss rpc.ServerStream, info *rpc.StreamServerInfo, handler rpc.StreamHandler) error {
	return w.cur.Load().StreamInterceptor(srv, ss, info, handler)
}
