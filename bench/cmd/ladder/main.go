package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/transport/rdma"
	"github.com/rdmarpc/rdmarpc/transport/rdma/rawverbs"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ladder:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ladder", flag.ContinueOnError)
	dev := fs.String("dev", os.Getenv("RDMARPC_TEST_DEV"), "RDMA `device` for the verbs rungs")
	gid := fs.Int("gid", bench.EnvInt("RDMARPC_TEST_GID_INDEX", 1), "RoCE v2 GID `index` of --ip on --dev")
	ip := fs.String("ip", os.Getenv("RDMARPC_TEST_IP"), "this host's `IP` on --dev (conn and tcp-raw rungs listen on it)")
	sizes := fs.String("sizes", "64,4096,65536", "payload `bytes`, comma-separated")
	concs := fs.String("conc", "1,16", "requests in flight, comma-separated")
	rungs := fs.String("rungs", "verbs-busy,verbs-event,conn,tcp-raw", "rungs to run, comma-separated")
	d := fs.Duration("duration", 2*time.Second, "measured time per cell")
	warm := fs.Duration("warmup", 300*time.Millisecond, "unmeasured time before each cell")
	csvPath := fs.String("csv", "", "write this run's cells to this CSV `file`")
	merge := fs.String("merge", "", "rpcbench CSV `files` (comma-separated) whose rows join the table: ib_send and the RPC rungs (client and server in separate processes)")
	mergeInProc := fs.String("merge-inproc", "", "rpcbench --inproc CSV `files` (comma-separated) whose rdmarpc rows join the table as the -1p RPC rungs (both ends in one process)")
	beforeFiles := fs.String("before", "", "CSV `files` (comma-separated, ladder's or rpcbench's) from a baseline build in the same boot, compared rung by rung")
	sweepDir := fs.String("sweep-dir", "", "run nothing: print what bench/rdmasweep.sh measured in this `directory`")
	sweepLabels := fs.String("sweep-labels", "", "the option sets' `labels` in --sweep-dir, comma-separated")
	sweepRounds := fs.Int("sweep-rounds", 1, "the rounds in --sweep-dir")
	var rf bench.RDMAFlags
	rf.Register(fs) // the conn rung's transport options
	only := fs.Bool("table-only", false, "run nothing: print the table of the --merge files")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the rungs' runs to this `file` (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *sweepDir != "" {
		return printSweep(stdout, *sweepDir, bench.SplitList(*sweepLabels), *sweepRounds)
	}
	ro, err := rf.Options()
	if err != nil {
		return err
	}
	sz, err := ints(*sizes)
	if err != nil {
		return err
	}
	cc, err := ints(*concs)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var rs []bench.Result
	if !*only {
		fmt.Fprintf(stdout, "ladder: the conn rung's rdma options: %s\n", rf)
		if rs, err = runRungs(stdout, strings.Split(*rungs, ","), *dev, *gid, *ip, sz, cc, *warm, *d, ro); err != nil {
			return err
		}
	}
	if *csvPath != "" {
		if err := writeCSV(*csvPath, rs); err != nil {
			return err
		}
	}
	for _, m := range []struct {
		files  string
		inProc bool
	}{{*merge, false}, {*mergeInProc, true}} {
		for _, p := range bench.SplitList(m.files) {
			more, err := readCSV(p, m.inProc)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			rs = append(rs, more...)
		}
	}
	printTable(stdout, rs, sz, cc)
	var before []bench.Result
	for _, p := range bench.SplitList(*beforeFiles) {
		more, err := readCSV(p, false)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		before = append(before, more...)
	}
	printBeforeAfter(stdout, rs, before, sz, cc)
	return nil
}

func runRungs(log io.Writer, names []string, dev string, gid int, ip string, sizes, concs []int, warm, d time.Duration, ro rdma.Options) ([]bench.Result, error) {
	var (
		rs  []bench.Result
		vd  *rawverbs.Device
		err error
	)
	for _, name := range names {
		var r runner
		transport := "rdma"
		switch name {
		case "verbs-busy", "verbs-event":
			if vd == nil {
				if vd, err = rawverbs.Open(dev, gid); err != nil {
					return nil, fmt.Errorf("opening %q: %w", dev, err)
				}
				defer vd.Close()
			}
			r = verbsRung(vd, name == "verbs-event")
		case "conn":
			r = connRung(rdma.New(ro), net.JoinHostPort(ip, "0"))
		case "tcp-raw":
			r, transport = tcpRung(ip), "tcp"
		default:
			return nil, fmt.Errorf("no rung %q", name)
		}
		for _, size := range sizes {
			for _, conc := range concs {
				res, err := measure(name, transport, size, conc, warm, d, r)
				if err != nil {
					return nil, fmt.Errorf("%s at %d B, conc %d: %w", name, size, conc, err)
				}
				fmt.Fprintf(log, "  %-12s %6d B conc %-3d p50 %8.1f µs  p99 %8.1f µs  %8.0f calls/s\n",
					name, size, conc, us(res.P50), us(res.P99), res.CallsPerSec())
				rs = append(rs, res)
			}
		}
	}
	return rs, nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range bench.SplitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}
