package rdma

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/rpc/rpctest/testpb"
)

// The scale benchmark of issue 10 item 5 (bench/results/scale.md; earlier runs in bench/results/history/2026-12-01-scale):
// for each N, a fresh server process and this one as the client open N
// idle rdma:// RPC connections, and each side reports what they cost. It
// runs only when asked: -scale.n=100,1000,...

var (
	scaleN         = flag.String("scale.n", "", "connection counts for TestScaleTable (comma-separated); empty: skip")
	scaleKeepalive = flag.Bool("scale.keepalive", true, "TestScaleTable: keepalive on (the default 30 s) or off, both sides")
	scaleIdle      = flag.Duration("scale.idle", 10*time.Second, "TestScaleTable: the idle interval whose CPU is measured (longer than the keepalive's 30 s to see its pings)")
	scaleEchoes    = flag.Int("scale.echoes", 200, "TestScaleTable: echoes timed on the extra connection (after 20 of warm-up)")
	scaleProfile   = flag.String("scale.cpuprofile", "", "TestScaleTable: a directory where each side writes a CPU profile of the idle interval (client-N.pprof, server-N.pprof); empty: none")
	scaleOpts      = flag.String("scale.opts", "small", "TestScaleTable: Options of both sides: small (scaleOptions), default (Options{}), perconn (Options{Receive: ReceivePerConnection}), shared (Options{Receive: ReceiveShared}) or shared3 (shared, SharedCredits 3)")
)

// scaleConnect bounds each connection's setup, handshake and SETTINGS:
// minutes, not the defaults' 10-20 s, which thousands of dials on a loaded
// emulated guest overran (2026-12-03: N=10000 failed at connection 7027,
// "no SETTINGS from the server", at 40 ms of setup per connection).
const scaleConnect = 3 * time.Minute

// scaleOptionsNamed are the Options -scale.opts names, with a handshake
// timeout of a minute: thousands of dials on a loaded emulated guest took
// longer than the default 10 s (N=10000 failed so on 2026-12-03).
func scaleOptionsNamed(name string) (Options, error) {
	o, err := scaleOptionsBase(name)
	o.HandshakeTimeout = scaleConnect
	return o, err
}

func scaleOptionsBase(name string) (Options, error) {
	switch name {
	case "", "small":
		return scaleOptions, nil
	case "default":
		return Options{}, nil
	case "perconn":
		return Options{Receive: ReceivePerConnection}, nil
	case "shared":
		return Options{Receive: ReceiveShared}, nil
	case "shared3":
		// A guaranteed window of 3: the credit a PONG takes is owed
		// below the credit-only threshold of 2, so it rides on the next
		// PING instead of a message of its own.
		return Options{Receive: ReceiveShared, SharedCredits: 3}, nil
	}
	return Options{}, fmt.Errorf("-scale.opts=%q: want small, default, perconn, shared or shared3", name)
}

// scaleKeepaliveParams is the keepalive of both sides: the default, or off.
func scaleKeepaliveParams(on bool) rpc.Keepalive {
	if on {
		return rpc.Keepalive{}
	}
	return rpc.Keepalive{Time: -1}
}

// scaleOptions are small pools, so that one 2 GiB guest holds both ends of
// thousands of connections: 16 KiB of receive buffers registered per
// connection per side, and the shared send arena's 8 KiB (more under load)
// once per side (24 KiB per connection before the arena).
var scaleOptions = Options{Receive: ReceivePerConnection, BufferSize: 4096, RecvBuffers: 2, SendSlots: 2}

// procStats is what one process holds, and running totals of what it did
// (the idle window's share of them, per connection, is what one keepalive
// round costs).
type procStats struct {
	rssKiB     int64
	registered uint64
	fds        int
	goroutines int
	cpuTicks   int64 // user + system, in clock ticks
	costs      [len(costNames)]uint64
}

