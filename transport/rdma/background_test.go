package rdma

import (
	"context"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/transport"
)

var _ transport.BackgroundSender = (*conn)(nil)

// lastSignaled reports whether c's newest send asked for a completion
// (completions do not change the count of unsignaled sends since).
func lastSignaled(c *conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unsignaled == 0
}

// TestSendBackground: a background send is delivered like any other, but
// leaves the sender expecting no reply (its receiver is not roused to spin
// for one, the round trip is not timed) and, sent inline after sends that
// all asked for a completion, asks for none; Send does both.
func TestSendBackground(t *testing.T) {
	ip := guestIP(t)
	tr := New(Options{})
	client, server, _ := pair(t, tr, ip)
	if client.maxInline < 8 {
		t.Skipf("the device sends at most %d bytes inline", client.maxInline)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, bg := range []bool{true, false, true} {
		msg := []byte{byte(i), 'p', 'i', 'n', 'g'}
		var err error
		if bg {
			err = client.SendBackground(ctx, msg)
		} else {
			err = client.Send(ctx, msg)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := client.expect.Load(); got != !bg {
			t.Errorf("message %d (background %v): the sender expects a reply: %v", i, bg, got)
		}
		if got := lastSignaled(client); got != !bg {
			t.Errorf("message %d (background %v): signaled %v", i, bg, got)
		}
		b, err := server.Recv(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(b.Bytes()) != string(msg) {
			t.Errorf("message %d: got %q, want %q", i, b.Bytes(), msg)
		}
		b.Release()
		// The reply (to the Send) clears the expectation before the next.
		if err := server.SendBackground(ctx, []byte("pong")); err != nil {
			t.Fatal(err)
		}
		if b, err = client.Recv(ctx); err != nil {
			t.Fatal(err)
		}
		b.Release()
		if client.expect.Load() {
			t.Errorf("message %d: still expecting a reply after one arrived", i)
		}
	}
	// The last send asked for no completion: the next asks for one, or a
	// slot an earlier unsignaled send holds could wait on it forever.
	if err := client.SendBackground(ctx, []byte("again")); err != nil {
		t.Fatal(err)
	}
	if !lastSignaled(client) {
		t.Error("two background sends in a row asked for no completion")
	}
	if b, err := server.Recv(ctx); err != nil {
		t.Fatal(err)
	} else {
		b.Release()
	}
	// Too large to go inline: it holds a slot, so it asks for its
	// completion even in the background.
	big := make([]byte, client.maxInline+1)
	if err := client.SendBackground(ctx, big); err != nil {
		t.Fatal(err)
	}
	if !lastSignaled(client) {
		t.Errorf("a background send of %d bytes (inline at most %d) asked for no completion", len(big), client.maxInline)
	}
	b, err := server.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != len(big) {
		t.Errorf("got %d bytes, want %d", b.Len(), len(big))
	}
	b.Release()
}
