package opentelemetry

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/rdmarpc/rdmarpc/codes"
	estats "github.com/rdmarpc/rdmarpc/experimental/stats"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"

	otelexp "github.com/rdmarpc/rdmarpc/experimental/opentelemetry"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/rdmarpc/rdmarpc/stats/opentelemetry"

// The metrics' names (gRFC A66).
const (
	clientAttemptStarted  = "grpc.client.attempt.started"
	clientAttemptDuration = "grpc.client.attempt.duration"
	clientAttemptSent     = "grpc.client.attempt.sent_total_compressed_message_size"
	clientAttemptRcvd     = "grpc.client.attempt.rcvd_total_compressed_message_size"
	clientCallDuration    = "grpc.client.call.duration"
	serverCallStarted     = "grpc.server.call.started"
	serverCallDuration    = "grpc.server.call.duration"
	serverCallSent        = "grpc.server.call.sent_total_compressed_message_size"
	serverCallRcvd        = "grpc.server.call.rcvd_total_compressed_message_size"
)

// DefaultMetrics returns the per-call metrics above, the ones recorded
// when MetricsOptions.Metrics is nil.
func DefaultMetrics() *estats.Metrics {
	return estats.NewMetrics(clientAttemptStarted, clientAttemptDuration, clientAttemptSent, clientAttemptRcvd,
		clientCallDuration, serverCallStarted, serverCallDuration, serverCallSent, serverCallRcvd)
}

// Options say what to record and where.
type Options struct {
	MetricsOptions MetricsOptions
	TraceOptions   otelexp.TraceOptions
}

// MetricsOptions say which metrics to record and with what meter.
type MetricsOptions struct {
	// MeterProvider makes the meter; nil: no metrics.
	MeterProvider metric.MeterProvider
	// Metrics are the names to record; nil: DefaultMetrics.
	Metrics *estats.Metrics
	// MethodAttributeFilter, when set, says which methods' names go in
	// grpc.method; the others are "other".
	MethodAttributeFilter func(method string) bool
	// OptionalLabels is taken for gRPC-go's sake; rdmarpc has none of
	// the labels it may name.
	OptionalLabels []string
}

// DialOption records the client's calls as o says.
func DialOption(o Options) rpc.DialOption { return rpc.WithStatsHandler(newHandler(true, o)) }

// ServerOption records the server's calls as o says.
func ServerOption(o Options) rpc.ServerOption { return rpc.StatsHandler(newHandler(false, o)) }

type handler struct {
	client bool
	filter func(string) bool

	started                       metric.Int64Counter     // nil: not recorded
	attemptDuration, callDuration metric.Float64Histogram // nil: not recorded
	sent, rcvd                    metric.Int64Histogram   // nil: not recorded

	tracer trace.Tracer // nil: no spans
	prop   propagation.TextMapPropagator
}

func newHandler(client bool, o Options) *handler {
	h := &handler{client: client, filter: o.MetricsOptions.MethodAttributeFilter}
	if mp := o.MetricsOptions.MeterProvider; mp != nil {
		set := o.MetricsOptions.Metrics
		if set == nil {
			set = DefaultMetrics()
		}
		m := mp.Meter(ScopeName)
		// A metric the set names but the meter refuses is not recorded.
		counter := func(name, desc, unit string) metric.Int64Counter {
			if !set.Has(name) {
				return nil
			}
			c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
			if err != nil {
				return nil
			}
			return c
		}
		seconds := func(name, desc string) metric.Float64Histogram {
			if !set.Has(name) {
				return nil
			}
			c, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"))
			if err != nil {
				return nil
			}
			return c
		}
		bytes := func(name, desc string) metric.Int64Histogram {
			if !set.Has(name) {
				return nil
			}
			c, err := m.Int64Histogram(name, metric.WithDescription(desc), metric.WithUnit("By"))
			if err != nil {
				return nil
			}
			return c
		}
		if client {
			h.started = counter(clientAttemptStarted, "Number of client call attempts started.", "{attempt}")
			h.attemptDuration = seconds(clientAttemptDuration, "End-to-end time taken to complete a client call attempt.")
			h.callDuration = seconds(clientCallDuration, "Time taken by gRPC to complete an RPC from application's perspective.")
			h.sent = bytes(clientAttemptSent, "Compressed message bytes sent per client call attempt.")
			h.rcvd = bytes(clientAttemptRcvd, "Compressed message bytes received per call attempt.")
		} else {
			h.started = counter(serverCallStarted, "Number of server calls started.", "{call}")
			h.callDuration = seconds(serverCallDuration, "End-to-end time taken to complete a call from server transport's perspective.")
			h.sent = bytes(serverCallSent, "Compressed message bytes sent per server call.")
			h.rcvd = bytes(serverCallRcvd, "Compressed message bytes received per server call.")
		}
	}
	if to := o.TraceOptions; to.TracerProvider != nil && to.TextMapPropagator != nil {
		h.tracer, h.prop = to.TracerProvider.Tracer(ScopeName), to.TextMapPropagator
	}
	return h
}

