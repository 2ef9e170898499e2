package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/dynamic"
	"github.com/rdmarpc/rdmarpc/internal/loadgen"
	"github.com/rdmarpc/rdmarpc/metadata"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

type benchFlags struct {
	schemaFlags
	dialFlags
	requestFlags
	timeout     time.Duration
	concurrency int
	connections int
	rps         float64
	calls       int64
	duration    time.Duration
	asJSON      bool
	asCSV       bool
	png         string
}

// defaultCalls is the call count when neither -n nor --duration is given
// (ghz's default).
const defaultCalls = 200

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [flags] TARGET METHOD",
		Short: "Load one method of a running server and report its latency and throughput",
		Long: `bench calls METHOD (package.Service/Method) of the server at TARGET
(tcp://host:port, rdma://host:port) from -c workers, each one call at a time,
spread over --connections connections, -n calls in all or for --duration,
at most --rps calls per second in all (none: as fast as the server answers).
Every call sends the same request, -d as JSON (as with call: @ reads stdin,
@FILE a file), encoded once. The schema comes from the server's reflection
service, asked over the first connection, or from --proto files.

It prints a summary: calls/s, latency percentiles (p50 … p99.9, within 1%),
a histogram and the count of calls by status code; --json or --csv print it
in those forms instead, --png FILE plots the latency distribution. When the
transport counts what it does (rdma://), its counters per call follow. A
progress bar shows on stderr when stderr is a terminal.

It exits 1 when no call succeeded; failed calls are otherwise counted, not
fatal. It loads unary methods only; streaming methods are refused.`,
		Example: `  rdmarpc bench -d '{"key": "Z3JlZXRpbmc="}' -c 16 --connections 2 -n 100000 \
      tcp://127.0.0.1:7070 rdmarpc.kvstore.v1.KV/Get`,
		Args: nArgs(2, 2, "TARGET (tcp://host:port, rdma://host:port) and METHOD (package.Service/Method)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBench(cmd, f, args[0], args[1])
		},
	}
	f.schemaFlags.add(cmd)
	f.dialFlags.add(cmd)
	f.requestFlags.add(cmd)
	fl := cmd.Flags()
	fl.DurationVar(&f.timeout, "timeout", 20*time.Second, "each call's deadline (0: none)")
	fl.IntVarP(&f.concurrency, "concurrency", "c", 8, "workers, each making one call at a time")
	fl.IntVar(&f.connections, "connections", 1, "connections the workers share, round robin")
	fl.Float64Var(&f.rps, "rps", 0, "at most this many calls per second in all (0: no limit)")
	fl.Int64VarP(&f.calls, "total", "n", 0, fmt.Sprintf("calls to make in all (default %d when no --duration)", defaultCalls))
	fl.DurationVar(&f.duration, "duration", 0, "start calls for this long instead of making -n calls")
	fl.BoolVar(&f.asJSON, "json", false, "print the summary as JSON")
	fl.BoolVar(&f.asCSV, "csv", false, "print the summary as CSV: a header and one row")
	fl.StringVar(&f.png, "png", "", "write a plot of the latency distribution to this PNG file")
	return cmd
}

func init() { rootCmd.AddCommand(newBenchCmd()) }

func (f *benchFlags) check() error {
	switch {
	case f.calls > 0 && f.duration > 0:
		return errors.New("give -n or --duration, not both")
	case f.calls < 0 || f.duration < 0:
		return errors.New("-n and --duration must not be negative")
	case f.concurrency < 1:
		return errors.New("-c must be at least 1")
	case f.connections < 1 || f.connections > f.concurrency:
		return fmt.Errorf("--connections must be between 1 and -c (%d): a connection without a worker measures nothing", f.concurrency)
	case f.rps < 0:
		return errors.New("--rps must not be negative")
	case f.asJSON && f.asCSV:
		return errors.New("give --json or --csv, not both")
	}
	if f.calls == 0 && f.duration == 0 {
		f.calls = defaultCalls
	}
	return nil
}

