package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/bench/internal/callgrind"
	"github.com/rdmarpc/rdmarpc/bench/plot"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/transport"
)

type options struct {
	serve, target, listen string
	kv                    string
	sizes                 []int
	concs                 []int
	modes                 []string
	window                int
	duration, warmup      time.Duration
	compare               []string // peers, in the order they run after rdmarpc
	csvPath, pngPath      string
	plotCSV, title        string

	ibDev, ibIP    string
	ibGID, ibIters int
	ibLat, ibBW    string
	ibPort         int

	cpuProfile, tracePath string
	inProcess             bool
	callgrind             bool
	callgrindDumps        string
	lend                  bool
	rdma                  bench.RDMAFlags
}

func main() {
	if impl := os.Getenv(childEnv); impl != "" {
		os.Exit(childMain(impl, os.Stdin, os.Stdout))
	}
	os.Exit(runMain(os.Args[1:]))
}

// runMain runs rpcbench with args and returns its exit code.
func runMain(args []string) int {
	if err := run(args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rpcbench:", err)
		return 1
	}
	return 0
}

func run(args []string, stdout io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	if o.lend {
		os.Setenv(lendEnv, "1") // for the server processes too
	}
	if !o.rdma.IsDefault() {
		os.Setenv(rdmaEnv, o.rdma.Encode()) // for the server processes too
	}
	if err := setLargeEnv(o); err != nil {
		return err
	}
	if o.callgrind {
		if !callgrind.Running() {
			return runUnderCallgrind(args, o.callgrindDumps, stdout)
		}
		// Callgrind fails an assertion on the SIGCHLD of a server
		// process's exit; ignored, the kernel reaps the child itself.
		signal.Ignore(syscall.SIGCHLD)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.cpuProfile != "" {
		// A server in a child process profiles itself too (childMain).
		os.Setenv(childProfileEnv, o.cpuProfile+".server")
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.tracePath != "" {
		f, err := os.Create(o.tracePath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	switch {
	case o.serve != "":
		return serve(ctx, o.serve, stdout)
	case o.plotCSV != "":
		return plotOnly(o)
	}
	return drive(ctx, o, stdout)
}

func parseFlags(args []string) (options, error) {
	var (
		o                   options
		sizes, concs, modes string
		compare             string
		compareGRPC         bool
	)
	fs := flag.NewFlagSet("rpcbench", flag.ContinueOnError)
	fs.StringVar(&o.serve, "serve", "", "serve Echo on this `URL` (tcp://host:port, rdma://ip:port) until interrupted")
	fs.StringVar(&o.target, "target", "", "drive the Echo server at this `URL`; empty: start one in this process on --listen")
	fs.StringVar(&o.kv, "kv", "", "also run a KV Get cell after each unary echo cell, against the kvstore server (kvserver) at this `URL`: Gets of keys written first, values of the cell's size; prints KV Get / echo")
	fs.StringVar(&o.listen, "listen", "tcp://127.0.0.1:0", "where rdmarpc's server listens when there is no --target")
	fs.BoolVar(&o.inProcess, "inproc", false, "run the servers (rdmarpc's without --target, and every peer's) in this process, not each in a child process of its own: both ends then share one process's cores, heap and counters")
	fs.StringVar(&sizes, "sizes", "64,1KiB,64KiB", "payload `sizes`, comma-separated")
	fs.StringVar(&concs, "conc", "1,16,64", "`callers` sharing the connection, comma-separated")
	fs.StringVar(&modes, "modes", "unary", "what a call is, comma-separated: unary (a unary Say), pingpong (one message each way on a long-lived stream per caller), stream (a flood on one stream per caller: messages echoed per second)")
	var window string
	fs.StringVar(&window, "window", "0", "rdmarpc's per-stream flow-control window, both ends (InitialWindowSize, WithInitialWindowSize); 0: the default, 64KiB")
	fs.DurationVar(&o.duration, "duration", 3*time.Second, "measured time per cell")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured calls before each cell")
	fs.StringVar(&compare, "compare", "", "also run every cell against these `peers` on loopback (each server in a process of its own unless --inproc), and print the ratio of rdmarpc to each: raw (a raw TCP ping-pong, the floor), drpc (storj.io/drpc), grpc (gRPC-go); comma-separated, run in this order after rdmarpc")
	fs.BoolVar(&compareGRPC, "compare-grpc", false, "same as --compare grpc")
	fs.StringVar(&o.csvPath, "csv", "", "write the results to this CSV `file`")
	fs.StringVar(&o.pngPath, "png", "", "plot the results to this PNG `file`")
	fs.StringVar(&o.plotCSV, "plot", "", "only plot this CSV `file` (from --csv) to --png")
	fs.StringVar(&o.title, "title", "", "plot title (default: what was compared, GOMAXPROCS)")
	fs.StringVar(&o.ibDev, "ib-dev", "", "run ib_send_lat and ib_send_bw on this RDMA `device` (rxe0) at the same sizes")
	fs.IntVar(&o.ibGID, "ib-gid", bench.EnvInt("RDMARPC_TEST_GID_INDEX", -1), "GID index for perftest's -x (default $RDMARPC_TEST_GID_INDEX; -1 leaves it out)")
	fs.StringVar(&o.ibIP, "ib-ip", os.Getenv("RDMARPC_TEST_IP"), "this host's IP on --ib-dev, for perftest's client (default $RDMARPC_TEST_IP, else the target's host)")
	fs.IntVar(&o.ibIters, "ib-iters", 1000, "perftest iterations (-n)")
	fs.IntVar(&o.ibPort, "ib-port", 0, "perftest's TCP port (-p; 0: its default 18515)")
	fs.StringVar(&o.ibLat, "ib-lat", "", "read ib_send_lat output from these `files` (comma-separated) instead of running it")
	fs.StringVar(&o.ibBW, "ib-bw", "", "read ib_send_bw output from these `files` (comma-separated) instead of running it")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (client and in-process server) to this `file`; a server in a child process writes its own to file.server")
	fs.BoolVar(&o.lend, "lend", false, "rdmarpc's server lends each request's bytes to the handler instead of copying them (rpc.LendRequestBytes; the echo answers with them)")
	fs.StringVar(&o.callgrindDumps, "callgrind-dumps", "", "with --callgrind, keep callgrind's dumps in this `dir` (client.PID.N and server.PID.N, the Nth interval of each process: a cell's measured calls are the even ones) for callgrind_annotate, instead of deleting them")
	fs.BoolVar(&o.callgrind, "callgrind", false, "count the instructions each end executes per call: the client and every server process run under valgrind's callgrind (about 50 times slower, so use a short --duration and --warmup); the counts do not depend on the machine's load, and include the runtime's work in every thread")
	fs.StringVar(&o.tracePath, "trace", "", "write a runtime execution trace of the run to this `file` (go tool trace)")
	o.rdma.Register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range bench.SplitList(sizes) {
		n, err := bench.ParseSize(s)
		if err != nil {
			return o, err
		}
		o.sizes = append(o.sizes, n)
	}
	for _, s := range bench.SplitList(concs) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return o, fmt.Errorf("bad concurrency %q", s)
		}
		o.concs = append(o.concs, n)
	}
	w, err := bench.ParseSize(window)
	if err != nil || w > 1<<30 {
		return o, fmt.Errorf("bad --window %q", window)
	}
	o.window = w
	for _, m := range bench.SplitList(modes) {
		if m != "unary" && m != bench.ModePingPong && m != bench.ModeStream {
			return o, fmt.Errorf("bad mode %q: want unary, pingpong or stream", m)
		}
		o.modes = append(o.modes, m)
	}
	if len(o.modes) == 0 {
		o.modes = []string{"unary"}
	}
	for _, p := range bench.SplitList(compare) {
		if _, ok := peers[p]; !ok {
			return o, fmt.Errorf("bad peer %q in --compare: want raw, drpc or grpc", p)
		}
		if !slices.Contains(o.compare, p) {
			o.compare = append(o.compare, p)
		}
	}
	if compareGRPC && !slices.Contains(o.compare, "grpc") {
		o.compare = append(o.compare, "grpc")
	}
	if len(o.compare) > 0 && o.target != "" {
		return o, errors.New("--compare and --compare-grpc run every server on this host, as rdmarpc's should be for the ratios to mean anything; drop --target")
	}
	if o.plotCSV != "" && o.pngPath == "" {
		return o, errors.New("--plot needs --png")
	}
	if _, err := o.rdma.Options(); err != nil {
		return o, err
	}
	if (o.ibDev != "") && (o.ibLat != "" || o.ibBW != "") {
		return o, errors.New("give --ib-dev (run perftest) or --ib-lat/--ib-bw (read its output), not both")
	}
	return o, nil
}

func serve(ctx context.Context, target string, stdout io.Writer) error {
	srv, err := bench.StartServer(target, append(lendOpts(), largeServerOpts()...)...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "serving Echo on %s\n", srv.Target())
	<-ctx.Done()
	return srv.Stop()
}

func plotOnly(o options) error {
	f, err := os.Open(o.plotCSV)
	if err != nil {
		return err
	}
	defer f.Close()
	rs, err := bench.ReadCSV(f)
	if err != nil {
		return fmt.Errorf("%s: %w", o.plotCSV, err)
	}
	title := o.title
	if title == "" {
		title = "rpcbench: " + o.plotCSV
	}
	return writePNG(o.pngPath, title, rs)
}

// drive runs the matrix size by size: raw verbs first (when asked), then
// for each concurrency rdmarpc and, right after it, each peer of
// --compare, so that the figures compared were measured seconds apart.
func drive(ctx context.Context, o options, stdout io.Writer) error {
	target := o.target
	sopts := append(lendOpts(), largeServerOpts()...)
	dopts := largeDialOpts()
	if o.window > 0 {
		sopts = append(sopts, rpc.InitialWindowSize(int32(o.window)))
		dopts = append(dopts, rpc.WithInitialWindowSize(int32(o.window)))
	}
	var meter bench.Meter // the server's end, in a child process
	switch {
	case target != "":
	case o.inProcess:
		srv, err := bench.StartServer(o.listen, sopts...)
		if err != nil {
			return err
		}
		defer srv.Stop()
		target = srv.Target()
	default:
		ch, err := startChild("rdmarpc", o.listen, o.window)
		if err != nil {
			return err
		}
		defer ch.stop()
		target, meter = ch.addr, ch
	}
	scheme, _, err := transport.ParseTarget(target)
	if err != nil {
		return err
	}
	// A transport that counts what it does (credits waited for, sends
	// posted …) gets its counts per call printed under each cell.
	var ctrs transport.Counters
	if tr, _, err := transport.ForTarget(target); err == nil {
		ctrs, _ = tr.(transport.Counters)
	}
	ours, err := bench.Dial(ctx, target, dopts...)
	if err != nil {
		return err
	}
	defer ours.Close()

	var theirs []peer
	for _, name := range o.compare {
		p, err := startPeer(peers[name], o.inProcess)
		if err != nil {
			return fmt.Errorf("starting the %s peer: %w", name, err)
		}
		defer p.stop()
		theirs = append(theirs, p)
	}

	var kv *kvGet
	if o.kv != "" {
		if kv, err = dialKV(ctx, o.kv, o.sizes, dopts...); err != nil {
			return err
		}
		defer kv.Close()
	}

	ib, err := newRawVerbs(o, target, stdout)
	if err != nil {
		return err
	}

	where := "servers in child processes"
	switch {
	case o.target != "":
		where = "server at --target"
	case o.inProcess:
		where = "servers in this process"
	}
	fmt.Fprintf(stdout, "rpcbench: %s, GOMAXPROCS=%d, %s per cell after %s warm-up, %s\n", target, runtime.GOMAXPROCS(0), o.duration, o.warmup, where)
	if scheme == "rdma" {
		fmt.Fprintf(stdout, "rpcbench: rdma options (both ends): %s\n", o.rdma)
	}
	var ourRs, peerRs, ibRs, kvRs []bench.Result
	ourBy := map[string][]bench.Result{}
	peerBy := make([]map[string][]bench.Result, len(theirs)) // per peer, per mode
	for i := range peerBy {
		peerBy[i] = map[string][]bench.Result{}
	}
	for _, p := range theirs {
		for _, mode := range o.modes {
			if mode != "unary" && !p.streams {
				fmt.Fprintf(stdout, "rpcbench: %s runs unary cells only; no %s rows for it\n", p.impl, mode)
			}
		}
	}
	for _, size := range o.sizes {
		if ib != nil {
			r, err := ib.result(ctx, size)
			if err != nil {
				return err
			}
			ibRs = append(ibRs, r)
			progress(stdout, r)
		}
		for _, c := range o.concs {
			for _, mode := range o.modes {
				cfg := bench.Config{Impl: implName("rdmarpc", mode), Transport: scheme, Size: size, Concurrency: c, Duration: o.duration, Warmup: o.warmup, Server: meter}
				var before map[string]uint64
				if ctrs != nil {
					before = ctrs.Counters()
				}
				r, err := runMode(ctx, ours, mode, cfg)
				if err != nil {
					return fmt.Errorf("%s %s conc %d: %w", cfg.Impl, bench.SizeName(size), c, err)
				}
				ourRs, ourBy[mode] = append(ourRs, r), append(ourBy[mode], r)
				progress(stdout, r)
				if ctrs != nil {
					perCall(stdout, before, ctrs.Counters(), r.WarmupCalls+r.Calls)
				}
				for i, p := range theirs {
					if mode != "unary" && !p.streams {
						continue
					}
					cfg.Impl, cfg.Transport, cfg.Server = implName(p.impl, mode), "tcp", p.meter
					r, err := runMode(ctx, p.client, mode, cfg)
					if err != nil {
						return fmt.Errorf("%s %s conc %d: %w", cfg.Impl, bench.SizeName(size), c, err)
					}
					peerRs, peerBy[i][mode] = append(peerRs, r), append(peerBy[i][mode], r)
					progress(stdout, r)
				}
				if kv != nil && mode == "unary" {
					cfg.Impl, cfg.Transport, cfg.Server = "kv-get", kvScheme(o.kv), nil
					r, err := bench.Run(ctx, kv, cfg)
					if err != nil {
						return fmt.Errorf("%s %s conc %d: %w", cfg.Impl, bench.SizeName(size), c, err)
					}
					kvRs = append(kvRs, r)
					progress(stdout, r)
				}
			}
		}
	}

	all := append(append(append(append([]bench.Result(nil), ibRs...), ourRs...), peerRs...), kvRs...)
	fmt.Fprintln(stdout)
	bench.WriteTable(stdout, all)
	for _, mode := range o.modes {
		for i, p := range theirs {
			if len(peerBy[i][mode]) == 0 {
				continue
			}
			fmt.Fprintln(stdout)
			bench.WriteRatios(stdout, implName("rdmarpc", mode)+"-"+scheme+" / "+implName(p.title, mode)+"-tcp, same size and concurrency (latency: below 1 is faster; calls/s, MB/s: above 1 is more; allocs: below 1 is fewer)",
				bench.Ratios(ourBy[mode], peerBy[i][mode]), true)
		}
		if len(ibRs) > 0 {
			fmt.Fprintln(stdout)
			bench.WriteRatios(stdout, implName("rdmarpc", mode)+"-"+scheme+" / raw verbs, same size (latency vs the ib_send_lat round trip, 2 × what it prints, a ping-pong: above conc 1 ours includes queueing; throughput vs ib_send_bw's one-way stream, TX depth 128; a stream row echoes every message, so it moves the payload both ways)",
				bench.Ratios(ourBy[mode], ibRs), false)
		}
	}
	if len(kvRs) > 0 {
		fmt.Fprintln(stdout)
		bench.WriteRatios(stdout, "KV Get ("+o.kv+") / rdmarpc echo ("+target+"), same size and concurrency (the Get's value is the echo's payload; its request carries only the key)",
			bench.Ratios(kvRs, ourBy["unary"]), true)
	}
	if o.csvPath != "" {
		var buf bytes.Buffer
		if err := bench.WriteCSV(&buf, all); err != nil {
			return err
		}
		if err := os.WriteFile(o.csvPath, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if o.pngPath != "" {
		title := o.title
		if title == "" {
			title = fmt.Sprintf("Echo over %s, GOMAXPROCS=%d", target, runtime.GOMAXPROCS(0))
		}
		return writePNG(o.pngPath, title, all)
	}
	return nil
}

// implName names a row: the implementation, and the mode unless unary.
func implName(impl, mode string) string {
	if mode == "unary" || mode == "" {
		return impl
	}
	return impl + "/" + mode
}

// runMode runs one cell of mode with c.
func runMode(ctx context.Context, c bench.Client, mode string, cfg bench.Config) (bench.Result, error) {
	switch mode {
	case bench.ModePingPong:
		return bench.RunPingPong(ctx, c, cfg)
	case bench.ModeStream:
		return bench.RunStream(ctx, c, cfg)
	}
	return bench.Run(ctx, c, cfg)
}

// kvScheme is the transport column of the KV rows.
func kvScheme(target string) string {
	scheme, _, err := transport.ParseTarget(target)
	if err != nil {
		return "?"
	}
	return scheme
}

func progress(w io.Writer, r bench.Result) {
	fmt.Fprintf(w, "  %-17s %-4s %6s conc %-3s  p50 %8.1f µs  p99 %8.1f µs  %9.0f calls/s\n",
		r.Impl, r.Transport, bench.SizeName(r.Size), strconv.Itoa(r.Concurrency),
		float64(r.P50)/1e3, float64(r.P99)/1e3, r.CallsPerSec())
	if r.Server != (bench.EndCosts{}) {
		fmt.Fprintf(w, "           per call, client / server process: CPU %.1f / %.1f µs, voluntary context switches %.2f / %.2f, allocs %.1f / %.1f\n",
			float64(r.CPUPerCall)/1e3, float64(r.Server.CPU)/1e3, r.VCSWPerCall, r.Server.VCSW, r.AllocsPerCall, r.Server.Allocs)
	}
	if r.InstrPerCall > 0 {
		fmt.Fprintf(w, "           instructions per call (callgrind), client / server process: %.0f / %.0f\n", r.InstrPerCall, r.Server.Instr)
	}
}

// perCall prints the counters that moved during a cell (warm-up and
// measured calls), per call. They count both ends when the server is in
// this process.
func perCall(w io.Writer, before, after map[string]uint64, calls int64) {
	if calls <= 0 {
		return
	}
	keys := make([]string, 0, len(after))
	for k := range after {
		if after[k] != before[k] {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%.3g", k, float64(after[k]-before[k])/float64(calls))
	}
	fmt.Fprintf(w, "           transport counters per call (both ends when the server is in process):%s\n", b.String())
}

func writePNG(path, title string, rs []bench.Result) error {
	var buf bytes.Buffer
	if err := plot.Write(&buf, title, rs); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
