// Package grpclog is gRPC-go's grpclog in its shape, for programs ported
// from it: Info, Warning, Error and Fatal (each with its f and ln forms)
// and V go to the logger SetLoggerV2 installed. By default, as gRPC-go's,
// that logger writes ERROR and FATAL lines to stderr and drops the rest,
// unless GRPC_GO_LOG_SEVERITY_LEVEL (info, warning, error) and
// GRPC_GO_LOG_VERBOSITY_LEVEL say otherwise; NewZapLogger routes every
// line to a *zap.Logger instead.
//
// rdmarpc's own packages never log here: they log through the *zap.Logger
// given to them (rpc.Logger, rpc.WithLogger). This package must not know
// about connections or calls.
package grpclog
