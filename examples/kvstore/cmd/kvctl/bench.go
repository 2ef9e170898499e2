package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

type benchConfig struct {
	concurrency int
	conns       int
	keys        int
	valueSize   int
	reads       int // percent of calls that are Gets
	duration    time.Duration
	preload     bool
	prefix      string
	keep        bool // leave the keys written in the store
	progress    bool
	seed        uint64
}

func (c *cli) benchCmd() *cobra.Command {
	var bc benchConfig
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load the server with Gets and Puts and report QPS and latency percentiles",
		Long: `bench runs --concurrency workers for --duration; each makes one call at a
time: a Get with probability --reads percent, else a Put, of a key drawn
uniformly from --keys keys, with --value-size-byte values. The workers share
--conns connections (calls are multiplexed). With --preload (the default)
every key is written once first, so that Gets find their key.

The keys are --key-prefix and a number (kvctl-bench/00000000 ...), written
into the live store: bench says so before it starts, and deletes them when
it ends (also when it fails or is interrupted) unless --keep is given.

It prints the calls made, QPS, and latency percentiles (p50/p99/p999,
measured by the client, a call's whole round trip) for Gets, Puts and both.
Calls that fail are counted by status code; any makes the exit status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case bc.concurrency < 1 || bc.conns < 1 || bc.keys < 1:
				return usageError("bench: --concurrency, --conns and --keys must be at least 1")
			case bc.reads < 0 || bc.reads > 100:
				return usageError("bench: --reads is a percentage, 0 to 100")
			case bc.valueSize < 0 || bc.valueSize > store.MaxValueSize:
				return usageError("bench: --value-size must be 0 to %d", store.MaxValueSize)
			case bc.duration <= 0:
				return usageError("bench: --duration must be positive")
			}
			return c.bench(cmd.Context(), bc)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&bc.concurrency, "concurrency", "c", 16, "workers, each with one call in flight")
	f.IntVar(&bc.conns, "conns", 1, "connections the workers share")
	f.IntVar(&bc.keys, "keys", 10000, "distinct keys")
	f.IntVar(&bc.valueSize, "value-size", 1024, "bytes per value")
	f.IntVar(&bc.reads, "reads", 50, "percent of calls that are Gets; the rest are Puts")
	f.DurationVarP(&bc.duration, "duration", "d", 10*time.Second, "how long to run")
	f.BoolVar(&bc.preload, "preload", true, "write every key once before measuring")
	f.StringVar(&bc.prefix, "key-prefix", "kvctl-bench/", "prefix of the keys written (and deleted at the end)")
	f.BoolVar(&bc.keep, "keep", false, "leave the keys written in the store instead of deleting them at the end")
	f.BoolVar(&bc.progress, "progress", isTerminal(c.stderr), "show a progress bar on stderr (default: when stderr is a terminal)")
	f.Uint64Var(&bc.seed, "seed", 1, "seed of the key and operation choices")
	return cmd
}

// worker is one bench goroutine's tally.
type worker struct {
	get, put hist
	errs     map[string]uint64
}

func (c *cli) bench(ctx context.Context, bc benchConfig) (err error) {
	clients := make([]kvpb.KVClient, bc.conns)
	for i := range clients {
		dctx, cancel := context.WithTimeout(ctx, c.timeout)
		cc, err := rpc.Dial(dctx, c.addr)
		cancel()
		if err != nil {
			return err
		}
		defer cc.Close()
		clients[i] = kvpb.NewKVClient(cc)
	}
	value := make([]byte, bc.valueSize)
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], bc.seed)
	rand.NewChaCha8(seed).Read(value)
	key := func(i int) []byte { return fmt.Appendf(nil, "%s%08d", bc.prefix, i) }

	// The keys go into the live store: say which, and take them out again.
	fmt.Fprintf(c.stderr, "bench: writing up to %d keys %s … %s (%d-byte values) into the store at %s; ",
		bc.keys, key(0), key(bc.keys-1), bc.valueSize, c.addr)
	if bc.keep {
		fmt.Fprintln(c.stderr, "--keep: they stay there")
	} else {
		fmt.Fprintln(c.stderr, "they are deleted at the end (--keep keeps them)")
		defer func() {
			// Also after ^C or a failure: the context may be done, the
			// cleanup's calls still get their own deadline.
			derr := c.deleteKeys(context.WithoutCancel(ctx), bc, clients[0], key)
			if derr != nil {
				fmt.Fprintf(c.stderr, "bench: could not delete the keys under %s: %v\n", bc.prefix, derr)
				if err == nil {
					err = &exitError{code: 1, err: derr}
				}
				return
			}
			fmt.Fprintf(c.stderr, "bench: deleted the %d keys under %s\n", bc.keys, bc.prefix)
		}()
	}

	if bc.preload {
		if err := c.preload(ctx, bc, clients, key, value); err != nil {
			return err
		}
	}

	// The measured run: workers loop until the deadline passes (or ^C).
	var (
		calls   atomic.Uint64
		stopped atomic.Bool
		wg      sync.WaitGroup
	)
	workers := make([]*worker, bc.concurrency)
	start := time.Now()
	for w := range workers {
		workers[w] = &worker{errs: map[string]uint64{}}
		wg.Add(1)
		go func(me *worker, kv kvpb.KVClient, r *rand.Rand) {
			defer wg.Done()
			for !stopped.Load() {
				k := key(r.IntN(bc.keys))
				read := r.IntN(100) < bc.reads
				cctx, cancel := context.WithTimeout(ctx, c.timeout)
				t0 := time.Now()
				var err error
				if read {
					_, err = kv.Get(cctx, &kvpb.GetRequest{Key: k})
				} else {
					_, err = kv.Put(cctx, &kvpb.PutRequest{Key: k, Value: value})
				}
				d := time.Since(t0)
				cancel()
				switch {
				case err != nil && ctx.Err() != nil:
					return // ^C: this call does not count
				case err != nil:
					me.errs[status.Code(err).String()]++
				case read:
					me.get.record(d)
				default:
					me.put.record(d)
				}
				calls.Add(1)
			}
		}(workers[w], clients[w%len(clients)], rand.New(rand.NewPCG(bc.seed, uint64(w)+1)))
	}

	c.watch(ctx, bc, start, &calls)
	stopped.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	return c.report(bc, workers, elapsed)
}

// watch shows the progress bar until the run's time is up or ctx is done.
func (c *cli) watch(ctx context.Context, bc benchConfig, start time.Time, calls *atomic.Uint64) {
	var bar *progressbar.ProgressBar
	if bc.progress {
		bar = progressbar.NewOptions64(bc.duration.Milliseconds(),
			progressbar.OptionSetWriter(c.stderr),
			progressbar.OptionSetDescription("bench"),
			progressbar.OptionSetWidth(30),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	end := time.NewTimer(bc.duration)
	defer end.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-end.C:
			if bar != nil {
				bar.Finish()
			}
			return
		case <-ctx.Done():
			if bar != nil {
				bar.Exit()
				fmt.Fprintln(c.stderr)
			}
			return
		case <-tick.C:
			if bar != nil {
				el := time.Since(start)
				bar.Describe(fmt.Sprintf("bench %8.0f QPS", float64(calls.Load())/el.Seconds()))
				bar.Set64(min(el.Milliseconds(), bc.duration.Milliseconds()))
			}
		}
	}
}

// deleteBatch is how many keys one Batch of the cleanup deletes (well under
// the store's MaxBatchMutations).
const deleteBatch = 1000

// deleteKeys deletes every key bench may have written, deleteBatch a call.
func (c *cli) deleteKeys(ctx context.Context, bc benchConfig, kv kvpb.KVClient, key func(int) []byte) error {
	for first := 0; first < bc.keys; first += deleteBatch {
		req := &kvpb.BatchRequest{}
		for i := first; i < min(first+deleteBatch, bc.keys); i++ {
			req.Mutations = append(req.Mutations, &kvpb.Mutation{Op: &kvpb.Mutation_Delete{Delete: key(i)}})
		}
		cctx, cancel := context.WithTimeout(ctx, c.timeout)
		_, err := kv.Batch(cctx, req)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// preload writes every key once, bc.concurrency at a time.
func (c *cli) preload(ctx context.Context, bc benchConfig, clients []kvpb.KVClient, key func(int) []byte, value []byte) error {
	var bar *progressbar.ProgressBar
	if bc.progress {
		bar = progressbar.NewOptions(bc.keys,
			progressbar.OptionSetWriter(c.stderr),
			progressbar.OptionSetDescription("preload"),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		fail error
	)
	for w := range min(bc.concurrency, bc.keys) {
		wg.Add(1)
		go func(kv kvpb.KVClient) {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < bc.keys; i = int(next.Add(1) - 1) {
				cctx, cancel := context.WithTimeout(ctx, c.timeout)
				_, err := kv.Put(cctx, &kvpb.PutRequest{Key: key(i), Value: value})
				cancel()
				mu.Lock()
				if err != nil && fail == nil {
					fail = err
					next.Store(int64(bc.keys)) // the others stop too
				}
				if bar != nil && err == nil {
					bar.Add(1)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}(clients[w%len(clients)])
	}
	wg.Wait()
	if fail != nil {
		if bar != nil {
			bar.Exit()
			fmt.Fprintln(c.stderr)
		}
		return fmt.Errorf("preload: %w", fail)
	}
	return nil
}

// latencyStats are one operation's numbers, latencies in microseconds.
type latencyStats struct {
	Ops  uint64  `json:"ops"`
	QPS  float64 `json:"qps"`
	Mean float64 `json:"mean_us"`
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`
}

