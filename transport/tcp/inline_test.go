package tcp

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

// TestInlineWritesInOrder: frames written from the senders' goroutines
// (while the writer is idle) and by the writer (once the socket is full,
// including the rest of a frame an inline write began) arrive whole and,
// per sender, in order. The receiver takes nothing until every frame has
// been handed to Send, so the socket buffers fill and later frames queue
// behind the partly written ones.
func TestInlineWritesInOrder(t *testing.T) {
	tr := New(Options{RecvQueueBytes: 64 << 10, SendQueueBytes: 64 << 20})
	lis, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	accepted := make(chan *conn, 1)
	go func() {
		c, err := lis.Accept(ctx)
		if err != nil {
			t.Error(err)
			close(accepted)
			return
		}
		accepted <- c.(*conn)
	}()
	cli, err := tr.Dial(ctx, lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	srv := <-accepted
	if srv == nil {
		return
	}
	defer srv.Close()

	const senders, frames = 3, 60
	sizes := []int{0, 1, 100, 70 << 10, 300 << 10, 5, 1 << 20}
	payload := func(s, i int) []byte {
		b := make([]byte, sizes[(s+i)%len(sizes)])
		for j := range b {
			b[j] = byte(s*31 + i*7 + j)
		}
		return b
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range frames {
				// The sender's id and index lead, so the receiver knows
				// whose frame it holds.
				msg := append([]byte{byte(s), byte(i)}, payload(s, i)...)
				if err := cli.Send(ctx, msg); err != nil {
					t.Errorf("sender %d, frame %d: %v", s, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	next := make([]int, senders)
	for range senders * frames {
		b, err := srv.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := b.Bytes()
		s, i := int(got[0]), int(got[1])
		if s >= senders || i != next[s] {
			t.Fatalf("frame %d of sender %d arrived, want frame %v", i, s, next)
		}
		if want := payload(s, i); !bytes.Equal(got[2:], want) {
			t.Fatalf("sender %d, frame %d: %d bytes, want %d, or other content", s, i, len(got)-2, len(want))
		}
		next[s]++
		b.Release()
	}
}
