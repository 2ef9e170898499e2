// Package conn is rpc's connection layer, as gRPC-go's internal/transport
// is its own: what one connection of frames needs whatever the API above
// it does: the link (Link: framing over a transport.Conn, the control queue
// and its flusher, keepalive, the response watch, GOAWAY, close), the
// flow-control parts (a stream's Inbox and Credit, the connection window
// ConnFlow; docs/wire.md, "Flow control"), the client's side of the
// server's MAX_CONCURRENT_STREAMS (Slots), the byte budgets, and a client
// link's read turn (Turn: who reads, the line of callers, step-aside,
// hand-on, the idle wait), which a pending call joins through the small
// TurnWaiter interface, and a server connection's unread time (Unread: a
// reader runs a call while the transport's arrival callback stands ready
// to hand the reading on). What stays in rpc is what needs its calls: when
// a call may read or run unread, dispatching frames to calls, admission
// and the workers, which run call streams.
//
// It never knows about ClientConn, Server, calls, codecs or balancing: the
// rpc package uses it, never the reverse. The name is not transport's, so
// that files using both need no alias.
package conn
