package orca

import (
	"context"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/rdmarpc/rdmarpc/internal/balancerload"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
)

// trailerKey is the trailer ORCA's per-call report travels in, a
// serialized OrcaLoadReport (gRPC's binary-header "-bin" form).
const trailerKey = "endpoint-load-metrics-bin"

func init() { balancerload.SetParser(parseTrailer) }

// parseTrailer is the per-call report in a trailer, nil when there is
// none or it does not parse.
func parseTrailer(md map[string][]string) any {
	vs := metadata.MD(md).Get(trailerKey)
	if len(vs) == 0 {
		return nil
	}
	r := new(v3orcapb.OrcaLoadReport)
	if err := proto.Unmarshal([]byte(vs[0]), r); err != nil {
		return nil
	}
	return r
}

type recorderKey struct{}

// lazyRecorder is the call's recorder, made when the handler first asks
// for it: a call whose handler never does sends no report, as in gRPC-go.
type lazyRecorder struct {
	once sync.Once
	r    *recorder
}

func (l *lazyRecorder) get() *recorder {
	l.once.Do(func() { l.r = newRecorder() })
	return l.r
}

// CallMetricsRecorderFromContext is the recorder of the call whose handler
// has ctx, nil without CallMetricsServerOption.
func CallMetricsRecorderFromContext(ctx context.Context) CallMetricsRecorder {
	l, ok := ctx.Value(recorderKey{}).(*lazyRecorder)
	if !ok {
		return nil
	}
	return l.get()
}

// CallMetricsServerOption gives every call's handler, unary or streaming,
// a CallMetricsRecorder (CallMetricsRecorderFromContext) and, when the
// handler asked for it, sends what it recorded in the call's trailer, over
// smp's metrics when smp is not nil (what the call set wins).
func CallMetricsServerOption(smp ServerMetricsProvider) rpc.ServerOption {
	unary := func(ctx context.Context, req any, _ *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
		l := new(lazyRecorder)
		resp, err := handler(context.WithValue(ctx, recorderKey{}, l), req)
		if r := l.r; r != nil {
			if md := trailer(smp, r); md != nil {
				_ = rpc.SetTrailer(ctx, md) // fails only for a context of no call
			}
		}
		return resp, err
	}
	stream := func(srv any, ss rpc.ServerStream, _ *rpc.StreamServerInfo, handler rpc.StreamHandler) error {
		l := new(lazyRecorder)
		err := handler(srv, recorderStream{ss, context.WithValue(ss.Context(), recorderKey{}, l)})
		if r := l.r; r != nil {
			if md := trailer(smp, r); md != nil {
				ss.SetTrailer(md)
			}
		}
		return err
	}
	return rpc.JoinServerOptions(rpc.ChainUnaryInterceptor(unary), rpc.ChainStreamInterceptor(stream))
}

// recorderStream is a handler's stream with the recorder in its context.
type recorderStream struct {
	rpc.ServerStream
	ctx context.Context
}

func (s recorderStream) Context() context.Context { return s.ctx }

// trailer is the trailer carrying r's metrics over smp's, nil if they do
// not marshal.
func trailer(smp ServerMetricsProvider, r *recorder) metadata.MD {
	var server *ServerMetrics
	if smp != nil {
		server = smp.ServerMetrics()
	}
	b, err := proto.Marshal(merge(server, r.ServerMetrics()).report())
	if err != nil {
		return nil
	}
	return metadata.Pairs(trailerKey, string(b))
}
