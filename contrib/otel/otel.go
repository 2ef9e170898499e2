package otel

import (
	"context"
	"net"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/rdmarpc/rdmarpc/contrib/otel"

// System is the rpc.system attribute's value.
const System = "rdmarpc"

// Option configures a handler.
type Option func(*config)

type config struct {
	tp   trace.TracerProvider
	mp   metric.MeterProvider
	prop propagation.TextMapPropagator
}

// WithTracerProvider sets where spans go. Default otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets where measurements go. Default
// otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagators sets how span contexts travel in metadata. Default W3C
// trace-context and baggage.
func WithPropagators(p propagation.TextMapPropagator) Option { return func(c *config) { c.prop = p } }

// NewServerHandler returns a stats.Handler that traces and measures a
// server's RPCs.
func NewServerHandler(opts ...Option) stats.Handler { return newHandler(false, opts) }

// NewClientHandler returns a stats.Handler that traces and measures a
// client's RPCs.
func NewClientHandler(opts ...Option) stats.Handler { return newHandler(true, opts) }

type handler struct {
	client bool
	tracer trace.Tracer
	prop   propagation.TextMapPropagator

	duration           metric.Float64Histogram
	reqSize, respSize  metric.Int64Histogram
	reqPerRPC, respPer metric.Int64Histogram
}

func newHandler(client bool, opts []Option) *handler {
	c := config{tp: otel.GetTracerProvider(), mp: otel.GetMeterProvider(),
		prop: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})}
	for _, o := range opts {
		o(&c)
	}
	h := &handler{client: client, tracer: c.tp.Tracer(ScopeName), prop: c.prop}
	m := c.mp.Meter(ScopeName)
	// Instruments that fail to be made are no-ops: the meter reports the
	// error to otel's error handler, and measuring must never fail a call.
	if client {
		h.duration, _ = m.Float64Histogram(semconv.RPCClientDurationName, metric.WithUnit(semconv.RPCClientDurationUnit), metric.WithDescription(semconv.RPCClientDurationDescription))
		h.reqSize, _ = m.Int64Histogram(semconv.RPCClientRequestSizeName, metric.WithUnit(semconv.RPCClientRequestSizeUnit), metric.WithDescription(semconv.RPCClientRequestSizeDescription))
		h.respSize, _ = m.Int64Histogram(semconv.RPCClientResponseSizeName, metric.WithUnit(semconv.RPCClientResponseSizeUnit), metric.WithDescription(semconv.RPCClientResponseSizeDescription))
		h.reqPerRPC, _ = m.Int64Histogram(semconv.RPCClientRequestsPerRPCName, metric.WithUnit(semconv.RPCClientRequestsPerRPCUnit), metric.WithDescription(semconv.RPCClientRequestsPerRPCDescription))
		h.respPer, _ = m.Int64Histogram(semconv.RPCClientResponsesPerRPCName, metric.WithUnit(semconv.RPCClientResponsesPerRPCUnit), metric.WithDescription(semconv.RPCClientResponsesPerRPCDescription))
	} else {
		h.duration, _ = m.Float64Histogram(semconv.RPCServerDurationName, metric.WithUnit(semconv.RPCServerDurationUnit), metric.WithDescription(semconv.RPCServerDurationDescription))
		h.reqSize, _ = m.Int64Histogram(semconv.RPCServerRequestSizeName, metric.WithUnit(semconv.RPCServerRequestSizeUnit), metric.WithDescription(semconv.RPCServerRequestSizeDescription))
		h.respSize, _ = m.Int64Histogram(semconv.RPCServerResponseSizeName, metric.WithUnit(semconv.RPCServerResponseSizeUnit), metric.WithDescription(semconv.RPCServerResponseSizeDescription))
		h.reqPerRPC, _ = m.Int64Histogram(semconv.RPCServerRequestsPerRPCName, metric.WithUnit(semconv.RPCServerRequestsPerRPCUnit), metric.WithDescription(semconv.RPCServerRequestsPerRPCDescription))
		h.respPer, _ = m.Int64Histogram(semconv.RPCServerResponsesPerRPCName, metric.WithUnit(semconv.RPCServerResponsesPerRPCUnit), metric.WithDescription(semconv.RPCServerResponsesPerRPCDescription))
	}
	return h
}

