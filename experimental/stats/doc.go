// Package stats holds Metrics, a set of metric names, as gRPC-go's
// experimental/stats does: stats/opentelemetry's MetricsOptions.Metrics
// says which metrics to record with it.
package stats
