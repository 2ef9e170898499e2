//go:build linux

package rdma

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The server of TestMemlockBudget runs in a child process: this test
// binary again, as user nobody (no CAP_IPC_LOCK), its RLIMIT_MEMLOCK
// lowered to 8 MiB before anything is registered, so the kernel holds it
// to what an ordinary user or a default container may pin.
const (
	memlockChildEnv  = "RDMARPC_MEMLOCK_CHILD"  // set: this process is the child
	memlockLayoutEnv = "RDMARPC_MEMLOCK_LAYOUT" // "perconn": Options.Receive set to ReceivePerConnection
	memlockLimit     = 8 << 20
	nobody           = 65534
)

// TestMemlockBudget runs a server with default Options under a real 8 MiB
// RLIMIT_MEMLOCK without CAP_IPC_LOCK (issue 26 item 1) and connects
// clients to it one after another, each completing a call, until the
// server refuses one: with default Options it holds at least 100 (the
// default layout is then the shared receive queue), the handshake beyond
// is refused for the budget — not by the kernel's pinning limit — with
// one log line that says what to raise, and all the connections it holds
// still answer. With Options.Receive set to the per-connection layout the
// explicit option wins, and only a few fit. The figures (registered bytes
// per connection, connections held) go to the test log for docs/rdma.md.
func TestMemlockBudget(t *testing.T) {
	ip := guestIP(t)
	if os.Getuid() != 0 {
		t.Skip("needs root, to run the server as another user without CAP_IPC_LOCK")
	}
	for _, tc := range []struct {
		layout   string
		min, max int // connections the server must hold
	}{
		{"default", 100, 1000},
		{"perconn", 1, 20},
	} {
		t.Run(tc.layout, func(t *testing.T) {
			held := memlockRun(t, ip, tc.layout)
			if held < tc.min || held > tc.max {
				t.Errorf("the server held %d connections under an 8 MiB RLIMIT_MEMLOCK; want %d to %d", held, tc.min, tc.max)
			}
		})
	}
}

