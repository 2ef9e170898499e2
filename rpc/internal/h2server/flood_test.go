package h2server

import (
	"context"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rdmarpc/rdmarpc/transport"
)

// pipeForeign is a transport.Foreign over one end of net.Pipe.
type pipeForeign struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (p *pipeForeign) Protocol() string                   { return "h2" }
func (p *pipeForeign) NetConn() net.Conn                  { return p.Conn }
func (p *pipeForeign) Send(context.Context, []byte) error { return transport.ErrProtocol }
func (p *pipeForeign) NewSendBuffer(context.Context, int) (transport.Buffer, error) {
	return transport.Buffer{}, transport.ErrProtocol
}
func (p *pipeForeign) SendBuffer(context.Context, transport.Buffer) error {
	return transport.ErrProtocol
}
func (p *pipeForeign) Recv(context.Context) (transport.Buffer, error) {
	return transport.Buffer{}, transport.ErrProtocol
}
func (p *pipeForeign) Close() error {
	p.once.Do(func() { close(p.done) })
	return p.Conn.Close()
}
func (p *pipeForeign) Done() <-chan struct{} { return p.done }
func (p *pipeForeign) MaxMessageSize() int   { return 0 }

// TestSettingsFlood: a client that sends SETTINGS (or PINGs) without
// reading what they call for stops being read once the acknowledgements
// queued reach maxQueuedControl: a flood holds bounded memory. net.Pipe
// buffers nothing, so the count is exact.
func TestSettingsFlood(t *testing.T) {
	for _, kind := range []string{"settings", "ping"} {
		t.Run(kind, func(t *testing.T) {
			srv, cli := net.Pipe()
			c := New(&pipeForeign{Conn: srv, done: make(chan struct{})}, Config{})
			defer c.Close()
			fr := http2.NewFramer(cli, cli)
			const flood = 100 * maxQueuedControl
			written := make(chan int, 1)
			go func() {
				n := 0
				for ; n < flood; n++ {
					var err error
					if kind == "ping" && n > 0 {
						err = fr.WritePing(false, [8]byte{})
					} else {
						err = fr.WriteSettings()
					}
					if err != nil {
						break
					}
				}
				written <- n
			}()
			// The client reads nothing until the server's reader has
			// stopped: its queue is full and it waits. (Nothing else may
			// write to cli meanwhile: the flood's write, blocked, holds
			// the pipe's write lock.)
			for {
				c.mu.Lock()
				full := len(c.ctrl) > maxQueuedControl
				c.mu.Unlock()
				if full {
					break
				}
				runtime.Gosched()
			}
			// The reader waits; the client's next frame cannot be taken.
			_ = cli.SetWriteDeadline(time.Now())
			n := <-written
			if n >= flood || n > maxQueuedControl+4 {
				t.Fatalf("the server took %d frames of %d with %d acknowledgements unread", n, flood, maxQueuedControl)
			}
			cli.Close()
		})
	}
}
