package rpc

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/status"
)

// healthWatchMethod is the health service's Watch (grpc.health.v1).
const healthWatchMethod = "/grpc.health.v1.Health/Watch"

// healthServing is grpc.health.v1.HealthCheckResponse_SERVING.
const healthServing = 1

var healthWatchDesc = &StreamDesc{StreamName: "Watch", ServerStreams: true}

// watchHealth runs the health check of backend s over its link l, while
// ctx lasts (it ends when l does, or stops taking new calls): it calls the backend's grpc.health.v1.Health/Watch for the
// service config's serviceName and makes the backend Ready for picks only
// while the answer is SERVING. A server without the health service
// (Unimplemented) is taken as serving, as gRPC does.
//
// The messages are encoded with types of the same wire form as the health
// protocol's, so this package needs no generated health code:
// HealthCheckRequest is {string service = 1}, a StringValue on the wire;
// HealthCheckResponse is {ServingStatus status = 1}, an enum, which is an
// Int32Value on the wire. They go through the ClientConn's codec, which
// must therefore be the protobuf one.
func (s *subConn) watchHealth(ctx context.Context, l *clientLink) {
	cc := s.cc
	defer cc.wg.Done()
	for failures := 1; ; failures++ {
		err := s.watchHealthOnce(ctx, l)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			cc.log.Warn("the backend has no health service: taking it as serving", zap.Stringer("peer", l.Conn.RemoteAddr()))
			s.setHealth(l, connectivity.Ready)
			return
		}
		cc.log.Info("health watch ended", zap.Stringer("peer", l.Conn.RemoteAddr()), zap.Error(err))
		s.setHealth(l, connectivity.TransientFailure)
		t := time.NewTimer(cc.connect.Backoff.Delay(failures))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

func (s *subConn) watchHealthOnce(ctx context.Context, l *clientLink) error {
	ci := callInfo{maxRecvSize: s.cc.opts.maxRecvSize, maxSendSize: s.cc.opts.maxSendSize}
	// The user-agent and per-RPC credentials as on the user's streams: a
	// server's interceptors may require them.
	md, err := l.callMD(ctx, healthWatchMethod, nil, &ci)
	if err != nil {
		return err
	}
	cs, err := l.open(ctx, healthWatchDesc, healthWatchMethod, md, &ci, nil) // the balancer's own stream: not the user's RPC, so no stats
	if err != nil {
		return err
	}
	if err := cs.SendMsg(&wrapperspb.StringValue{Value: s.cc.sc.healthName}); err != nil {
		return cs.RecvMsg(new(wrapperspb.Int32Value)) // the stream's status
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		var r wrapperspb.Int32Value
		if err := cs.RecvMsg(&r); err != nil {
			return err
		}
		st := connectivity.TransientFailure
		if r.Value == healthServing {
			st = connectivity.Ready
		}
		s.setHealth(l, st)
	}
}

// setHealth records the health of s, if l is still its link.
func (s *subConn) setHealth(l *clientLink, st connectivity.State) {
	cc := s.cc
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if s.cur == l && s.health != st {
		s.health = st
		s.err = nil
		if st == connectivity.TransientFailure {
			s.err = fmt.Errorf("%s: backend %s reports it is not serving", cc.target, s.curAddr.Addr)
		}
		s.reportLocked()
	}
}
