package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"
)

// Options say how to run a perftest pair on this machine.
type Options struct {
	Device     string   // -d, the RDMA device ("rxe0")
	GIDIndex   int      // -x, the RoCE v2 GID index; negative leaves it out
	ServerIP   string   // the address the client connects to: this host's IP on Device
	Port       int      // -p; 0 means perftest's default, 18515
	Iterations int      // -n; 0 means 1000
	Extra      []string // more flags, given to both sides
}

func (o Options) args(size int) []string {
	a := []string{"-d", o.Device, "-s", strconv.Itoa(size)}
	if o.GIDIndex >= 0 {
		a = append(a, "-x", strconv.Itoa(o.GIDIndex))
	}
	if o.Port > 0 {
		a = append(a, "-p", strconv.Itoa(o.Port))
	}
	n := o.Iterations
	if n <= 0 {
		n = 1000
	}
	a = append(a, "-n", strconv.Itoa(n))
	return append(a, o.Extra...)
}

// Run runs tool ("ib_send_lat", "ib_send_bw") for one message size: a server
// in the background and a client against it, on this host. It returns the
// client's output, which holds the result table (and perftest's complaint,
// on failure). A client that finds no server yet is retried for a few
// seconds: the server needs a moment to listen.
func Run(ctx context.Context, tool string, size int, o Options) ([]byte, error) {
	if o.Device == "" || o.ServerIP == "" {
		return nil, errors.New("perftest: Device and ServerIP are required")
	}
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	var srvOut bytes.Buffer
	srv := exec.CommandContext(srvCtx, tool, o.args(size)...)
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("perftest: start %s server: %w", tool, err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()

	var (
		out []byte
		err error
	)
	for attempt := 0; ; attempt++ {
		select {
		case <-srvDone:
			return nil, fmt.Errorf("perftest: %s server exited before the client ran:\n%s", tool, srvOut.Bytes())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		out, err = exec.CommandContext(ctx, tool, append(o.args(size), o.ServerIP)...).CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("Couldn't connect")) || attempt == 20 {
			break
		}
	}
	// The server ends on its own once the client is done; give it a moment.
	select {
	case <-srvDone:
	case <-time.After(5 * time.Second):
		stopServer()
		<-srvDone
	}
	if err != nil {
		return out, fmt.Errorf("perftest: %s -s %d: %w\nclient:\n%s\nserver:\n%s", tool, size, err, out, srvOut.Bytes())
	}
	return out, nil
}

// ErrAfterResult is wrapped by the error of RunLat and RunBW when perftest
// printed its result and failed afterwards, as it sometimes does in the
// closing handshake with its peer. The row returned with it is whole.
var ErrAfterResult = errors.New("perftest failed after printing its result")

// runRow runs tool and parses the first row of its result table with parse.
func runRow[R any](ctx context.Context, tool string, size int, o Options, parse func(io.Reader) ([]R, error)) (R, error) {
	var zero R
	out, runErr := Run(ctx, tool, size, o)
	rows, err := parse(bytes.NewReader(out))
	switch {
	case err != nil && runErr != nil:
		return zero, runErr
	case err != nil:
		return zero, fmt.Errorf("%w:\n%s", err, out)
	case runErr != nil:
		return rows[0], fmt.Errorf("%w: %w", ErrAfterResult, runErr)
	}
	return rows[0], nil
}

// RunLat runs ib_send_lat for one size and returns its row.
func RunLat(ctx context.Context, size int, o Options) (LatRow, error) {
	return runRow(ctx, "ib_send_lat", size, o, ParseLat)
}

// RunBW runs ib_send_bw for one size and returns its row.
func RunBW(ctx context.Context, size int, o Options) (BWRow, error) {
	return runRow(ctx, "ib_send_bw", size, o, ParseBW)
}
