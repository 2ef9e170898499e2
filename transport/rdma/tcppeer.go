package rdma

import (
	"context"
	"io"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"
)

// tcpHelloMagic starts the hello of the TCP transport's clients
// (transport/tcp): a client that fell back to TCP (rpc.WithFallback,
// auto://, a failed RDMA connection) dials the same port as the RDMA
// bootstrap.
const tcpHelloMagic = "RRPT"

// h2PrefaceHead starts HTTP/2's client preface ("PRI * HTTP/2.0…"): a gRPC
// client (grpcurl, a Kubernetes probe, gRPC-go, grpc:// targets) on the
// bootstrap port. The TCP transport's server-side handshake reads the rest
// of the preface and hands the connection up as a transport.Foreign, which
// the RPC server serves as gRPC, as it does on a tcp:// port.
const h2PrefaceHead = "PRI "

// streamServer is the TCP transport's server-side handshake on a
// connection accepted here (tcp.Transport.ServerConn).
type streamServer interface {
	ServerConn(ctx context.Context, nc net.Conn, head []byte, auth credentials.AuthInfo, refused func(string, ...zap.Field)) (transport.Conn, error)
}

// tcpPeer reads the first bytes of a bootstrap connection. A client of the
// TCP transport, or a gRPC client over HTTP/2, is served here, as a TCP
// connection, by the transport registered for "tcp" (when the program has
// one): the listener's port serves rdmarpc over TCP and gRPC too
// (docs/rdma.md, "Failover to TCP and back"), and tc is that connection. Otherwise boot is returned, its first bytes
// still to be read, for the RDMA handshake.
func (t *Transport) tcpPeer(ctx context.Context, boot net.Conn, auth credentials.AuthInfo, refused func(string, ...zap.Field)) (net.Conn, transport.Conn, error) {
	tr, _ := transport.Lookup("tcp")
	ss, ok := tr.(streamServer)
	if !ok {
		return boot, nil, nil
	}
	_ = boot.SetDeadline(time.Now().Add(t.o.HandshakeTimeout))
	stop := context.AfterFunc(ctx, func() { _ = boot.SetDeadline(time.Now()) })
	defer stop()
	head := make([]byte, len(tcpHelloMagic))
	if n, err := io.ReadFull(boot, head); err != nil {
		t.counters.refused.Add(1)
		if n > 0 {
			return nil, nil, protoErr("truncated hello: %d bytes, then %v", n, t.ioErr("reading hello", err))
		}
		return nil, nil, t.ioErr("reading hello", err)
	}
	if string(head) != tcpHelloMagic && string(head) != h2PrefaceHead {
		return &readAhead{Conn: boot, head: head}, nil, nil
	}
	tc, err := ss.ServerConn(ctx, boot, head, auth, refused)
	if err != nil {
		return nil, nil, err
	}
	t.counters.tcpPeers.Add(1)
	return nil, tc, nil
}

// readAhead is a connection whose first bytes were read already: Read
// returns them first.
type readAhead struct {
	net.Conn
	head []byte
}

func (c *readAhead) Read(b []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(b, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}
