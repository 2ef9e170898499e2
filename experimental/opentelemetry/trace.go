package opentelemetry

import (
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceOptions are the tracing options of stats/opentelemetry: spans come
// from TracerProvider, and TextMapPropagator carries their context in the
// calls' metadata. Both must be set for calls to be traced.
type TraceOptions struct {
	TracerProvider    trace.TracerProvider
	TextMapPropagator propagation.TextMapPropagator
}
