// Package health serves the gRPC health checking protocol
// (grpc.health.v1.Health: Check, List, Watch) in gRPC-go's shape:
//
//	hs := health.NewServer()
//	grpc_health_v1.RegisterHealthServer(s, hs)
//	hs.SetServingStatus("rdmarpc.kvstore.v1.KV", grpc_health_v1.HealthCheckResponse_SERVING)
//	...
//	hs.Shutdown() // every service NOT_SERVING, e.g. before GracefulStop
//
// Code written against google.golang.org/grpc/health compiles after changing
// the imports to github.com/rdmarpc/rdmarpc/health and
// github.com/rdmarpc/rdmarpc/health/grpc_health_v1.
//
// The empty service name stands for the whole server and starts SERVING.
// Check answers NotFound for a service with no status; Watch answers
// SERVICE_UNKNOWN for it, and the new status once it is set. Watch sends the
// current status at once and then every change, coalesced: a watcher that
// reads slowly gets the latest status when it next reads, never a backlog,
// so a watcher costs one slot however fast the status flips.
//
// # Linking gRPC-go's health package too
//
// grpc_health_v1 registers grpc/health/v1/health.proto and the
// grpc.health.v1 names with protobuf's global registry, as gRPC-go's
// google.golang.org/grpc/health/grpc_health_v1 does. A binary that links both
// (a program moving from gRPC-go to rdmarpc one service at a time, or one that
// serves both) panics at start: protobuf's registration conflict, 'proto:
// file "grpc/health/v1/health.proto" is already registered'. Either use only one of
// the two packages in a binary, or keep gRPC-go's messages and generate only
// the rdmarpc stubs over them, into a package of their own (rdmarpc gen with
// --go-rdmarpc_opt=package_suffix=rdmarpc; the README's "Reusing a published
// message package" shows it for exactly this file), and serve those stubs'
// HealthServer with an implementation of your own. Setting
// GOLANG_PROTOBUF_REGISTRATION_CONFLICT=warn turns the panic into a warning
// and is no fix: the two copies stay distinct Go types.
package health