// memlockRun starts the child server with layout, dials it until it
// refuses, and returns how many connections it held.
func memlockRun(t *testing.T, ip, layout string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMemlockServer$", "-test.v")
	cmd.Env = append(os.Environ(), memlockChildEnv+"=1", memlockLayoutEnv+"="+layout)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The child's stdout, line by line; buffered beyond what it prints, so
	// the reader never waits for the test.
	lines := make(chan string, 1<<12)
	var out strings.Builder // what the test read of it, for failure messages
	var rwg sync.WaitGroup
	rwg.Go(func() {
		defer close(lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
	})
	// end closes the child's stdin, reads its stdout to the end and waits
	// for it; on a failure, after the hang guard's cancel has killed it.
	var ended bool
	var endErr error
	end := func() error {
		if !ended {
			ended = true
			stdin.Close()
			for l := range lines {
				out.WriteString(l + "\n")
			}
			rwg.Wait()
			endErr = cmd.Wait()
		}
		return endErr
	}
	defer func() {
		cancel()
		_ = end()
	}()
	next := func(prefix string) string {
		for l := range lines {
			out.WriteString(l + "\n")
			if v, ok := strings.CutPrefix(l, prefix); ok {
				return v
			}
		}
		_ = end()
		t.Fatalf("the server process ended without saying %q; its output:\n%s\nstderr:\n%s", prefix, out.String(), stderr.String())
		return ""
	}
	addr := next("ADDR ")
	t.Logf("server (uid %d, RLIMIT_MEMLOCK 8 MiB): %s", nobody, next("SERVER "))

	// The clients' transport runs as root here: its own registrations do
	// not count against the server's limit.
	cli := New(Options{Receive: ReceiveShared, MemoryBudget: -1})
	var conns []transport.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	call := func(c transport.Conn) (int64, error) {
		if err := c.Send(ctx, []byte("ping")); err != nil {
			return 0, err
		}
		b, err := c.Recv(ctx)
		if err != nil {
			return 0, err
		}
		defer b.Release()
		return strconv.ParseInt(string(b.Bytes()), 10, 64)
	}
	// Dial until the server refuses three in a row: a refusal is not the
	// end, as the shared receive queue's credits lent during the calls come
	// back once the connections are idle, and a further connection may fit
	// in them.
	var registered []int64 // the server's registered bytes after each connection's call
	var refusal error
	refusals, inRow := 0, 0
	for attempts := 0; inRow < 3 && attempts < 1000; attempts++ {
		c, err := cli.Dial(ctx, addr)
		if err != nil {
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "registered-memory budget exhausted") {
				t.Fatalf("after %d connections a dial failed with %v; want the server's refusal for its budget", len(conns), err)
			}
			if refusal == nil {
				refusal = err
				t.Logf("first refusal after %d connections: %v", len(conns), err)
			}
			refusals++
			inRow++
			continue
		}
		inRow = 0
		conns = append(conns, c)
		n, err := call(c)
		if err != nil {
			t.Fatalf("call on connection %d: %v", len(conns), err)
		}
		registered = append(registered, n)
	}
	if refusal == nil {
		t.Fatalf("the server took %d connections without refusing one", len(conns))
	}
	// The connections held all still answer.
	for i, c := range conns {
		if _, err := call(c); err != nil {
			t.Fatalf("connection %d of %d held no longer answers: %v", i+1, len(conns), err)
		}
	}
	if k := len(registered); k > 1 {
		t.Logf("%s: %d connections held, %d dials refused; the server registered %s after the first call, %s after the last (%s per further connection)",
			layout, k, refusals, rdmadev.Bytes(registered[0]), rdmadev.Bytes(registered[k-1]),
			rdmadev.Bytes((registered[k-1]-registered[0])/int64(k-1)))
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	stdin.Close() // the server closes all and exits
	t.Logf("server at exit: %s", next("AFTER "))
	if err := end(); err != nil {
		t.Fatalf("server process: %v; its output:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}

	// One warning about the budget, whatever the number of refusals, with
	// the figures and the advice.
	var warned []map[string]any
	for l := range strings.SplitSeq(stderr.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && strings.Contains(fmt.Sprint(m["msg"]), "registered-memory budget reached") {
			warned = append(warned, m)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d budget warnings logged for %d refusals, want 1; stderr:\n%s", len(warned), refusals, stderr.String())
	}
	w := warned[0]
	t.Logf("the server's warning: %v", w)
	for k, want := range map[string]string{"budget": "8 MiB", "from": "RLIMIT_MEMLOCK (8 MiB), without CAP_IPC_LOCK",
		"advice": "ulimit -l", "per_connection": "B", "connections_fit": ""} {
		if v, ok := w[k]; !ok || !strings.Contains(fmt.Sprint(v), want) {
			t.Errorf("warning field %s = %v, want it to say %q", k, v, want)
		}
	}
	return len(registered)
}

// TestMemlockServer is the server process of TestMemlockBudget; it skips
// unless started by it.
func TestMemlockServer(t *testing.T) {
	if os.Getenv(memlockChildEnv) == "" {
		t.Skip("the server process of TestMemlockBudget")
	}
	ip := guestIP(t)
	lim := syscall.Rlimit{Cur: memlockLimit, Max: memlockLimit}
	if err := syscall.Setrlimit(8 /* RLIMIT_MEMLOCK */, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	if p := rdmadev.ReadPinning(); p.CapIPCLock || p.Memlock != memlockLimit {
		t.Fatalf("this process may pin more than 8 MiB: %+v", p)
	}
	enc := zap.NewProductionEncoderConfig()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(os.Stderr), zap.WarnLevel))
	var o Options
	if os.Getenv(memlockLayoutEnv) == "perconn" {
		o.Receive = ReceivePerConnection
	}
	o.Logger = log
	tr := New(o)
	lis, err := tr.Listen(net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADDR %s\n", lis.Addr())
	c := tr.budget.cost
	fmt.Printf("SERVER budget %s from %q, layout %s, BufferSize %d, estimated %s per connection + %s fixed, %d fit\n",
		rdmadev.Bytes(tr.o.MemoryBudget), tr.budget.source, tr.o.Receive.name(), tr.o.BufferSize,
		rdmadev.Bytes(c.perConn), rdmadev.Bytes(c.fixed), c.fit(tr.o.MemoryBudget))

	ctx, cancel := context.WithCancel(context.Background())
	acc := acceptAll(ctx, lis, func(c transport.Conn) { echoRegistered(ctx, tr, c) })
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test closes it
	lis.Close()
	cancel()
	n := len(acc.accepted())
	acc.closeAll()
	fmt.Printf("AFTER %d connections accepted, handshakes_refused %d, registered %s\n",
		n, tr.Counters()["handshakes_refused"], rdmadev.Bytes(int64(tr.Gauges()["registered_bytes"])))
}

// echoRegistered answers each message on c with the bytes tr has
// registered, until c ends.
func echoRegistered(ctx context.Context, tr *Transport, c transport.Conn) {
	for {
		b, err := c.Recv(ctx)
		if err != nil {
			return
		}
		b.Release()
		if err := c.Send(ctx, []byte(strconv.FormatUint(tr.Gauges()["registered_bytes"], 10))); err != nil {
			return
		}
	}
}
