package prometheus

import (
	"context"
	"strings"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/rdmarpc/rdmarpc/rpc/status"
	"github.com/rdmarpc/rdmarpc/stats"
)

// Options configure ServerMetrics and ClientMetrics.
type Options struct {
	// Buckets of the handling-time histogram, in seconds. Default
	// prometheus.DefBuckets, as go-grpc-prometheus's.
	Buckets []float64
	// ConstLabels are added to every metric.
	ConstLabels prom.Labels
}

var labels = []string{"grpc_type", "grpc_service", "grpc_method"}

// metrics are one side's metrics; ServerMetrics and ClientMetrics name
// them.
type metrics struct {
	started, handled, received, sent *prom.CounterVec
	handling                         *prom.HistogramVec
	client                           bool
}

func newMetrics(side string, o Options, help [5]string) *metrics {
	buckets := o.Buckets
	if buckets == nil {
		buckets = prom.DefBuckets
	}
	counter := func(name, help string, l []string) *prom.CounterVec {
		return prom.NewCounterVec(prom.CounterOpts{Name: "grpc_" + side + "_" + name, Help: help, ConstLabels: o.ConstLabels}, l)
	}
	return &metrics{
		started:  counter("started_total", help[0], labels),
		handled:  counter("handled_total", help[1], append(labels[:3:3], "grpc_code")),
		received: counter("msg_received_total", help[2], labels),
		sent:     counter("msg_sent_total", help[3], labels),
		handling: prom.NewHistogramVec(prom.HistogramOpts{
			Name: "grpc_" + side + "_handling_seconds", Help: help[4], Buckets: buckets, ConstLabels: o.ConstLabels,
		}, labels),
		client: side == "client",
	}
}

func (m *metrics) Describe(ch chan<- *prom.Desc) {
	m.started.Describe(ch)
	m.handled.Describe(ch)
	m.received.Describe(ch)
	m.sent.Describe(ch)
	m.handling.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prom.Metric) {
	m.started.Collect(ch)
	m.handled.Collect(ch)
	m.received.Collect(ch)
	m.sent.Collect(ch)
	m.handling.Collect(ch)
}

// call is one RPC's series, resolved at its Begin.
type call struct {
	service, method string
	typ             string
	received, sent  prom.Counter
}

type callKey struct{}

func (m *metrics) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	svc, method := split(info.FullMethodName)
	return context.WithValue(ctx, callKey{}, &call{service: svc, method: method})
}

func (m *metrics) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if s.IsClient() != m.client {
		return // the other side's handler, set on both
	}
	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		c.typ = rpcType(s)
		m.started.WithLabelValues(c.typ, c.service, c.method).Inc()
		c.received = m.received.WithLabelValues(c.typ, c.service, c.method)
		c.sent = m.sent.WithLabelValues(c.typ, c.service, c.method)
	case *stats.InPayload:
		c.received.Inc()
	case *stats.OutPayload:
		c.sent.Inc()
	case *stats.End:
		m.handled.WithLabelValues(c.typ, c.service, c.method, status.Code(s.Error).String()).Inc()
		m.handling.WithLabelValues(c.typ, c.service, c.method).Observe(s.EndTime.Sub(s.BeginTime).Seconds())
	}
}

func (m *metrics) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (m *metrics) HandleConn(context.Context, stats.ConnStats)                       {}

func rpcType(b *stats.Begin) string {
	switch {
	case b.IsClientStream && b.IsServerStream:
		return "bidi_stream"
	case b.IsClientStream:
		return "client_stream"
	case b.IsServerStream:
		return "server_stream"
	}
	return "unary"
}

// split cuts "/pkg.Service/Method" into its service and method, as
// go-grpc-prometheus does ("unknown" for a name of another shape).
func split(full string) (string, string) {
	svc, m, ok := strings.Cut(strings.TrimPrefix(full, "/"), "/")
	if !ok {
		return "unknown", "unknown"
	}
	return svc, m
}

// ServerMetrics are a server's metrics: a stats.Handler for
// rpc.StatsHandler and a prometheus.Collector.
type ServerMetrics struct{ *metrics }

// NewServerMetrics returns a server's metrics, to register.
func NewServerMetrics(o Options) *ServerMetrics {
	return &ServerMetrics{newMetrics("server", o, [5]string{
		"Total number of RPCs started on the server.",
		"Total number of RPCs completed on the server, regardless of success or failure.",
		"Total number of RPC stream messages received on the server.",
		"Total number of gRPC stream messages sent by the server.",
		"Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
	})}
}

// ClientMetrics are a client's metrics: a stats.Handler for
// rpc.WithStatsHandler and a prometheus.Collector.
type ClientMetrics struct{ *metrics }

// NewClientMetrics returns a client's metrics, to register.
func NewClientMetrics(o Options) *ClientMetrics {
	return &ClientMetrics{newMetrics("client", o, [5]string{
		"Total number of RPCs started on the client.",
		"Total number of RPCs completed by the client, regardless of success or failure.",
		"Total number of RPC stream messages received by the client.",
		"Total number of gRPC stream messages sent by the client.",
		"Histogram of response latency (seconds) of the gRPC until it is finished by the application.",
	})}
}

var (
	_ stats.Handler  = (*ServerMetrics)(nil)
	_ prom.Collector = (*ClientMetrics)(nil)
)
