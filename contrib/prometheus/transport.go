package prometheus

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"sync"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/rdmarpc/rdmarpc/stats"
	"github.com/rdmarpc/rdmarpc/transport"
)

// TransportMetrics exports the counters of the transports that connections
// are made with, one series per counter and scheme, and their gauges
// (transport.Gauges: levels such as registered memory) likewise:
//
//	rdmarpc_transport_<counter>_total{scheme}
//	rdmarpc_transport_<gauge>{scheme}
//
// It is a stats.Handler that learns the transports from the connections it
// is told about (stats.ConnTagInfo.Counters), for rpc.StatsHandler and
// rpc.WithStatsHandler alike; Add names one before any connection. A
// transport is exported once however many connections, servers and clients
// use it. The counters' names are only known when read, so it is an
// unchecked collector.
type TransportMetrics struct {
	mu      sync.Mutex
	schemes []string
	sources []transport.Counters
}

// NewTransportMetrics returns transport metrics, to register.
func NewTransportMetrics() *TransportMetrics { return &TransportMetrics{} }

// Add exports c's counters under scheme, unless a transport of that scheme
// is exported already.
func (t *TransportMetrics) Add(scheme string, c transport.Counters) {
	if c == nil {
		return
	}
	if scheme == "" {
		scheme = "unknown"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.schemes {
		if s == scheme {
			return
		}
	}
	t.schemes = append(t.schemes, scheme)
	t.sources = append(t.sources, c)
}

func (t *TransportMetrics) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	t.Add(info.Transport, info.Counters)
	return ctx
}

func (t *TransportMetrics) HandleConn(context.Context, stats.ConnStats) {}
func (t *TransportMetrics) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	return ctx
}
func (t *TransportMetrics) HandleRPC(context.Context, stats.RPCStats) {}

// Describe sends nothing: the collector is unchecked.
func (t *TransportMetrics) Describe(chan<- *prom.Desc) {}

var notMetricChars = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

// metricName is the series name of transport counter n.
func metricName(n string) string {
	return "rdmarpc_transport_" + strings.TrimSuffix(notMetricChars.ReplaceAllString(n, "_"), "_total") + "_total"
}

// gaugeName is the series name of transport gauge n.
func gaugeName(n string) string {
	return "rdmarpc_transport_" + notMetricChars.ReplaceAllString(n, "_")
}

func (t *TransportMetrics) Collect(ch chan<- prom.Metric) {
	t.mu.Lock()
	schemes, sources := t.schemes, t.sources
	t.mu.Unlock()
	for i, src := range sources {
		counts := src.Counters()
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			desc := prom.NewDesc(metricName(n), "Transport counter "+n+".", []string{"scheme"}, nil)
			ch <- prom.MustNewConstMetric(desc, prom.CounterValue, float64(counts[n]), schemes[i])
		}
		if g, ok := src.(transport.Gauges); ok {
			levels := g.Gauges()
			names = names[:0]
			for n := range levels {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				desc := prom.NewDesc(gaugeName(n), "Transport level "+n+".", []string{"scheme"}, nil)
				ch <- prom.MustNewConstMetric(desc, prom.GaugeValue, float64(levels[n]), schemes[i])
			}
		}
	}
}
