package prometheus

import (
	"context"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/status"
)

// Options configure ServerMetrics and ClientMetrics.
type Options struct {
	// Buckets of the handling-time histogram, in seconds. Default
	// prometheus.DefBuckets, as go-grpc-prometheus's.
	Buckets []float64
	// ConstLabels are added to every metric.
	ConstLabels prom.Labels
	// MaxMethods bounds the methods counted under their own names
	// (default 1024); the calls of methods past it are counted with
	// grpc_service and grpc_method "unknown". A server reports no call to
	// a method it does not serve, so only a program that calls or serves
	// more methods than that needs to raise it.
	MaxMethods int
}

var labels = []string{"grpc_type", "grpc_service", "grpc_method"}

// metrics are one side's metrics; ServerMetrics and ClientMetrics name
// them.
type metrics struct {
	started, handled, received, sent *prom.CounterVec
	handling                         *prom.HistogramVec
	client                           bool
	methods                          *methods
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
		client:  side == "client",
		methods: newMethods(o.MaxMethods),
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

// call is one RPC's context: its parent's values, and the series the
// handler that tagged it counts the RPC in. It is the one allocation a
// call costs the metrics.
type call struct {
	context.Context
	key    callKey
	method string  // full
	series *series // from Begin on
}

// callKey finds a handler's own call in a context that several handlers
// (two ServerMetrics with their own registries, say) tagged.
type callKey struct{ m *metrics }

func (c *call) Value(key any) any {
	if key == any(c.key) {
		return c
	}
	return c.Context.Value(key)
}

func (m *metrics) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	// The method is looked up at Begin: a handler set on both sides (as
	// ServerMetrics on a client) counts only its own side's calls.
	return &call{Context: ctx, key: callKey{m}, method: info.FullMethodName}
}

func (m *metrics) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if s.IsClient() != m.client {
		return // the other side's handler, set on both
	}
	c, _ := ctx.Value(callKey{m}).(*call)
	if c == nil {
		return
	}
	if b, ok := s.(*stats.Begin); ok {
		c.series = m.seriesOf(m.methods.get(c.method), rpcTypeOf(b))
		c.series.started.Inc()
		return
	}
	if c.series == nil {
		return // events without a Begin: nothing to count them under
	}
	switch s := s.(type) {
	case *stats.InPayload:
		c.series.received.Inc()
	case *stats.OutPayload:
		c.series.sent.Inc()
	case *stats.End:
		c.series.handledOf(m, status.Code(s.Error)).Inc()
		c.series.handlingOf(m).Observe(s.EndTime.Sub(s.BeginTime).Seconds())
	}
}

func (m *metrics) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (m *metrics) HandleConn(context.Context, stats.ConnStats)                       {}

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
