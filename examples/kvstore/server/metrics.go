package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	rpcprom "github.com/rdmarpc/rdmarpc/contrib/prometheus"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/transport"
)

// metrics are the server's Prometheus metrics, in a registry of its own:
// the RPC metrics of contrib/prometheus (go-grpc-prometheus's names) and
// the transports' counters, set as stats handlers when the metrics are
// served (Config.MetricsAddr), and the store's own.
//
//	grpc_server_started_total{grpc_type,grpc_service,grpc_method}
//	grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}
//	grpc_server_handling_seconds{grpc_type,grpc_service,grpc_method}
//	grpc_server_msg_received_total, grpc_server_msg_sent_total
//	rdmarpc_transport_<counter>_total{scheme}   the counters of transports
//	                                            that keep some (transport.Counters)
//	kvstore_listener_info{target,scheme}        1 per listener
//	kvstore_store_writable                      1 while the store takes writes,
//	                                            0 while it refuses them (full
//	                                            disk, storage failure)
//
// plus the Go runtime and process collectors. Calls refused by the RPC layer
// before any handler (unknown method, oversized request) are not counted.
type metrics struct {
	reg        *prometheus.Registry
	rpc        *rpcprom.ServerMetrics
	transports *rpcprom.TransportMetrics
	listeners  *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		rpc: rpcprom.NewServerMetrics(rpcprom.Options{
			// 10 µs to about 5 s: RDMA reads at the bottom, fsyncs in the middle.
			Buckets: prometheus.ExponentialBuckets(10e-6, 2.5, 15),
		}),
		transports: rpcprom.NewTransportMetrics(),
		listeners: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kvstore_listener_info",
			Help: "One series per listener: the target served and its transport's scheme.",
		}, []string{"target", "scheme"}),
	}
	m.reg.MustRegister(m.rpc, m.transports, m.listeners,
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

// listening records a listener, and its transport's counters if it keeps
// some (from the start, before any connection tells the stats handler of
// them). Several listeners of one transport share its counters.
func (m *metrics) listening(target, scheme string, t transport.Transport) {
	m.listeners.WithLabelValues(target, scheme).Set(1)
	if c, ok := t.(transport.Counters); ok {
		m.transports.Add(scheme, c)
	}
}