func runBench(cmd *cobra.Command, f benchFlags, target, method string) error {
	if err := f.check(); err != nil {
		return &usageError{err}
	}
	if err := checkTarget(target); err != nil {
		return err
	}
	ctx := cmd.Context()
	conns := make([]*rpc.ClientConn, 0, f.connections)
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	dial := func() (*rpc.ClientConn, error) {
		cc, err := f.dial(ctx, target, cmd.ErrOrStderr(), rpc.WithCodec(dynamic.RawCodec{}))
		if err != nil {
			return nil, &statusErr{err}
		}
		conns = append(conns, cc)
		return cc, nil
	}
	// Reflection asks over the first connection (RawCodec encodes and
	// decodes its messages as ProtoCodec does).
	src, closeSrc, err := f.source(ctx, dial)
	if err != nil {
		var se *statusErr
		if errors.As(err, &se) {
			return rpcFailure(cmd.ErrOrStderr(), se.err, protoregistry.GlobalTypes)
		}
		return err
	}
	defer closeSrc()
	m, err := dynamic.FindMethod(ctx, src, method)
	if err != nil {
		return err
	}
	if m.Streaming() {
		// Where streams plug in: a worker's call would open a stream and
		// send and receive one message each way (or time each message).
		return fmt.Errorf("%s is a %s method: rdmarpc bench loads unary methods only (call runs streams)", m.FullMethod, m.Kind())
	}
	md, err := parseHeaders(f.headers)
	if err != nil {
		return &usageError{err}
	}
	in, closeIn, err := openData(f.data, cmd.InOrStdin())
	if err != nil {
		return err
	}
	defer closeIn()
	dec := dynamic.NewDecoder(in, m.Desc.Input(), src.Types())
	msg, err := dec.Next()
	if err != nil {
		return err
	}
	if _, err := dec.Next(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("bench sends one request: the input holds more than one JSON object")
		}
		return err
	}
	req, err := proto.Marshal(msg)
	if err != nil {
		return err
	}

	for len(conns) < f.connections {
		if _, err := dial(); err != nil {
			return rpcFailure(cmd.ErrOrStderr(), errors.Unwrap(err), src.Types())
		}
	}
	var ctrs transport.Counters
	if tr, _, err := transport.ForTarget(target); err == nil {
		ctrs, _ = tr.(transport.Counters)
	}
	var before map[string]uint64
	if ctrs != nil {
		before = ctrs.Counters()
	}

	callCtx := ctx
	if len(md) > 0 {
		callCtx = metadata.NewOutgoingContext(ctx, md)
	}
	call := func(_ context.Context, w int) error {
		ctx := callCtx
		if f.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, f.timeout)
			defer cancel()
		}
		var resp dynamic.Discard
		return conns[w%len(conns)].Invoke(ctx, m.FullMethod, dynamic.Encoded(req), &resp)
	}
	var done atomic.Int64
	stopBar := progress(cmd.ErrOrStderr(), f.calls, f.duration, &done)
	res, err := loadgen.Run(callCtx, loadgen.Config{Concurrency: f.concurrency, Calls: f.calls, Duration: f.duration, Rate: f.rps},
		call, func(err error) string { return status.Code(err).String() }, &done)
	stopBar()
	interrupted := err != nil && res != nil && errors.Is(err, context.Canceled)
	if err != nil && !interrupted {
		return err
	}

	s := loadgen.Summarize(res, codes.OK.String(), 12)
	s.Target, s.Method, s.Concurrency, s.Connections, s.Rate = target, m.FullMethod, f.concurrency, f.connections, f.rps
	if ctrs != nil && s.Calls > 0 {
		s.Counters = perCall(before, ctrs.Counters(), s.Calls)
	}
	out := cmd.OutOrStdout()
	switch {
	case f.asJSON:
		err = s.WriteJSON(out)
	case f.asCSV:
		err = s.WriteCSV(out, codes.OK.String())
	default:
		err = s.WriteText(out)
	}
	if err != nil {
		return err
	}
	if f.png != "" {
		if err := writeLatencyPNG(f.png, s, &res.Latency); err != nil {
			return err
		}
	}
	if interrupted {
		return fmt.Errorf("interrupted after %d calls (calls in flight then count as Canceled)", s.Calls)
	}
	if s.Codes[codes.OK.String()] == 0 {
		return fmt.Errorf("no call succeeded (%d calls)", s.Calls)
	}
	return nil
}

// perCall is what each counter grew by, per call; counters that did not
// move are left out.
func perCall(before, after map[string]uint64, calls uint64) map[string]float64 {
	out := make(map[string]float64)
	for k, v := range after {
		if v != before[k] {
			out[k] = float64(v-before[k]) / float64(calls)
		}
	}
	return out
}

// progress shows a progress bar on w while calls are made, when w is a
// terminal; the function it returns removes it, once the run is over.
func progress(w io.Writer, calls int64, d time.Duration, done *atomic.Int64) func() {
	fh, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(fh.Fd())) {
		return func() {}
	}
	bar := newBar(w, calls, d)
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				bar.update(done.Load(), time.Since(start))
			}
		}
	}()
	return func() {
		close(stop)
		wg.Wait()
		bar.pb.Finish()
		bar.pb.Exit()
	}
}

// bar is the progress bar: with -n, the calls made out of the total and
// their rate; with --duration, the time run out of the duration, and the
// calls made so far (there is no total to count them against).
type bar struct {
	pb *progressbar.ProgressBar
	d  time.Duration // --duration, or 0
}

func newBar(w io.Writer, calls int64, d time.Duration) *bar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionClearOnFinish(),
	}
	total := calls
	if d > 0 {
		total = d.Milliseconds()
		opts = append(opts, progressbar.OptionSetDescription(durationDesc(0, 0, d)))
	} else {
		opts = append(opts, progressbar.OptionSetDescription("calls"), progressbar.OptionShowCount(),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("calls"))
	}
	b := &bar{pb: progressbar.NewOptions64(total, opts...), d: d}
	b.pb.StartWithoutRender() // the rate counts from now, not from the first update
	return b
}

// update shows that n calls were made in elapsed.
func (b *bar) update(n int64, elapsed time.Duration) {
	if b.d <= 0 {
		b.pb.Set64(n)
		return
	}
	b.pb.Describe(durationDesc(n, elapsed, b.d))
	b.pb.Set64(min(elapsed, b.d).Milliseconds())
}

func durationDesc(n int64, elapsed, d time.Duration) string {
	return fmt.Sprintf("%d calls, %s of %s", n, min(elapsed, d).Truncate(100*time.Millisecond), d)
}
