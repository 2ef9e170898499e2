package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/rdmarpc/rdmarpc/examples/kvstore/server"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma"
	_ "github.com/rdmarpc/rdmarpc/transport/tcp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// flags are kvserver's command line.
type flags struct {
	listen          []string
	dataDir         string
	mem             bool
	sync            string
	minFree         string
	metricsAddr     string
	pprofAddr       string
	logRevisions    int
	logBytes        string
	otel            bool
	shutdownTimeout time.Duration
	logLevel        string
	logFormat       string
	rdmaDevices     []string
	rdmaNetdevs     []string
	rdmaGIDIndex    int
}

// run is kvserver's main, returning the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	var f flags
	status := 0
	cmd := newCommand(&f, func() { status = serve(f, stdout, stderr) })
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(stderr, "kvserver: %v\n", err)
		return 2
	}
	return status
}

// newCommand is kvserver's command line, filling in f; it calls serve
// once the flags are parsed.
func newCommand(f *flags, serve func()) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kvserver",
		Short: "Serve the rdmarpc key-value store over RDMA or TCP",
		Long: `kvserver serves the rdmarpc key-value store (kv.proto) over RDMA or TCP.

Listen targets: tcp://HOST:PORT, rdma://HOST:PORT (RDMA or fail), and
auto://HOST:PORT (RDMA when an RDMA device serves HOST, else TCP).
Data lives in --data-dir (Pebble); --mem keeps it in memory instead.
--sync always (the default) syncs every write to disk before answering: an
acknowledged write survives a crash. --sync none answers first: a crash may
lose the last writes. Below --min-free-space free on the data directory's
file system, writes are refused (ResourceExhausted) and reads go on; started
on a full disk, kvserver serves reads and takes writes once space is freed.
Every write is a revision, kept in a change log that Watch replays: the last
--watch-history revisions or --watch-history-bytes, whichever is less.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			serve()
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.listen, "listen", []string{"auto://127.0.0.1:7070"}, "target to serve, repeatable: tcp://, rdma:// or auto://HOST:PORT")
	fl.StringVar(&f.dataDir, "data-dir", "kvdata", "data directory (created if missing; refused if it holds someone else's files)")
	fl.BoolVar(&f.mem, "mem", false, "keep the data in memory: nothing survives a restart")
	fl.StringVar(&f.sync, "sync", "always", "when writes reach the disk: always (before each answer) or none (a crash may lose the last writes)")
	fl.StringVar(&f.minFree, "min-free-space", "64MiB", "free space to keep on the data directory's file system: below it writes are refused with ResourceExhausted and reads go on (e.g. 64MiB, 2GB, 1%; 0 turns the check off)")
	fl.IntVar(&f.logRevisions, "watch-history", store.DefaultLogRevisions, "revisions kept in the change log for watchers to resume from (a watch from an older one gets OutOfRange)")
	fl.StringVar(&f.logBytes, "watch-history-bytes", "64MiB", "bytes kept in the change log, whichever of the two bounds comes first")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9090)")
	fl.StringVar(&f.pprofAddr, "pprof-addr", "", "serve Go's profiles (net/http/pprof) at http://ADDR/debug/pprof/ (e.g. 127.0.0.1:6060), for finding where a running server spends its time")
	fl.BoolVar(&f.otel, "otel", false, "trace and measure every call with OpenTelemetry, written as JSON to stdout: spans as calls end, metrics every 30s and at shutdown")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long calls may drain on SIGINT/SIGTERM before connections are closed")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&f.logFormat, "log-format", "console", "console or json")
	fl.StringArrayVar(&f.rdmaDevices, "rdma-device", nil, "RDMA device (mlx5_0) or device port (mlx5_0:1) to serve rdma:// and auto:// on, repeatable; default every ACTIVE port (rdma.Options.Devices)")
	fl.StringArrayVar(&f.rdmaNetdevs, "rdma-netdev", nil, "serve on the RoCE ports whose GID belongs to this network interface (net1), repeatable (rdma.Options.Netdevs)")
	fl.IntVar(&f.rdmaGIDIndex, "rdma-gid-index", 0, "GID table entry to use; 0: the RoCE v2 GID of an IPv4 address (rdma.Options.GIDIndex)")
	return cmd
}

// rdmaOptions are the Options of the RDMA transport serving rdma:// and
// auto:// from the --rdma-* flags; set is false when none is given (the
// registered default transport serves).
func rdmaOptions(f flags) (o rdma.Options, set bool, err error) {
	if f.rdmaGIDIndex < 0 {
		return o, false, fmt.Errorf("--rdma-gid-index %d: want 0 or more", f.rdmaGIDIndex)
	}
	o = rdma.Options{Devices: f.rdmaDevices, Netdevs: f.rdmaNetdevs, GIDIndex: f.rdmaGIDIndex}
	return o, len(o.Devices) > 0 || len(o.Netdevs) > 0 || o.GIDIndex != 0, nil
}

func serve(f flags, stdout, stderr io.Writer) int {
	log, err := newLogger(f.logLevel, f.logFormat, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kvserver: %v\n", err)
		return 2
	}
	defer log.Sync()
	cfg := server.Config{
		Listen:          f.listen,
		Store:           store.Options{Dir: f.dataDir, InMemory: f.mem},
		MetricsAddr:     f.metricsAddr,
		ShutdownTimeout: f.shutdownTimeout,
		Logger:          log,
	}
	ro, set, err := rdmaOptions(f)
	if err != nil {
		fmt.Fprintf(stderr, "kvserver: %v\n", err)
		return 2
	}
	if set {
		ro.Logger = log.Named("rdma")
		cfg.Transports = map[string]transport.Transport{"rdma": rdma.New(ro)}
	}
	logBytes, err := parseSize(f.logBytes)
	if err != nil || logBytes == 0 || f.logRevisions < 1 {
		fmt.Fprintf(stderr, "kvserver: --watch-history %d, --watch-history-bytes %q: want at least one revision and a size such as 64MiB\n", f.logRevisions, f.logBytes)
		return 2
	}
	cfg.Store.LogRetention = store.LogRetention{Revisions: f.logRevisions, Bytes: logBytes}
	if err := setMinFree(&cfg.Store, f.minFree); err != nil {
		fmt.Fprintf(stderr, "kvserver: --min-free-space %q: %v\n", f.minFree, err)
		return 2
	}
	switch f.sync {
	case "always":
	case "none":
		cfg.Store.NoSync = true
	default:
		fmt.Fprintf(stderr, "kvserver: --sync %q: want always or none\n", f.sync)
		return 2
	}
	if f.otel {
		opt, shutdown, err := withOTel(stdout)
		if err != nil {
			log.Error("cannot start OpenTelemetry", zap.Error(err))
			return 1
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				log.Warn("flushing OpenTelemetry", zap.Error(err))
			}
		}()
		cfg.RPCOptions = append(cfg.RPCOptions, opt)
		log.Info("OpenTelemetry traces and metrics go to stdout (--otel)")
	}
	if f.mem {
		log.Info("keeping the data in memory (--mem): it is lost when the server stops")
	} else {
		log.Info("storage", zap.String("data_dir", f.dataDir), zap.String("sync", f.sync))
	}

	if f.pprofAddr != "" {
		addr, stop, err := startPprof(f.pprofAddr)
		if err != nil {
			log.Error("cannot serve profiles (--pprof-addr)", zap.Error(err))
			return 1
		}
		defer stop()
		log.Info("profiles served", zap.String("url", "http://"+addr.String()+"/debug/pprof/"))
	}
	srv, err := server.New(cfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}

	// The first SIGINT/SIGTERM starts a graceful shutdown, the second cuts
	// it short.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for n := 0; ; n++ {
			select {
			case sig := <-sigs:
				log.Info("signal received", zap.Stringer("signal", sig))
				if n == 0 {
					cancel()
				} else {
					srv.Stop()
				}
			case <-done:
				return
			}
		}
	}()

	if err := srv.Serve(ctx); err != nil {
		log.Error("stopped", zap.Error(err))
		return 1
	}
	log.Info("stopped cleanly")
	return 0
}

// setMinFree sets o's free-space threshold from --min-free-space: a size
// with an optional unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB), a
// percentage of the file system, or 0 for no check.
func setMinFree(o *store.Options, v string) error {
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		p, err := strconv.ParseFloat(pct, 64)
		if err != nil || !(p > 0 && p < 100) {
			return errors.New("want a percentage between 0 and 100")
		}
		o.MinFreePercent = p
		return nil
	}
	n, err := parseSize(v)
	if err != nil {
		return errors.New("want a size such as 64MiB or 2GB, a percentage such as 1%, or 0")
	}
	if n == 0 {
		o.NoFreeSpaceCheck = true
		return nil
	}
	o.MinFreeBytes = n
	return nil
}

// parseSize reads a size such as 64MiB, 2GB or 0.
func parseSize(v string) (int64, error) {
	units := []struct {
		suffix string
		size   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, scale := v, 1.0
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			num, scale = n, u.size
			break
		}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n < 0 || n*scale >= 1<<62 {
		return 0, errors.New("want a size such as 64MiB or 2GB")
	}
	if n == 0 {
		return 0, nil
	}
	return max(int64(n*scale), 1), nil
}

func newLogger(level, format string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	ec.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	switch format {
	case "console":
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	case "json":
		enc = zapcore.NewJSONEncoder(ec)
	default:
		return nil, errors.New(`--log-format: want console or json`)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}
