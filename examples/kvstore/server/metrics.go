package server

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// metrics are the server's Prometheus metrics, in a registry of its own.
//
//	kvstore_requests_total{method,code}         calls that reached a handler
//	kvstore_request_duration_seconds{method}    their latency, handler included
//	kvstore_listener_info{target,scheme}        1 per listener
//	kvstore_store_writable                      1 while the store takes writes,
//	                                            0 while it refuses them (full
//	                                            disk, storage failure)
//	rdmarpc_transport_<counter>_total{scheme}   the counters of transports
//	                                            that keep some (transport.Counters)
//
// plus the Go runtime and process collectors. Calls refused by the RPC layer
// before any handler (unknown method, oversized request) are not counted.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	listeners *prometheus.GaugeVec
	counters  *transportCounters
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvstore_requests_total",
			Help: "KV calls handled, by method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kvstore_request_duration_seconds",
			Help: "Time spent handling KV calls (interceptors and handler), by method.",
			// 10 µs to about 5 s: RDMA reads at the bottom, fsyncs in the middle.
			Buckets: prometheus.ExponentialBuckets(10e-6, 2.5, 15),
		}, []string{"method"}),
		listeners: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvstore_listener_info",
			Help: "One series per listener: the target served and its transport's scheme.",
		}, []string{"target", "scheme"}),
		counters: &transportCounters{},
	}
	m.reg.MustRegister(m.requests, m.latency, m.listeners, m.counters,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// storeWritable exports whether st takes writes.
func (m *metrics) storeWritable(st *store.Store) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kvstore_store_writable",
		Help: "1 while the store takes writes, 0 while it refuses them (disk full, storage failed).",
	}, func() float64 {
		if st.Writable() != nil {
			return 0
		}
		return 1
	}))
}

// interceptor counts and times every call.
func (m *metrics) interceptor(ctx context.Context, req any, info *rpc.UnaryServerInfo, handler rpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
	m.latency.WithLabelValues(method).Observe(time.Since(start).Seconds())
	m.requests.WithLabelValues(method, status.Code(err).String()).Inc()
	return resp, err
}

// listening records a listener, and its transport's counters if it keeps
// some. Several listeners of one transport share its counters.
func (m *metrics) listening(target, scheme string, t transport.Transport) {
	m.listeners.WithLabelValues(target, scheme).Set(1)
	if c, ok := t.(transport.Counters); ok {
		m.counters.add(scheme, c)
	}
}

// transportCounters exports transport.Counters, whose names are only known
// when read: an unchecked collector (Describe sends nothing).
type transportCounters struct {
	schemes []string
	sources []transport.Counters
}

func (tc *transportCounters) add(scheme string, c transport.Counters) {
	for _, s := range tc.schemes {
		if s == scheme {
			return
		}
	}
	tc.schemes = append(tc.schemes, scheme)
	tc.sources = append(tc.sources, c)
}

func (tc *transportCounters) Describe(chan<- *prometheus.Desc) {}

var notMetricChars = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

func (tc *transportCounters) Collect(ch chan<- prometheus.Metric) {
	for i, src := range tc.sources {
		counts := src.Counters()
		names := make([]string, 0, len(counts))
		for n := range counts {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			name := "rdmarpc_transport_" + strings.TrimSuffix(notMetricChars.ReplaceAllString(n, "_"), "_total") + "_total"
			desc := prometheus.NewDesc(name, "Transport counter "+n+".", []string{"scheme"}, nil)
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(counts[n]), tc.schemes[i])
		}
	}
}
