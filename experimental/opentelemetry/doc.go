// Package opentelemetry holds TraceOptions, how stats/opentelemetry traces
// calls, at the path gRPC-go has it (google.golang.org/grpc/experimental/
// opentelemetry), so that a program ported by rdmarpc's import rule
// compiles. It is a module of its own: the library does not require
// OpenTelemetry.
package opentelemetry