func stats(h *hist, elapsed time.Duration) latencyStats {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	return latencyStats{
		Ops: h.n, QPS: float64(h.n) / elapsed.Seconds(),
		Mean: us(h.mean()), P50: us(h.quantile(0.5)), P99: us(h.quantile(0.99)), P999: us(h.quantile(0.999)), Max: us(h.max),
	}
}

func (c *cli) report(bc benchConfig, workers []*worker, elapsed time.Duration) error {
	var get, put, all hist
	errs := map[string]uint64{}
	var nerrs uint64
	for _, w := range workers {
		get.merge(&w.get)
		put.merge(&w.put)
		for code, n := range w.errs {
			errs[code] += n
			nerrs += n
		}
	}
	all.merge(&get)
	all.merge(&put)
	if c.json {
		c.printJSON(map[string]any{
			"target": c.addr, "concurrency": bc.concurrency, "connections": bc.conns, "keys": bc.keys,
			"value_size": bc.valueSize, "read_percent": bc.reads, "seconds": elapsed.Seconds(),
			"ops": all.n, "qps": float64(all.n) / elapsed.Seconds(), "errors": errs,
			"get": stats(&get, elapsed), "put": stats(&put, elapsed), "all": stats(&all, elapsed),
		})
	} else {
		c.printReport(bc, elapsed, errs, nerrs, []string{"get", "put", "all"}, []*hist{&get, &put, &all})
	}
	if nerrs > 0 {
		return &exitError{code: 1, err: errors.New("bench: some calls failed")}
	}
	return nil
}

