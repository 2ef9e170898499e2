// Package conn is rpc's connection layer, as gRPC-go's internal/transport
// is its own: what one connection of frames needs whatever the API above
// it does. It holds for now the flow-control parts (a stream's Inbox and
// Credit, the connection window ConnFlow; docs/wire.md, "Flow control") and
// the client's side of the server's MAX_CONCURRENT_STREAMS (Slots), with
// their model test; the link itself (framing over a transport.Conn, read
// turns, the control queue, keepalive, GOAWAY) is to follow it here.
//
// It never knows about ClientConn, Server, calls, codecs or balancing: the
// rpc package uses it, never the reverse. The name is not transport's, so
// that files using both need no alias.
package conn
