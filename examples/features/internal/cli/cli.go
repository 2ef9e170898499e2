// Package cli is what the feature examples' commands share: a main that
// runs until SIGINT/SIGTERM, a server loop that drains on cancellation, and
// a test helper that starts a server part and learns the addresses it
// listens on.
package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

// Run is the body of an example's command.
type Run func(ctx context.Context, args []string, stdout io.Writer) error

// Main runs run with the program's arguments until it returns or the
// process is asked to stop, and exits 1 on error.
func Main(run Run) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// Listen listens on target (tcp://host:port, rdma://ip:port) with opts
// and prints the address it got as "server listening on <url>", the line
// StartServer waits for.
func Listen(target string, stdout io.Writer, opts ...rpc.ListenOption) (transport.Listener, error) {
	lis, err := rpc.Listen(target, opts...)
	if err != nil {
		return nil, err
	}
	scheme := "tcp"
	if i := strings.Index(target, "://"); i > 0 {
		scheme = target[:i]
	}
	fmt.Fprintf(stdout, "server listening on %s://%s\n", scheme, lis.Addr())
	return lis, nil
}

// Serve serves s on lis until ctx ends, then stops it gracefully.
func Serve(ctx context.Context, s *rpc.Server, lis transport.Listener) error {
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.GracefulStop()
	if err := <-served; err != nil && !errors.Is(err, rpc.ErrServerStopped) {
		return err
	}
	return nil
}

var listening = regexp.MustCompile(`server listening on (\S+)`)

// StartServer runs a server part in the background with args and returns
// the first n addresses it reports listening on. The server is stopped
// (its context cancelled) and waited for when the test ends; an error it
// returns fails the test.
func StartServer(t testing.TB, run Run, n int, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw)
		pw.CloseWithError(io.EOF)
		done <- err
	}()
	var (
		addrs []string
		wg    sync.WaitGroup
	)
	got := make(chan struct{})
	wg.Add(1)
	go func() { // reads the server's output until it ends
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			t.Log("server: " + sc.Text())
			if m := listening.FindStringSubmatch(sc.Text()); m != nil && len(addrs) < n {
				addrs = append(addrs, m[1])
				if len(addrs) == n {
					close(got)
				}
			}
		}
		io.Copy(io.Discard, pr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
		wg.Wait()
	})
	select {
	case <-got:
		return addrs
	case err := <-done:
		done <- err
		t.Fatalf("server ended before listening: %v", err)
		return nil
	}
}

// StaticTarget is the target naming the servers addrs (URLs of one
// transport: tcp://h:p or rdma://ip:p) through the static resolver:
// "tcp+ipv4:h1:p1,h2:p2".
func StaticTarget(addrs []string) (string, error) {
	var scheme string
	hosts := make([]string, 0, len(addrs))
	for _, a := range addrs {
		s, host, ok := strings.Cut(a, "://")
		if !ok {
			s, host = "tcp", a
		}
		if scheme != "" && s != scheme {
			return "", fmt.Errorf("addresses of two transports (%s and %s): one target names one", scheme, s)
		}
		scheme = s
		hosts = append(hosts, host)
	}
	if len(hosts) == 0 {
		return "", errors.New("no address")
	}
	family := "ipv4"
	if strings.HasPrefix(hosts[0], "[") {
		family = "ipv6"
	}
	return scheme + "+" + family + ":" + strings.Join(hosts, ","), nil
}

// Split splits a comma-separated flag value.
func Split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Output is an io.Writer safe for concurrent use that keeps what is
// written and tells when it contains a string.
type Output struct {
	mu  sync.Mutex
	buf strings.Builder
	on  []watch
}

type watch struct {
	s  string
	ch chan struct{}
}

func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	kept := o.on[:0]
	for _, w := range o.on {
		if strings.Contains(o.buf.String(), w.s) {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	o.on = kept
	return len(p), nil
}

// String is what was written.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// When returns a channel closed once the output contains s.
func (o *Output) When(s string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(o.buf.String(), s) {
		close(ch)
	} else {
		o.on = append(o.on, watch{s, ch})
	}
	return ch
}
