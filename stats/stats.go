package stats

import (
	"context"
	"net"
	"time"

	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Handler is told about connections and RPCs. Its methods are called
// concurrently, from many connections and calls.
type Handler interface {
	// TagRPC may attach information to ctx for the RPC's later events
	// (HandleRPC gets the context it returns). On the client it is called
	// before the request metadata is read, so it may add outgoing
	// metadata (a trace context); on the server ctx carries the request's
	// incoming metadata.
	TagRPC(ctx context.Context, info *RPCTagInfo) context.Context
	// HandleRPC processes one event of an RPC.
	HandleRPC(ctx context.Context, s RPCStats)
	// TagConn may attach information to ctx for the connection's later
	// events (HandleConn gets the context it returns).
	TagConn(ctx context.Context, info *ConnTagInfo) context.Context
	// HandleConn processes one event of a connection.
	HandleConn(ctx context.Context, s ConnStats)
}

// RPCTagInfo describes the RPC TagRPC tags.
type RPCTagInfo struct {
	// FullMethodName is "/package.Service/Method".
	FullMethodName string
	// FailFast is false for calls made with rpc.WaitForReady(true).
	FailFast bool
}

// ConnTagInfo describes the connection TagConn tags.
type ConnTagInfo struct {
	RemoteAddr net.Addr
	LocalAddr  net.Addr
	// Transport names the connection's transport ("tcp", "rdma",
	// "pipe"): its local address's network, unless the connection says
	// otherwise (rdma's addresses are its TCP bootstrap's).
	Transport string
	// Counters reads the counters the connection's transport keeps over
	// all its connections (transport.Counters: snake_case names, values
	// that only grow); nil when it keeps none. It is safe to call at any
	// time, after the connection ended too.
	Counters transport.Counters
}

// RPCStats is one event of an RPC.
type RPCStats interface {
	// IsClient reports whether the event happened on the client.
	IsClient() bool
	isRPCStats()
}

// Begin is the first event of an RPC.
type Begin struct {
	Client    bool
	BeginTime time.Time
	// FailFast is false for calls made with rpc.WaitForReady(true).
	FailFast bool
	// IsClientStream and IsServerStream say which sides stream; both false
	// for a unary call.
	IsClientStream bool
	IsServerStream bool
}

// DelayedPickComplete is reported on the client, after Begin, when a call
// had to wait for a connection to be picked (none was ready when it
// started) and now has one, as gRPC-go's.
type DelayedPickComplete struct{}

// IsClient is true: the event happens on the client.
func (*DelayedPickComplete) IsClient() bool { return true }

func (*DelayedPickComplete) isRPCStats() {}

// PickerUpdated is DelayedPickComplete's old name in gRPC-go.
//
// Deprecated: use DelayedPickComplete.
type PickerUpdated = DelayedPickComplete

// InHeader is the request header arriving (server) or the response header
// arriving (client).
type InHeader struct {
	Client bool
	// WireLength is the size of the frame that carried the header, when
	// the header came in a frame of its own or with the request; 0 when it
	// cannot be told apart from what came with it.
	WireLength int
	// Compression is the compressor's name when the call compresses
	// (UseCompressor), else "".
	Compression string
	Header      metadata.MD
	// FullMethod, RemoteAddr and LocalAddr are set on the server only.
	FullMethod string
	RemoteAddr net.Addr
	LocalAddr  net.Addr
}

// InPayload is one message received.
type InPayload struct {
	Client bool
	// Payload is the decoded message.
	Payload any
	// Length is the size of the message's encoding; CompressedLength its
	// size as received, the same unless the call compresses.
	Length           int
	CompressedLength int
	// WireLength is the size of the frame that carried it, headers
	// included.
	WireLength int
	RecvTime   time.Time
}

// InTrailer is the response trailer arriving on the client.
type InTrailer struct {
	Client     bool
	WireLength int
	Trailer    metadata.MD
}

// OutHeader is the request header leaving (client) or the response header
// leaving (server).
type OutHeader struct {
	Client      bool
	Compression string
	Header      metadata.MD
	// FullMethod, RemoteAddr and LocalAddr are set on the client only.
	FullMethod string
	RemoteAddr net.Addr
	LocalAddr  net.Addr
}

// OutPayload is one message sent.
type OutPayload struct {
	Client bool
	// Payload is the message before encoding.
	Payload          any
	Length           int
	CompressedLength int
	// WireLength is the size of the frame that carried it, headers
	// included.
	WireLength int
	SentTime   time.Time
}

// OutTrailer is the response trailer leaving the server.
type OutTrailer struct {
	Client     bool
	WireLength int
	Trailer    metadata.MD
}

// End is the last event of an RPC.
type End struct {
	Client    bool
	BeginTime time.Time
	EndTime   time.Time
	// Trailer is the trailer the client received (nil on the server).
	Trailer metadata.MD
	// Error is the RPC's outcome: nil when OK, else a status error.
	Error error
}

func (s *Begin) IsClient() bool      { return s.Client }
func (s *InHeader) IsClient() bool   { return s.Client }
func (s *InPayload) IsClient() bool  { return s.Client }
func (s *InTrailer) IsClient() bool  { return s.Client }
func (s *OutHeader) IsClient() bool  { return s.Client }
func (s *OutPayload) IsClient() bool { return s.Client }
func (s *OutTrailer) IsClient() bool { return s.Client }
func (s *End) IsClient() bool        { return s.Client }

func (*Begin) isRPCStats()      {}
func (*InHeader) isRPCStats()   {}
func (*InPayload) isRPCStats()  {}
func (*InTrailer) isRPCStats()  {}
func (*OutHeader) isRPCStats()  {}
func (*OutPayload) isRPCStats() {}
func (*OutTrailer) isRPCStats() {}
func (*End) isRPCStats()        {}

// ConnStats is one event of a connection.
type ConnStats interface {
	IsClient() bool
	isConnStats()
}

// ConnBegin is a connection's first event: it is up (dialled, or
// accepted).
type ConnBegin struct {
	Client bool
}

// ConnEnd is a connection's last event: it has closed.
type ConnEnd struct {
	Client bool
}

func (s *ConnBegin) IsClient() bool { return s.Client }
func (s *ConnEnd) IsClient() bool   { return s.Client }
func (*ConnBegin) isConnStats()     {}
func (*ConnEnd) isConnStats()       {}
