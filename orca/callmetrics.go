package orca

import (
	"context"

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

// CallMetricsRecorderFromContext is the recorder of the call whose handler
// has ctx, nil without CallMetricsServerOption.
func CallMetricsRecorderFromContext(ctx context.Context) CallMetricsRecorder {
	r, _ := ctx.Value(recorderKey{}).(CallMetricsRecorder)
	return r
}

// CallMetricsServerOption gives every call's handler a CallMetricsRecorder
// and sends what it recorded in the call's trailer, over smp's metrics
// when smp is not nil (what the call set wins). A call that recorded
// nothing and has no smp sends no report.
func CallMetricsServerOption(smp ServerMetricsProvider) rpc.ServerOption {
	return rpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
		r := newRecorder()
		resp, err := handler(context.WithValue(ctx, recorderKey{}, CallMetricsRecorder(r)), req)
		setTrailer(ctx, smp, r)
		return resp, err
	})
}

func setTrailer(ctx context.Context, smp ServerMetricsProvider, r *recorder) {
	m := r.ServerMetrics()
	if smp == nil && m.empty() {
		return
	}
	var server *ServerMetrics
	if smp != nil {
		server = smp.ServerMetrics()
	}
	b, err := proto.Marshal(merge(server, m).report())
	if err != nil {
		return
	}
	_ = rpc.SetTrailer(ctx, metadata.Pairs(trailerKey, string(b)))
}
