package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rdmarpc/rdmarpc/transport"
)

// emfileChild names the environment variable that makes
// TestListenerSurvivesEMFILE run as the server side in a child process.
const emfileChild = "RDMARPC_TCP_EMFILE_CHILD"

// The first EMFILE used to end the accept loop for good. A server whose
// descriptor limit is low (a child process, so the limit is its alone) is
// flooded with more connections than it may hold open; once they go away,
// a well-behaved client must still be served by the same listener.
func TestListenerSurvivesEMFILE(t *testing.T) {
	if os.Getenv(emfileChild) != "" {
		emfileServer(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestListenerSurvivesEMFILE$")
	cmd.Env = append(os.Environ(), emfileChild+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var out strings.Builder // the child's whole output, for failure messages
	var outMu sync.Mutex
	addrc := make(chan string, 1)
	emfile := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			outMu.Lock()
			out.WriteString(sc.Text() + "\n")
			outMu.Unlock()
			if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
				addrc <- a
			}
		}
	}()
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			outMu.Lock()
			out.WriteString(sc.Text() + "\n")
			outMu.Unlock()
			if strings.Contains(sc.Text(), "too many open files") {
				once.Do(func() { close(emfile) })
			}
		}
	}()
	go func() { readers.Wait(); exited <- cmd.Wait() }()
	output := func() string { outMu.Lock(); defer outMu.Unlock(); return out.String() }
	defer func() {
		stdin.Close()
		if err := <-exited; err != nil {
			t.Errorf("server process: %v\n%s", err, output())
		}
	}()

	var addr string
	select {
	case addr = <-addrc:
	case err := <-exited:
		exited <- err
		t.Fatalf("server process ended before listening: %v\n%s", err, output())
	}

	// More connections than the server may hold, each with a valid hello.
	h := hello{version: version, max: 1 << 20}.encode()
	var flood []net.Conn
	for range 64 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, nc)
		if _, err := nc.Write(h[:]); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-emfile:
	case err := <-exited:
		exited <- err
		t.Fatalf("server process ended under the flood: %v\n%s", err, output())
	}
	for _, nc := range flood {
		nc.Close()
	}

	// The same listener serves a good client once descriptors are free.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := New(Options{}).Dial(ctx, addr)
	if err != nil {
		t.Fatalf("a good client after the flood: %v\n%s", err, output())
	}
	defer c.Close()
	if err := c.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	b, err := c.Recv(ctx)
	if err != nil || string(b.Bytes()) != "ping" {
		t.Fatalf("echo after the flood: %v\n%s", err, output())
	}
	b.Release()
}

// emfileServer is the child: it lowers its descriptor limit to a few above
// what it has open, serves echo on a TCP listener, prints the address, and
// stops when its standard input closes. A listener that stops accepting
// makes it exit with status 3.
func emfileServer(t *testing.T) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = uint64(len(fds) + 16)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewDevelopmentEncoderConfig()), zapcore.Lock(os.Stderr), zap.InfoLevel))
	// No connection limit: the flood is to reach the descriptor limit
	// itself (the default limit would refuse it first, see
	// TestDefaultConnectionLimit).
	lis, err := New(Options{Logger: log, MaxConnections: -1}).Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("ADDR %s\n", lis.Addr())

	stopping := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept(context.Background())
			if err != nil {
				select {
				case <-stopping:
					return
				default:
				}
				fmt.Fprintf(os.Stderr, "ACCEPT ENDED: %v\n", err)
				os.Exit(3)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				for {
					b, err := c.Recv(context.Background())
					if err != nil {
						if !errors.Is(err, transport.ErrClosed) {
							fmt.Fprintf(os.Stderr, "recv: %v\n", err)
						}
						return
					}
					err = c.Send(context.Background(), b.Bytes())
					b.Release()
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(stopping)
	lis.Close()
	wg.Wait()
}

// TestDefaultConnectionLimit: with MaxConnections unset, a listener holds
// at most the open-files limit less an eighth of it (at least 64), so that
// a flood of connections leaves the process descriptors for everything
// else; negative means no limit.
func TestDefaultConnectionLimit(t *testing.T) {
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved)
	for _, c := range []struct{ nofile, want int }{{4096, 3584}, {1 << 20, 1<<20 - 1<<17}, {200, 136}, {50, 1}} {
		lim := saved
		lim.Cur = uint64(min(c.nofile, int(saved.Max)))
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
		if int(lim.Cur) != c.nofile {
			t.Logf("hard limit %d: skipping %d", saved.Max, c.nofile)
			continue
		}
		if got := (Options{}).maxConnections(); got != c.want {
			t.Errorf("open-files limit %d: default MaxConnections %d, want %d", c.nofile, got, c.want)
		}
	}
	if got := (Options{MaxConnections: -1}).maxConnections(); got != 0 {
		t.Errorf("MaxConnections -1: %d, want 0 (no limit)", got)
	}
}