// conn is what TagConn learns of a connection.
type conn struct {
	transport string
	remote    net.Addr
}

type connKey struct{}

// call is one RPC's span and what its metrics need. Its events come from
// the caller's goroutine and the connection's reader: mu orders them.
type call struct {
	span trace.Span

	mu        sync.Mutex
	attrs     []attribute.KeyValue // rpc.system, rpc.service, rpc.method, network.transport
	withConn  bool                 // network.transport is in attrs
	sent, got int64                // messages
}

type callKey struct{}

func (h *handler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &conn{transport: info.Transport, remote: info.RemoteAddr})
}

func (h *handler) HandleConn(context.Context, stats.ConnStats) {}

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
	svc, method, ok := strings.Cut(name, "/")
	attrs := []attribute.KeyValue{semconv.RPCSystemKey.String(System)}
	if ok {
		attrs = append(attrs, semconv.RPCService(svc), semconv.RPCMethod(method))
	}
	c := &call{attrs: attrs}
	kind := trace.SpanKindClient
	if !h.client {
		kind = trace.SpanKindServer
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = h.prop.Extract(ctx, metadataCarrier(md))
		// The server's connection is known now (its values are in ctx).
		c.addConn(ctx)
	}
	ctx, c.span = h.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(c.attrs...))
	if h.client {
		md, _ := metadata.FromOutgoingContext(ctx)
		md = md.Copy()
		h.prop.Inject(ctx, metadataCarrier(md))
		ctx = metadata.NewOutgoingContext(ctx, md)
	}
	return context.WithValue(ctx, callKey{}, c)
}

// addConn adds the connection's attributes, once it is known: the
// transport, and on the client the server's address.
func (c *call) addConn(ctx context.Context) []attribute.KeyValue {
	cn, _ := ctx.Value(connKey{}).(*conn)
	if cn == nil || c.withConn {
		return nil
	}
	c.withConn = true
	kv := []attribute.KeyValue{semconv.NetworkTransportKey.String(cn.transport)}
	c.attrs = append(c.attrs, kv...)
	if cn.remote != nil {
		kv = append(kv, semconv.NetworkPeerAddress(cn.remote.String()))
	}
	return kv
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
	if kv := c.addConn(ctx); kv != nil {
		c.span.SetAttributes(kv...)
	}
	switch s := s.(type) {
	case *stats.InPayload:
		c.got++
		size := h.reqSize
		if h.client {
			size = h.respSize
		}
		size.Record(ctx, int64(s.Length), metric.WithAttributes(c.attrs...))
	case *stats.OutPayload:
		c.sent++
		size := h.respSize
		if h.client {
			size = h.reqSize
		}
		size.Record(ctx, int64(s.Length), metric.WithAttributes(c.attrs...))
	case *stats.End:
		code := status.Code(s.Error)
		c.span.SetAttributes(semconv.RPCGRPCStatusCodeKey.Int(int(code)))
		if h.isError(code) {
			c.span.SetStatus(otelcodes.Error, status.Convert(s.Error).Message())
		}
		c.span.End(trace.WithTimestamp(s.EndTime))
		attrs := metric.WithAttributes(append(c.attrs, semconv.RPCGRPCStatusCodeKey.Int(int(code)))...)
		h.duration.Record(ctx, float64(s.EndTime.Sub(s.BeginTime))/float64(time.Millisecond), attrs)
		requests, responses := c.got, c.sent
		if h.client {
			requests, responses = c.sent, c.got
		}
		h.reqPerRPC.Record(ctx, requests, attrs)
		h.respPer.Record(ctx, responses, attrs)
	}
}

// isError says whether code makes the span an error, as the semantic
// conventions do: every code but OK on the client; on the server only the
// codes that say the server failed (not the caller's mistakes).
func (h *handler) isError(code codes.Code) bool {
	if h.client {
		return code != codes.OK
	}
	switch code {
	case codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss:
		return true
	}
	return false
}
