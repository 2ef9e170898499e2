package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/callgrind"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// A server in a process of its own: rpcbench runs itself again with
// childEnv naming the implementation (rdmarpc, or a peer of --compare). The
// child serves on loopback, prints "ready ADDR", then answers its parent
// on stdin: "begin" (it notes what it has spent: "ok"), "end CALLS" (what
// it spent since, per call: "CPU_NS VCSW ALLOCS INSTR CGO WAKEUPS"), until stdin ends, when
// it stops its server and exits.
const (
	childEnv       = "RPCBENCH_CHILD"
	childListenEnv = "RPCBENCH_CHILD_LISTEN" // rdmarpc's listen URL
	childWindowEnv = "RPCBENCH_CHILD_WINDOW" // rdmarpc's --window
	lendEnv        = "RPCBENCH_LEND"         // --lend, in every process
	rdmaEnv        = "RPCBENCH_RDMA"         // the --rdma-* flags, in every process (RDMAFlags.Encode)
	// childProfileEnv: the child writes a CPU profile of its life to this
	// file (--cpuprofile's, with .server).
	childProfileEnv = "RPCBENCH_CHILD_CPUPROFILE"
)

// lendOpts is the server options of --lend.
func lendOpts() []rpc.ServerOption {
	if os.Getenv(lendEnv) == "" {
		return nil
	}
	return []rpc.ServerOption{rpc.LendRequestBytes(true)}
}

// childMain is the child's whole life; it returns the exit code.
func childMain(impl string, stdin io.Reader, stdout io.Writer) int {
	if path := os.Getenv(childProfileEnv); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "rpcbench server:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "rpcbench server:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if err := configureTransports(); err != nil {
		fmt.Fprintln(os.Stderr, "rpcbench server:", err)
		return 1
	}
	addr, stop, err := serveImpl(impl, os.Getenv(childListenEnv), os.Getenv(childWindowEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rpcbench server:", err)
		return 1
	}
	defer stop()
	fmt.Fprintln(stdout, "ready", addr)
	var begin bench.Snapshot
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "begin":
			begin = bench.TakeSnapshot()
			fmt.Fprintln(stdout, "ok")
		case "end":
			now := bench.TakeSnapshot()
			calls, _ := strconv.ParseInt(arg, 10, 64)
			c := begin.PerCall(now, calls)
			fmt.Fprintln(stdout, int64(c.CPU), c.VCSW, c.Allocs, c.Instr, c.Cgo, c.Wakeups)
		default:
			fmt.Fprintf(os.Stderr, "rpcbench server: unknown command %q\n", sc.Text())
			return 1
		}
	}
	return 0
}

// serveImpl starts impl's server on loopback (rdmarpc's on listen, with
// the flow-control window given, "" or "0" for the default).
func serveImpl(impl, listen, window string) (addr string, stop func(), err error) {
	if impl != "rdmarpc" {
		k, ok := peers[impl]
		if !ok {
			return "", nil, fmt.Errorf("no server %q", impl)
		}
		return k.serve()
	}
	opts := append(lendOpts(), largeServerOpts()...)
	if w, _ := strconv.Atoi(window); w > 0 {
		opts = append(opts, rpc.InitialWindowSize(int32(w)))
	}
	srv, err := bench.StartServer(listen, opts...)
	if err != nil {
		return "", nil, err
	}
	return srv.Target(), func() { srv.Stop() }, nil
}

// child is a server in a child process, and the bench.Meter of its end.
type child struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr string
}

// startChild starts impl's server in a child process and waits until it
// serves.
func startChild(impl, listen string, window int) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	if dir := os.Getenv(callgrindDirEnv); dir != "" && callgrind.Running() {
		cmd = callgrindCommand(dir, "server", exe)
	} else {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, childEnv+"="+impl, childListenEnv+"="+listen, childWindowEnv+"="+strconv.Itoa(window))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	line, err := c.line()
	addr, ok := strings.CutPrefix(line, "ready ")
	if err != nil || !ok {
		c.stop()
		return nil, fmt.Errorf("%s server process: %q, %v", impl, line, err)
	}
	c.addr = addr
	return c, nil
}

func (c *child) line() (string, error) {
	if !c.out.Scan() {
		if err := c.out.Err(); err != nil {
			return "", err
		}
		return "", io.ErrUnexpectedEOF
	}
	return c.out.Text(), nil
}

// Begin implements bench.Meter.
func (c *child) Begin() error {
	if _, err := fmt.Fprintln(c.in, "begin"); err != nil {
		return err
	}
	if l, err := c.line(); err != nil || l != "ok" {
		return fmt.Errorf("server process: %q, %v", l, err)
	}
	return nil
}

// End implements bench.Meter.
func (c *child) End(calls int64) (bench.EndCosts, error) {
	if _, err := fmt.Fprintln(c.in, "end", calls); err != nil {
		return bench.EndCosts{}, err
	}
	l, err := c.line()
	if err != nil {
		return bench.EndCosts{}, err
	}
	var ns int64
	var e bench.EndCosts
	if _, err := fmt.Sscan(l, &ns, &e.VCSW, &e.Allocs, &e.Instr, &e.Cgo, &e.Wakeups); err != nil {
		return e, fmt.Errorf("server process: %q: %w", l, err)
	}
	e.CPU = time.Duration(ns)
	return e, nil
}

// stop ends the child (its stdin closes) and waits for it.
func (c *child) stop() {
	c.in.Close()
	if err := c.cmd.Wait(); err != nil && !errors.Is(err, os.ErrProcessDone) && !errors.Is(err, syscall.ECHILD) { // ECHILD: reaped already (--callgrind)
		fmt.Fprintln(os.Stderr, "rpcbench: server process:", err)
	}
}
