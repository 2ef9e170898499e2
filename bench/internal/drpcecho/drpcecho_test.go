package drpcecho

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEchoes: every caller gets back exactly the payload and message it
// sent, with callers sharing the client, and the pool holds no more
// connections than callers.
func TestEchoes(t *testing.T) {
	srv, err := Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c := Dial(srv.Addr())
	defer c.Close()
	const callers = 4
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for i, size := range []int{0, 1, 64, 1024, 64 << 10, 1 << 20} {
				p := bytes.Repeat([]byte{byte(w), byte(i), 7}, size/3+1)[:size]
				msg := string(rune('a' + w))
				resp, err := c.Say(context.Background(), &echopb.SayRequest{Message: msg, Payload: p})
				if err != nil {
					t.Errorf("caller %d, %d B: %v", w, size, err)
					return
				}
				if !bytes.Equal(resp.GetPayload(), p) || resp.GetMessage() != msg {
					t.Errorf("caller %d, %d B: echo differs (%d B, %q back)", w, size, len(resp.GetPayload()), resp.GetMessage())
				}
			}
		})
	}
	wg.Wait()
	if n := c.pool.Len(); n < 1 || n > callers {
		t.Errorf("pool holds %d connections for %d callers", n, callers)
	}
}
