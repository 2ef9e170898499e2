package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store/storetest"
	"github.com/rdmarpc/rdmarpc/status"
)

// fillValue is the value of fill key i: incompressible, so that Pebble's
// compression does not stretch the disk.
func fillValue(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 42))
	b := make([]byte, 256<<10)
	for j := range b {
		b[j] = byte(r.Uint32())
	}
	return b
}

func fillKey(i int) []byte { return []byte(fmt.Sprintf("fill/%05d", i)) }

// TestFullDisk fills a real (tmpfs) disk through kvserver: writes are
// refused with ResourceExhausted while reads go on; kvserver restarted on a
// disk filled to the last byte starts, serves reads and refuses writes;
// once space is freed it takes writes again; and after a kill -9 every
// acknowledged put is there. Before, a put on the filling disk hung until
// its deadline (Pebble stalls writes while its flushes fail) and the server
// wrote 46 000 "background error" lines a minute retrying them; on a disk
// that fails a WAL write Pebble's fatal commit error exited the process
// (see the store's TestFatalCommitError); and a restart on the full disk
// never listened.
func TestFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and fills a disk")
	}
	mnt := storetest.TmpFS(t, 64<<20)
	// Someone else's file, deleted later to free space.
	if err := os.WriteFile(filepath.Join(mnt, "ballast"), make([]byte, 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--data-dir", "data", "--listen", "tcp://127.0.0.1:0", "--min-free-space", "16MiB"}
	p := startServer(t, mnt, args...)
	kv := dial(t, p.targets[0])

	acked := 0 // fill keys 0..acked-1 were acknowledged
	for ; ; acked++ {
		if acked == 1000 { // 250 MB, on a 64 MB disk
			t.Fatalf("%d puts of 256 KiB accepted on a 64 MiB disk", acked)
		}
		_, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: fillKey(acked), Value: fillValue(acked)})
		if err == nil {
			continue
		}
		if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "disk full:") || !strings.Contains(st.Message(), "bytes free") {
			t.Fatalf("put %d on a filling disk: %v, want ResourceExhausted \"disk full: N bytes free…\"\nserver logs:\n%s", acked, err, p.logs)
		}
		t.Logf("refused after %d puts: %v", acked, err)
		break
	}
	if acked < 10 {
		t.Fatalf("only %d puts accepted before the disk counted full", acked)
	}
	checkFill := func(kv kvpb.KVClient, n int) {
		t.Helper()
		for i := range n {
			resp, err := kv.Get(testCtx(t), &kvpb.GetRequest{Key: fillKey(i)})
			if err != nil || !resp.GetFound() || !bytes.Equal(resp.GetValue(), fillValue(i)) {
				t.Fatalf("get %s: found %v, %v: an acknowledged put is missing or wrong", fillKey(i), resp.GetFound(), err)
			}
		}
	}
	checkFill(kv, acked)
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d after SIGTERM on a full disk:\n%s", code, p.logs)
	}

	// Another program takes the rest of the disk.
	storetest.Fill(t, filepath.Join(mnt, "hog"))
	p = startServer(t, mnt, args...)
	if !strings.Contains(p.logs.String(), "opened data directory read-only: disk full") {
		t.Fatalf("no word of the full disk at startup:\n%s", p.logs)
	}
	kv = dial(t, p.targets[0])
	checkFill(kv, acked)
	if _, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: fillKey(acked), Value: []byte("x")}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a put after starting on a full disk: %v, want ResourceExhausted", err)
	}

	// Space is freed: writes are taken again, by the same server.
	for _, f := range []string{"hog", "ballast"} {
		if err := os.Remove(filepath.Join(mnt, f)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testCtx(t) // bounds the retries below
	for {
		_, err := kv.Put(ctx, &kvpb.PutRequest{Key: fillKey(acked), Value: fillValue(acked)})
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a put after space was freed: %v\n%s", err, p.logs)
		}
	}
	acked++
	for range 4 {
		if _, err := kv.Put(testCtx(t), &kvpb.PutRequest{Key: fillKey(acked), Value: fillValue(acked)}); err != nil {
			t.Fatalf("put %d after space was freed: %v", acked, err)
		}
		acked++
	}
	if n := strings.Count(p.logs.String(), "\n"); n > 20 {
		t.Errorf("%d log lines from a server started on a full disk: it should say so once, not spin:\n%s", n, p.logs)
	}

	p.signal(t, syscall.SIGKILL)
	p.wait(t)
	p = startServer(t, mnt, args...)
	checkFill(dial(t, p.targets[0]), acked)
}