// costNames are the running totals the idle table shows per connection:
// transport counters (messages sent, credit-only messages among them, send
// and receive completions, completion queues armed, completion events
// read), then the process's cgo calls, heap allocations, estimated
// goroutine wake-ups and context switches.
var costNames = [...]string{"messages_sent", "credit_only_sent", "send_completions", "recv_completions", "cq_arms", "cq_events", "cgo", "allocs", "wakeups", "csw"}

func (s procStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d %d %d %d", s.rssKiB, s.registered, s.fds, s.goroutines, s.cpuTicks)
	for _, v := range s.costs {
		fmt.Fprintf(&b, " %d", v)
	}
	return b.String()
}

func parseStats(line string) (procStats, error) {
	var s procStats
	f := strings.Fields(line)
	if len(f) != 5+len(s.costs) {
		return s, fmt.Errorf("stats line %q: want %d fields", line, 5+len(s.costs))
	}
	_, err := fmt.Sscanf(strings.Join(f[:5], " "), "%d %d %d %d %d", &s.rssKiB, &s.registered, &s.fds, &s.goroutines, &s.cpuTicks)
	for i := range s.costs {
		if err == nil {
			s.costs[i], err = strconv.ParseUint(f[5+i], 10, 64)
		}
	}
	return s, err
}

// readCosts fills s.costs from tr's counters and the runtime.
func (s *procStats) readCosts(tr *Transport) {
	c := tr.Counters()
	for i, n := range costNames[:6] {
		s.costs[i] = c[n]
	}
	m := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	var lat uint64
	if m[1].Value.Kind() == metrics.KindFloat64Histogram {
		for _, n := range m[1].Value.Float64Histogram().Counts {
			lat += n
		}
	}
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	// The runtime records the scheduling latency of one goroutine
	// transition in 8: times 8, the wake-ups (as bench/costs.go).
	s.costs[6], s.costs[7], s.costs[8], s.costs[9] = uint64(runtime.NumCgoCall()), m[0].Value.Uint64(), 8*lat, uint64(ru.Nvcsw+ru.Nivcsw)
}

// perConn is the idle window's costs (b minus a) per connection, as table
// cells.
func perConn(a, b procStats, n int) string {
	var cells []string
	for i := range a.costs {
		cells = append(cells, fmt.Sprintf("%.2f", float64(b.costs[i]-a.costs[i])/float64(n)))
	}
	return strings.Join(cells, " | ")
}

// selfStats reads this process's numbers from /proc.
func selfStats(tr *Transport) (procStats, error) {
	var s procStats
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return s, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			s.rssKiB, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return s, err
	}
	// Fields after the command's closing parenthesis: utime and stime are
	// the 12th and 13th.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("short /proc/self/stat: %q", stat)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpuTicks = u + k
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	s.goroutines = runtime.NumGoroutine()
	s.registered = tr.Gauges()["registered_bytes"]
	s.readCosts(tr)
	return s, nil
}

type scaleEcho struct{ testpb.UnimplementedTestServer }

func (scaleEcho) Echo(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Payload: in.Payload}, nil
}

