package main

import (
	"context"
	"errors"
	"io"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	rdmarpcotel "github.com/rdmarpc/rdmarpc/contrib/otel"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// otelInterval is how often --otel writes the metrics; they are written
// once more at shutdown.
const otelInterval = 30 * time.Second

// withOTel returns the server option that traces and measures every call
// with OpenTelemetry, writing spans (as they end, in batches) and metrics
// (every otelInterval) to w as JSON, and the shutdown that flushes both.
func withOTel(w io.Writer) (rpc.ServerOption, func(context.Context) error, error) {
	spans, err := stdouttrace.New(stdouttrace.WithWriter(w))
	if err != nil {
		return nil, nil, err
	}
	metrics, err := stdoutmetric.New(stdoutmetric.WithWriter(w))
	if err != nil {
		return nil, nil, err
	}
	res := resource.NewSchemaless(attribute.String("service.name", "kvserver"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(metrics, sdkmetric.WithInterval(otelInterval))))
	h := rdmarpcotel.NewServerHandler(rdmarpcotel.WithTracerProvider(tp), rdmarpcotel.WithMeterProvider(mp))
	shutdown := func(ctx context.Context) error { return errors.Join(tp.Shutdown(ctx), mp.Shutdown(ctx)) }
	return rpc.StatsHandler(h), shutdown, nil
}
