package orca

import (
	"maps"
	"sync"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
)

// ServerMetrics is a snapshot of a server's (or a call's) metrics. The
// single values are -1 when unset; the maps hold what was set.
type ServerMetrics struct {
	CPUUtilization float64 // CPU use, normalized: 0 to 1 per CPU
	MemUtilization float64 // memory use, 0 to 1
	AppUtilization float64 // the application's own utilization measure, >= 0
	QPS            float64 // queries per second, >= 0
	EPS            float64 // errors per second, >= 0

	Utilization  map[string]float64 // named utilizations, 0 to 1
	RequestCost  map[string]float64 // named costs of the call (per-call only)
	NamedMetrics map[string]float64 // any other named metrics
}

// ServerMetricsProvider gives the server's current metrics.
type ServerMetricsProvider interface {
	ServerMetrics() *ServerMetrics
}

// ServerMetricsRecorder records a server's metrics: values that are out of
// range are ignored, as in gRPC-go.
type ServerMetricsRecorder interface {
	ServerMetricsProvider
	SetCPUUtilization(float64)
	DeleteCPUUtilization()
	SetMemoryUtilization(float64)
	DeleteMemoryUtilization()
	SetApplicationUtilization(float64)
	DeleteApplicationUtilization()
	SetQPS(float64)
	DeleteQPS()
	SetEPS(float64)
	DeleteEPS()
	SetNamedUtilization(name string, val float64)
	DeleteNamedUtilization(name string)
}

// CallMetricsRecorder records the metrics of one call, sent in its
// trailer.
type CallMetricsRecorder interface {
	ServerMetricsRecorder
	SetRequestCost(name string, val float64)
	DeleteRequestCost(name string)
	SetNamedMetric(name string, val float64)
	DeleteNamedMetric(name string)
}

// recorder is both recorders.
type recorder struct {
	mu sync.Mutex
	m  ServerMetrics
}

// NewServerMetricsRecorder returns a recorder with nothing set.
func NewServerMetricsRecorder() ServerMetricsRecorder { return newRecorder() }

func newRecorder() *recorder {
	return &recorder{m: ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: -1, EPS: -1,
		Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: map[string]float64{}}}
}

// ServerMetrics returns a copy of what is recorded.
func (r *recorder) ServerMetrics() *ServerMetrics {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m
	m.Utilization, m.RequestCost, m.NamedMetrics = maps.Clone(m.Utilization), maps.Clone(m.RequestCost), maps.Clone(m.NamedMetrics)
	return &m
}

func (r *recorder) set(f *float64, v float64, ok bool) {
	if !ok {
		return
	}
	r.mu.Lock()
	*f = v
	r.mu.Unlock()
}

func (r *recorder) setIn(m map[string]float64, name string, v float64, ok bool) {
	if !ok {
		return
	}
	r.mu.Lock()
	m[name] = v
	r.mu.Unlock()
}

func (r *recorder) deleteIn(m map[string]float64, name string) {
	r.mu.Lock()
	delete(m, name)
	r.mu.Unlock()
}

func (r *recorder) SetCPUUtilization(v float64)         { r.set(&r.m.CPUUtilization, v, v >= 0) }
func (r *recorder) DeleteCPUUtilization()               { r.set(&r.m.CPUUtilization, -1, true) }
func (r *recorder) SetMemoryUtilization(v float64)      { r.set(&r.m.MemUtilization, v, v >= 0 && v <= 1) }
func (r *recorder) DeleteMemoryUtilization()            { r.set(&r.m.MemUtilization, -1, true) }
func (r *recorder) SetApplicationUtilization(v float64) { r.set(&r.m.AppUtilization, v, v >= 0) }
func (r *recorder) DeleteApplicationUtilization()       { r.set(&r.m.AppUtilization, -1, true) }
func (r *recorder) SetQPS(v float64)                    { r.set(&r.m.QPS, v, v >= 0) }
func (r *recorder) DeleteQPS()                          { r.set(&r.m.QPS, -1, true) }
func (r *recorder) SetEPS(v float64)                    { r.set(&r.m.EPS, v, v >= 0) }
func (r *recorder) DeleteEPS()                          { r.set(&r.m.EPS, -1, true) }
func (r *recorder) SetNamedUtilization(name string, v float64) {
	r.setIn(r.m.Utilization, name, v, v >= 0 && v <= 1)
}
func (r *recorder) DeleteNamedUtilization(name string)    { r.deleteIn(r.m.Utilization, name) }
func (r *recorder) SetRequestCost(name string, v float64) { r.setIn(r.m.RequestCost, name, v, true) }
func (r *recorder) DeleteRequestCost(name string)         { r.deleteIn(r.m.RequestCost, name) }
func (r *recorder) SetNamedMetric(name string, v float64) { r.setIn(r.m.NamedMetrics, name, v, true) }
func (r *recorder) DeleteNamedMetric(name string)         { r.deleteIn(r.m.NamedMetrics, name) }

// report is m as ORCA's load report: unset values are left out (zero).
func (m *ServerMetrics) report() *v3orcapb.OrcaLoadReport {
	pos := func(v float64) float64 { return max(v, 0) }
	return &v3orcapb.OrcaLoadReport{
		CpuUtilization:         pos(m.CPUUtilization),
		MemUtilization:         pos(m.MemUtilization),
		ApplicationUtilization: pos(m.AppUtilization),
		RpsFractional:          pos(m.QPS),
		Eps:                    pos(m.EPS),
		Utilization:            m.Utilization,
		RequestCost:            m.RequestCost,
		NamedMetrics:           m.NamedMetrics,
	}
}

// merge is the call's metrics over the server's: what the call set wins.
func merge(server, call *ServerMetrics) *ServerMetrics {
	if server == nil {
		return call
	}
	out := *server
	for _, p := range []struct {
		dst *float64
		v   float64
	}{
		{&out.CPUUtilization, call.CPUUtilization}, {&out.MemUtilization, call.MemUtilization},
		{&out.AppUtilization, call.AppUtilization}, {&out.QPS, call.QPS}, {&out.EPS, call.EPS},
	} {
		if p.v >= 0 {
			*p.dst = p.v
		}
	}
	out.Utilization = mergeMaps(server.Utilization, call.Utilization)
	out.RequestCost = mergeMaps(server.RequestCost, call.RequestCost)
	out.NamedMetrics = mergeMaps(server.NamedMetrics, call.NamedMetrics)
	return &out
}

func mergeMaps(a, b map[string]float64) map[string]float64 {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]float64{}
	}
	maps.Copy(out, b)
	return out
}