// TestScaleHelperServer is the server process of TestScaleTable: it
// prints its address, then one line of its numbers for each line read,
// until its input ends.
func TestScaleHelperServer(t *testing.T) {
	if os.Getenv("RDMARPC_HELPER") != "scale" {
		t.Skip("the server half of TestScaleTable, run as a child process")
	}
	o, err := scaleOptionsNamed(os.Getenv("RDMARPC_SCALE_OPTS"))
	if err != nil {
		t.Fatal(err)
	}
	tr := New(o)
	lis, err := tr.Listen(net.JoinHostPort(os.Getenv("RDMARPC_TEST_IP"), "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := rpc.NewServer(rpc.KeepaliveParams(scaleKeepaliveParams(os.Getenv("RDMARPC_SCALE_KEEPALIVE") != "off")), rpc.ConnectionTimeout(scaleConnect))
	testpb.RegisterTestServer(s, scaleEcho{})
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	fmt.Println(lis.Addr().String())
	in := bufio.NewScanner(os.Stdin)
	var prof *os.File // the idle interval's CPU profile, between the first two stats lines
	for lines := 0; in.Scan(); lines++ {
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
		}
		st, err := selfStats(tr)
		if err != nil {
			t.Fatal(err)
		}
		if p := os.Getenv("RDMARPC_SCALE_CPUPROFILE"); p != "" && lines == 0 {
			if prof, err = startProfile(p); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Println(st)
	}
}

// startProfile starts a CPU profile written to path.
func startProfile(path string) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// TestScaleTable measures, per N: setup time per connection, RSS and
// registered bytes per side, fds and goroutines per side, CPU of each side
// over -scale.idle (10 s) of idleness, and the p50 of an echo on one extra connection.
func TestScaleTable(t *testing.T) {
	if *scaleN == "" {
		t.Skip("a benchmark: run with -scale.n=100,1000,...")
	}
	guestIP(t)
	o, err := scaleOptionsNamed(*scaleOpts)
	if err != nil {
		t.Fatal(err)
	}
	var rows, costRows []string
	for _, f := range strings.Split(*scaleN, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			t.Fatalf("-scale.n: %q is not a count", f)
		}
		row, costRow, err := scaleRow(t, n, o)
		if err != nil {
			t.Logf("N=%d: %v", n, err)
			rows = append(rows, fmt.Sprintf("| %d | failed: %v |", n, err))
			break
		}
		rows, costRows = append(rows, row), append(costRows, costRow)
		t.Log(row)
	}
	t.Logf("keepalive on: %v; -scale.opts=%s: Options %+v per side (-rdma.completions=%q)", *scaleKeepalive, *scaleOpts, o, *completionsFlag)
	t.Logf("| N | setup/conn | RSS client | RSS server | registered client | registered server | fds c/s | goroutines c/s | idle CPU c/s (%v) | echo p50 (extra conn) |", *scaleIdle)
	t.Log("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		t.Log(r)
	}
	t.Logf("Per connection over the idle interval (%v), client / server:", *scaleIdle)
	var head []string
	for _, n := range costNames {
		head = append(head, n)
	}
	t.Logf("| N | side | %s |", strings.Join(head, " | "))
	t.Logf("|---|---|%s", strings.Repeat("---|", len(costNames)))
	for _, r := range costRows {
		for _, side := range strings.Split(r, "\n") {
			t.Log(side)
		}
	}
}

func scaleRow(t *testing.T, n int, o Options) (row, costs string, _ error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleHelperServer$", "-rdma.completions="+*completionsFlag)
	cmd.Env = append(os.Environ(), "RDMARPC_HELPER=scale", "RDMARPC_SCALE_OPTS="+*scaleOpts)
	if !*scaleKeepalive {
		cmd.Env = append(cmd.Env, "RDMARPC_SCALE_KEEPALIVE=off")
	}
	if *scaleProfile != "" {
		cmd.Env = append(cmd.Env, "RDMARPC_SCALE_CPUPROFILE="+fmt.Sprintf("%s/server-%d.pprof", *scaleProfile, n))
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		return "", "", fmt.Errorf("the helper printed no address")
	}
	target := "rdma://" + lines.Text()
	serverStats := func() (procStats, error) {
		if _, err := fmt.Fprintln(stdin, "stats"); err != nil {
			return procStats{}, err
		}
		if !lines.Scan() {
			return procStats{}, fmt.Errorf("the helper stopped: %v", lines.Err())
		}
		return parseStats(lines.Text())
	}

	tr := New(o)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ccs := make([]*rpc.ClientConn, n)
	defer func() {
		for _, cc := range ccs {
			if cc != nil {
				cc.Close()
			}
		}
	}()
	const dialers = 8
	var wg sync.WaitGroup
	errs := make(chan error, dialers)
	start := time.Now()
	for d := range dialers {
		wg.Go(func() {
			for i := d; i < n; i += dialers {
				cc, err := rpc.Dial(ctx, target, rpc.WithTransport(tr), rpc.WithKeepalive(scaleKeepaliveParams(*scaleKeepalive)),
					rpc.WithConnectParams(rpc.ConnectParams{MinConnectTimeout: scaleConnect}))
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
				ccs[i] = cc
			}
		})
	}
	wg.Wait()
	setup := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return "", "", err
	}

	c0, err := selfStats(tr)
	if err != nil {
		return "", "", err
	}
	s0, err := serverStats()
	if err != nil {
		return "", "", err
	}
	var prof *os.File
	if *scaleProfile != "" {
		if prof, err = startProfile(fmt.Sprintf("%s/client-%d.pprof", *scaleProfile, n)); err != nil {
			return "", "", err
		}
	}
	time.Sleep(*scaleIdle) // the idle interval measured
	if prof != nil {
		pprof.StopCPUProfile()
		prof.Close()
	}
	c1, err := selfStats(tr)
	if err != nil {
		return "", "", err
	}
	s1, err := serverStats()
	if err != nil {
		return "", "", err
	}

	extra, err := rpc.Dial(ctx, target, rpc.WithTransport(tr), rpc.WithKeepalive(scaleKeepaliveParams(*scaleKeepalive)))
	if err != nil {
		return "", "", fmt.Errorf("the extra connection: %w", err)
	}
	defer extra.Close()
	var gc0, gc1 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	p50, err := echoP50(ctx, extra, *scaleEchoes)
	if err != nil {
		return "", "", err
	}
	runtime.ReadMemStats(&gc1)
	// The same echoes on one of the N connections: whether a cost is the
	// extra connection's (a new QP on a full CQ) or the process's.
	old, err := echoP50(ctx, ccs[n/2], *scaleEchoes)
	if err != nil {
		return "", "", err
	}
	t.Logf("N=%d: echo p50 on connection %d of the N: %v; client GCs during the extra connection's %d echoes: %d",
		n, n/2, old.Round(time.Microsecond), *scaleEchoes, gc1.NumGC-gc0.NumGC)

	ticks := func(a, b procStats) string {
		return fmt.Sprintf("%.1f%%", float64(b.cpuTicks-a.cpuTicks)/100/scaleIdle.Seconds()*100) // 100 ticks/s
	}
	mib := func(kib int64) string { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
	row = fmt.Sprintf("| %d | %.1f ms | %s | %s | %.1f MiB | %.1f MiB | %d / %d | %d / %d | %s / %s | %v |",
		n, float64(setup.Microseconds())/1000/float64(n), mib(c1.rssKiB), mib(s1.rssKiB),
		float64(c1.registered)/(1<<20), float64(s1.registered)/(1<<20),
		c1.fds, s1.fds, c1.goroutines, s1.goroutines, ticks(c0, c1), ticks(s0, s1), p50.Round(time.Microsecond))
	costs = fmt.Sprintf("| %d | client | %s |", n, perConn(c0, c1, n))
	costs += "\n" + fmt.Sprintf("| %d | server | %s |", n, perConn(s0, s1, n))
	return row, costs, nil
}

// echoP50 is the p50 round trip of n 64-byte echoes on cc, after 20 of
// warm-up.
func echoP50(ctx context.Context, cc *rpc.ClientConn, n int) (time.Duration, error) {
	ec := testpb.NewTestClient(cc)
	req := &testpb.EchoRequest{Payload: make([]byte, 64)}
	rtts := make([]time.Duration, 0, n)
	for i := range n + 20 {
		t0 := time.Now()
		if _, err := ec.Echo(ctx, req); err != nil {
			return 0, fmt.Errorf("echo: %w", err)
		}
		if i >= 20 { // warm-up
			rtts = append(rtts, time.Since(t0))
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2], nil
}