func (c *cli) printReport(bc benchConfig, elapsed time.Duration, errs map[string]uint64, nerrs uint64, names []string, hs []*hist) {
	w := c.stdout
	fmt.Fprintf(w, "target %s: %d workers on %d connection(s), %d keys, %d-byte values, %d%% reads\n",
		c.addr, bc.concurrency, bc.conns, bc.keys, bc.valueSize, bc.reads)
	all := hs[len(hs)-1]
	fmt.Fprintf(w, "%d calls in %.2fs: %.0f QPS, %d errors\n\n", all.n+nerrs, elapsed.Seconds(), float64(all.n)/elapsed.Seconds(), nerrs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tcalls\tQPS\tmean\tp50\tp99\tp999\tmax\t")
	for i, h := range hs {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", names[i], h.n, float64(h.n)/elapsed.Seconds(),
			fmtLatency(h.mean()), fmtLatency(h.quantile(0.5)), fmtLatency(h.quantile(0.99)), fmtLatency(h.quantile(0.999)), fmtLatency(h.max))
	}
	tw.Flush()
	if nerrs > 0 {
		codes := make([]string, 0, len(errs))
		for code := range errs {
			codes = append(codes, code)
		}
		sort.Strings(codes)
		fmt.Fprintln(w, "\nerrors:")
		for _, code := range codes {
			fmt.Fprintf(w, "  %s: %d\n", code, errs[code])
		}
	}
}

func fmtLatency(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// isTerminal reports whether w is a terminal, where a progress bar belongs.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
