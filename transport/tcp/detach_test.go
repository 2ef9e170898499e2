package tcp

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// A detached frame is the receiver's: its receive budget goes back at once
// (with a budget of one frame, the next frames are read while it is kept),
// the reader never reads into its memory again, and a Release after the
// Detach gives nothing back twice (the budget's semaphore would panic).
func TestDetachedFrameIsTheReceivers(t *testing.T) {
	const size = 64 << 10
	nc, srv := acceptRaw(t, New(Options{RecvQueueBytes: size}))
	msgs := make([][]byte, 4)
	for i := range msgs {
		msgs[i] = bytes.Repeat([]byte{byte('a' + i)}, size)
	}
	go func() { _, _ = nc.Write(frames(msgs...)) }() // the socket may not take it all before we read
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var kept [][]byte
	for i, want := range msgs {
		b, err := srv.Recv(ctx)
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		if !bytes.Equal(b.Bytes(), want) {
			t.Fatalf("frame %d is not what was sent", i)
		}
		if i == len(msgs)-1 {
			b.Release() // its memory goes to the pool, where the detached ones are not
			break
		}
		data, ok := b.Detach()
		if !ok {
			t.Fatalf("Detach of frame %d refused", i)
		}
		b.Release() // nothing left to give back
		kept = append(kept, data)
	}
	for i, data := range kept {
		if !bytes.Equal(data, msgs[i]) {
			t.Fatalf("detached frame %d was overwritten", i)
		}
		for j := range i {
			if &data[0] == &kept[j][0] {
				t.Fatalf("frames %d and %d were read into the same memory", j, i)
			}
		}
	}
	if !srv.recvBudget.TryAcquire(size) {
		t.Fatal("receive budget still held after every frame was detached or released")
	}
	srv.recvBudget.Release(size)
}