// call is one call's state, from TagRPC to End.
type call struct {
	method     attribute.KeyValue
	span       trace.Span // nil without tracing
	mu         sync.Mutex
	sent, rcvd int64 // compressed message bytes
	seqOut     int64
	seqIn      int64
}

type callKey struct{}

// metadataCarrier lets a propagator read and write rdmarpc metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

func (h *handler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	name := strings.TrimPrefix(info.FullMethodName, "/")
	method := name
	if h.filter != nil && !h.filter(info.FullMethodName) {
		method = "other"
	}
	c := &call{method: attribute.String("grpc.method", method)}
	if h.tracer != nil {
		if h.client {
			ctx, c.span = h.tracer.Start(ctx, "Sent."+name, trace.WithSpanKind(trace.SpanKindClient))
			md, _ := metadata.FromOutgoingContext(ctx)
			md = md.Copy()
			h.prop.Inject(ctx, metadataCarrier(md))
			ctx = metadata.NewOutgoingContext(ctx, md)
		} else {
			md, _ := metadata.FromIncomingContext(ctx)
			ctx = h.prop.Extract(ctx, metadataCarrier(md))
			ctx, c.span = h.tracer.Start(ctx, "Recv."+name, trace.WithSpanKind(trace.SpanKindServer))
		}
	}
	return context.WithValue(ctx, callKey{}, c)
}

func (h *handler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if s.IsClient() != h.client {
		return
	}
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch s := s.(type) {
	case *stats.Begin:
		if h.started != nil {
			h.started.Add(ctx, 1, metric.WithAttributes(c.method))
		}
	case *stats.OutPayload:
		n := compressed(s.CompressedLength, s.Length)
		c.sent += n
		if c.span != nil {
			c.span.AddEvent("Outbound message", trace.WithAttributes(attribute.Int64("sequence-number", c.seqOut),
				attribute.Int("message-size", s.Length), attribute.Int64("message-size-compressed", n)))
		}
		c.seqOut++
	case *stats.InPayload:
		n := compressed(s.CompressedLength, s.Length)
		c.rcvd += n
		if c.span != nil {
			c.span.AddEvent("Inbound message", trace.WithAttributes(attribute.Int64("sequence-number", c.seqIn),
				attribute.Int("message-size", s.Length), attribute.Int64("message-size-compressed", n)))
		}
		c.seqIn++
	case *stats.End:
		code := status.Code(s.Error)
		attrs := metric.WithAttributes(c.method, attribute.String("grpc.status", codeName(code)))
		d := s.EndTime.Sub(s.BeginTime).Seconds()
		if h.attemptDuration != nil {
			h.attemptDuration.Record(ctx, d, attrs)
		}
		if h.callDuration != nil {
			h.callDuration.Record(ctx, d, attrs)
		}
		if h.sent != nil {
			h.sent.Record(ctx, c.sent, attrs)
		}
		if h.rcvd != nil {
			h.rcvd.Record(ctx, c.rcvd, attrs)
		}
		if c.span != nil {
			if code != codes.OK {
				c.span.SetStatus(otelcodes.Error, status.Convert(s.Error).Message())
			}
			c.span.End(trace.WithTimestamp(endTime(s.EndTime)))
		}
	}
}

func (h *handler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (h *handler) HandleConn(context.Context, stats.ConnStats)                       {}

// compressed is a message's size on the wire: its compressed length when
// it was compressed, else its length.
func compressed(compressedLen, length int) int64 {
	if compressedLen > 0 {
		return int64(compressedLen)
	}
	return int64(length)
}

// codeNames are gRPC's names of the codes, as A66's grpc.status has them.
var codeNames = [...]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

func codeName(code codes.Code) string {
	if int(code) < len(codeNames) {
		return codeNames[code]
	}
	return code.String()
}

func endTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}
