package tcp

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/transport"
)

// http2Preface is what an HTTP/2 client sends first (RFC 9113 §3.4): a
// gRPC client with prior knowledge, on cleartext.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// http2Settings reports whether b starts with the header of an HTTP/2
// SETTINGS frame on stream 0, the first thing an HTTP/2 server (a gRPC
// server) writes: a client's hello answered this way reached one.
func http2Settings(b []byte) bool {
	const settings = 0x4
	if len(b) < 9 {
		return false
	}
	n := int(b[0])<<16 | int(b[1])<<8 | int(b[2]) // the payload: 6 bytes per setting
	stream := uint32(b[5]&0x7f)<<24 | uint32(b[6])<<16 | uint32(b[7])<<8 | uint32(b[8])
	return b[3] == settings && b[4]&^1 == 0 && stream == 0 && n%6 == 0
}

// foreign is a connection whose client speaks another protocol than the
// transport's framing: a transport.Foreign that its server takes over.
type foreign struct {
	nc       net.Conn
	protocol string
	auth     credentials.AuthInfo
	once     sync.Once
	done     chan struct{}
}

func newForeign(nc net.Conn, protocol string, auth credentials.AuthInfo) *foreign {
	return &foreign{nc: nc, protocol: protocol, auth: auth, done: make(chan struct{})}
}

func (f *foreign) Protocol() string               { return f.protocol }
func (f *foreign) NetConn() net.Conn              { return f.nc }
func (f *foreign) AuthInfo() credentials.AuthInfo { return f.auth }

func (f *foreign) notFraming() error {
	return fmt.Errorf("%w: the peer speaks %s, not the tcp transport's framing", transport.ErrProtocol, f.protocol)
}

func (f *foreign) Send(context.Context, []byte) error { return f.notFraming() }
func (f *foreign) NewSendBuffer(context.Context, int) (transport.Buffer, error) {
	return transport.Buffer{}, f.notFraming()
}
func (f *foreign) SendBuffer(_ context.Context, b transport.Buffer) error {
	b.Release()
	return f.notFraming()
}
func (f *foreign) Recv(context.Context) (transport.Buffer, error) {
	return transport.Buffer{}, f.notFraming()
}

// Close closes the socket; the listener counts the connection until then.
func (f *foreign) Close() error {
	var err error
	f.once.Do(func() {
		err = f.nc.Close()
		close(f.done)
	})
	return err
}

func (f *foreign) Done() <-chan struct{} { return f.done }
func (f *foreign) MaxMessageSize() int   { return 0 }
func (f *foreign) LocalAddr() net.Addr   { return f.nc.LocalAddr() }
func (f *foreign) RemoteAddr() net.Addr  { return f.nc.RemoteAddr() }
