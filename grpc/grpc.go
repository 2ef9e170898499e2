package grpc

import (
	"context"

	"github.com/rdmarpc/rdmarpc/keepalive"
	"github.com/rdmarpc/rdmarpc/peer"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// Versions of gRPC-go's generated code (protoc-gen-go-grpc) that compile
// against this package: version 7 uses ClientConnInterface and
// ServiceRegistrar, 8 StaticMethod, 9 the generic stream types.
const (
	SupportPackageIsVersion7 = true
	SupportPackageIsVersion8 = true
	SupportPackageIsVersion9 = true
)

// Constants of package rpc.
const (
	SupportPackageIsVersion1   = rpc.SupportPackageIsVersion1
	SupportPackageIsVersion2   = rpc.SupportPackageIsVersion2
	DefaultMaxRecvMsgSize      = rpc.DefaultMaxRecvMsgSize
	DefaultMaxSendMsgSize      = rpc.DefaultMaxSendMsgSize
	DefaultServerKeepaliveTime = rpc.DefaultServerKeepaliveTime
	Version                    = rpc.Version
)

// ErrServerStopped is rpc.ErrServerStopped.
var ErrServerStopped = rpc.ErrServerStopped

// The types of package rpc, under the same names.
type (
	CallOption              = rpc.CallOption
	ClientConn              = rpc.ClientConn
	ClientConnInterface     = rpc.ClientConnInterface
	ClientStream            = rpc.ClientStream
	Codec                   = rpc.Codec
	ConnectParams           = rpc.ConnectParams
	DialOption              = rpc.DialOption
	EmptyCallOption         = rpc.EmptyCallOption
	EmptyServerOption       = rpc.EmptyServerOption
	Keepalive               = rpc.Keepalive
	LendingCodec            = rpc.LendingCodec
	ListenOption            = rpc.ListenOption
	Listener                = rpc.Listener
	MethodConfig            = rpc.MethodConfig
	MethodDesc              = rpc.MethodDesc
	MethodHandler           = rpc.MethodHandler
	MethodInfo              = rpc.MethodInfo
	PerRPCCredsCallOption   = rpc.PerRPCCredsCallOption
	ProtoCodec              = rpc.ProtoCodec
	RetryPolicy             = rpc.RetryPolicy
	Server                  = rpc.Server
	ServerOption            = rpc.ServerOption
	ServerStream            = rpc.ServerStream
	ServiceDesc             = rpc.ServiceDesc
	ServiceInfo             = rpc.ServiceInfo
	ServiceRegistrar        = rpc.ServiceRegistrar
	SizedCodec              = rpc.SizedCodec
	StreamClientInterceptor = rpc.StreamClientInterceptor
	StreamDesc              = rpc.StreamDesc
	StreamHandler           = rpc.StreamHandler
	StreamServerInfo        = rpc.StreamServerInfo
	StreamServerInterceptor = rpc.StreamServerInterceptor
	Streamer                = rpc.Streamer
	UnaryClientInterceptor  = rpc.UnaryClientInterceptor
	UnaryHandler            = rpc.UnaryHandler
	UnaryInvoker            = rpc.UnaryInvoker
	UnaryServerInfo         = rpc.UnaryServerInfo
	UnaryServerInterceptor  = rpc.UnaryServerInterceptor
	VectorCodec             = rpc.VectorCodec
)

// The generic stream types of generated code.
type (
	BidiStreamingClient[Req, Res any]   = rpc.BidiStreamingClient[Req, Res]
	BidiStreamingServer[Req, Res any]   = rpc.BidiStreamingServer[Req, Res]
	ClientStreamingClient[Req, Res any] = rpc.ClientStreamingClient[Req, Res]
	ClientStreamingServer[Req, Res any] = rpc.ClientStreamingServer[Req, Res]
	ServerStreamingClient[Res any]      = rpc.ServerStreamingClient[Res]
	ServerStreamingServer[Res any]      = rpc.ServerStreamingServer[Res]
	GenericClientStream[Req, Res any]   = rpc.GenericClientStream[Req, Res]
	GenericServerStream[Req, Res any]   = rpc.GenericServerStream[Req, Res]
)

// The functions of package rpc, under the same names (see rpc's
// documentation for each).
var (
	// Making clients and servers.
	NewClient   = rpc.NewClient
	DialContext = rpc.DialContext
	NewServer   = rpc.NewServer
	Listen      = rpc.Listen

	// In a server handler.
	Method     = rpc.Method
	SendHeader = rpc.SendHeader
	SetHeader  = rpc.SetHeader
	SetTrailer = rpc.SetTrailer
	SendReady  = rpc.SendReady

	SetSendCompressor          = rpc.SetSendCompressor
	ClientSupportedCompressors = rpc.ClientSupportedCompressors

	PeerFromContext = rpc.PeerFromContext

	// Call options.
	Header             = rpc.Header
	Trailer            = rpc.Trailer
	MaxCallRecvMsgSize = rpc.MaxCallRecvMsgSize
	MaxCallSendMsgSize = rpc.MaxCallSendMsgSize
	PeerOption         = rpc.PeerOption
	PerRPCCredentials  = rpc.PerRPCCredentials
	UseCompressor      = rpc.UseCompressor
	WaitForReady       = rpc.WaitForReady

	MaxRetryRPCBufferSize = rpc.MaxRetryRPCBufferSize

	// Dial options.
	WithBlock                  = rpc.WithBlock
	FailOnNonTempDialError     = rpc.FailOnNonTempDialError
	WithReturnConnectionError  = rpc.WithReturnConnectionError
	WithChainStreamInterceptor = rpc.WithChainStreamInterceptor
	WithChainUnaryInterceptor  = rpc.WithChainUnaryInterceptor
	WithCodec                  = rpc.WithCodec
	WithConnectParams          = rpc.WithConnectParams
	WithContextDialer          = rpc.WithContextDialer
	WithDefaultCallOptions     = rpc.WithDefaultCallOptions
	WithDefaultServiceConfig   = rpc.WithDefaultServiceConfig
	WithDisableRetry           = rpc.WithDisableRetry
	WithFallback               = rpc.WithFallback
	WithIdleTimeout            = rpc.WithIdleTimeout
	WithInitialConnWindowSize  = rpc.WithInitialConnWindowSize
	WithInitialWindowSize      = rpc.WithInitialWindowSize
	WithInsecure               = rpc.WithInsecure
	WithKeepalive              = rpc.WithKeepalive
	WithKeepaliveParams        = rpc.WithKeepaliveParams
	WithLogger                 = rpc.WithLogger
	WithMaxCallAttempts        = rpc.WithMaxCallAttempts
	WithMaxHeaderListSize      = rpc.WithMaxHeaderListSize
	WithMaxRecvMsgSize         = rpc.WithMaxRecvMsgSize
	WithMaxSendMsgSize         = rpc.WithMaxSendMsgSize
	WithPerRPCCredentials      = rpc.WithPerRPCCredentials
	WithResolvers              = rpc.WithResolvers
	WithStatsHandler           = rpc.WithStatsHandler
	WithStreamInterceptor      = rpc.WithStreamInterceptor
	WithTransport              = rpc.WithTransport
	WithTransportCredentials   = rpc.WithTransportCredentials
	WithUnaryInterceptor       = rpc.WithUnaryInterceptor
	WithUserAgent              = rpc.WithUserAgent

	// Server options.
	ChainStreamInterceptor     = rpc.ChainStreamInterceptor
	ChainUnaryInterceptor      = rpc.ChainUnaryInterceptor
	ConnectionTimeout          = rpc.ConnectionTimeout
	Creds                      = rpc.Creds
	InitialConnWindowSize      = rpc.InitialConnWindowSize
	InitialWindowSize          = rpc.InitialWindowSize
	JoinServerOptions          = rpc.JoinServerOptions
	KeepaliveEnforcementPolicy = rpc.KeepaliveEnforcementPolicy
	Logger                     = rpc.Logger
	MaxConcurrentCalls         = rpc.MaxConcurrentCalls
	MaxConcurrentStreams       = rpc.MaxConcurrentStreams
	MaxHeaderListSize          = rpc.MaxHeaderListSize
	MaxQueuedRequestBytes      = rpc.MaxQueuedRequestBytes
	MaxRecvMsgSize             = rpc.MaxRecvMsgSize
	MaxSendMsgSize             = rpc.MaxSendMsgSize
	MaxUnsentResponseBytes     = rpc.MaxUnsentResponseBytes
	NumStreamWorkers           = rpc.NumStreamWorkers
	LendRequestBytes           = rpc.LendRequestBytes
	ResponseTimeout            = rpc.ResponseTimeout
	ServerCodec                = rpc.ServerCodec
	StatsHandler               = rpc.StatsHandler
	StreamInterceptor          = rpc.StreamInterceptor
	UnaryInterceptor           = rpc.UnaryInterceptor
	UnknownServiceHandler      = rpc.UnknownServiceHandler
	WaitForHandlers            = rpc.WaitForHandlers

	// Listen options.
	ListenCreds    = rpc.ListenCreds
	ListenFallback = rpc.ListenFallback
	ListenLogger   = rpc.ListenLogger
)

// KeepaliveParams is rpc.KeepaliveParams: gRPC-go's
// keepalive.ServerParameters, or rpc's Keepalive.
func KeepaliveParams[P Keepalive | keepalive.ServerParameters](p P) ServerOption {
	return rpc.KeepaliveParams(p)
}

// Dial is gRPC-go's Dial: DialContext with context.Background(). Without
// WithBlock it returns at once and the ClientConn connects in the
// background. (rpc.Dial, which takes a context and waits for the first
// connection, is another function.)
func Dial(target string, opts ...DialOption) (*ClientConn, error) {
	return rpc.DialContext(context.Background(), target, opts...)
}

// Peer is gRPC-go's call option: it stores into *p the server that served
// the call (rpc.PeerOption). Here, unlike in rpc, Peer is not a type: use
// peer.Peer.
func Peer(p *peer.Peer) CallOption { return rpc.PeerOption(p) }

// StaticMethodCallOption marks a call's method as one of a generated
// service's (gRPC-go uses it for metrics labels); rdmarpc needs no such
// mark and ignores it.
type StaticMethodCallOption struct{ EmptyCallOption }

// StaticMethod is the call option gRPC-go's generated code (version 8 and
// later) adds to every call; ignored.
func StaticMethod() CallOption { return StaticMethodCallOption{} }
