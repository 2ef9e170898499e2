package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// SizeName writes a payload size the way benchmark names and tables do:
// 64B, 1KiB, 64KiB, 1MiB; sizes that are not a whole KiB or MiB stay in B.
func SizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// ParseSize reads "64", "64B", "1KiB", "1k", "64KiB", "1MiB", "1m".
func ParseSize(s string) (int, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"k", 1 << 10}, {"m", 1 << 20}, {"b", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.Atoi(t)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad size %q: want e.g. 64, 1KiB, 64KiB", s)
	}
	return n * mult, nil
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// WriteTable prints results as an aligned table.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "impl\ttransport\tsize\tconc\tcalls/s\tMB/s\tp50 µs\tp99 µs\tp99.9 µs\tallocs/call\tB/call\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%.2f\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n",
			r.Impl, r.Transport, SizeName(r.Size), conc(r.Concurrency), r.CallsPerSec(), r.MBPerSec(),
			micros(r.P50), micros(r.P99), micros(r.P999), allocs(r, r.AllocsPerCall, "%.1f"), allocs(r, r.BytesPerCall, "%.0f"))
	}
	return tw.Flush()
}

func conc(c int) string {
	if c == 0 {
		return "-"
	}
	return strconv.Itoa(c)
}

// allocs is blank for rows that did not count allocations (raw verbs).
func allocs(r Result, v float64, format string) string {
	if r.Calls == 0 || r.Elapsed == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// CSVHeader names the columns of WriteCSV. A concurrency of 0 marks a row
// that has no single concurrency: perftest's, whose latencies come from the
// ping-pong ib_send_lat and whose throughput from ib_send_bw's stream.
var CSVHeader = []string{"impl", "transport", "size_bytes", "concurrency", "calls", "seconds",
	"calls_per_s", "mb_per_s", "p50_us", "p99_us", "p999_us", "allocs_per_call", "bytes_per_call",
	"csw_per_call", "wakeups_per_call", "cgo_per_call", "cpu_us_per_call",
	"vcsw_per_call", "server_cpu_us_per_call", "server_vcsw_per_call", "server_allocs_per_call",
	"instr_per_call", "server_instr_per_call", "server_cgo_per_call", "server_wakeups_per_call"}

// Older CSVs have fewer columns (before the per-call process costs, before
// the server's end, before instructions, before the server's cgo calls and
// wake-ups); ReadCSV still reads them.
const (
	oldColumns  = 13
	noServerEnd = 17
	noInstr     = 21
	noServerCgo = 23
)

// WriteCSV writes results with a header line.
func WriteCSV(w io.Writer, rs []Result) error {
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader)
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, r := range rs {
		cw.Write([]string{r.Impl, r.Transport, strconv.Itoa(r.Size), strconv.Itoa(r.Concurrency),
			strconv.FormatInt(r.Calls, 10), f(r.Elapsed.Seconds(), 3),
			f(r.CallsPerSec(), 1), f(r.MBPerSec(), 3), f(micros(r.P50), 2), f(micros(r.P99), 2), f(micros(r.P999), 2),
			f(r.AllocsPerCall, 2), f(r.BytesPerCall, 1),
			f(r.CSWPerCall, 3), f(r.WakeupsPerCall, 2), f(r.CgoPerCall, 2), f(micros(r.CPUPerCall), 2),
			f(r.VCSWPerCall, 3), f(micros(r.Server.CPU), 2), f(r.Server.VCSW, 3), f(r.Server.Allocs, 2),
			f(r.InstrPerCall, 0), f(r.Server.Instr, 0), f(r.Server.Cgo, 2), f(r.Server.Wakeups, 2)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadCSV reads what WriteCSV wrote. Throughputs are taken as written, not
// recomputed.
func ReadCSV(r io.Reader) ([]Result, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 || !slices.Contains([]int{oldColumns, noServerEnd, noInstr, noServerCgo, len(CSVHeader)}, len(recs[0])) ||
		strings.Join(recs[0], ",") != strings.Join(CSVHeader[:len(recs[0])], ",") {
		return nil, fmt.Errorf("bench: CSV header is not %s", strings.Join(CSVHeader, ","))
	}
	var out []Result
	for i, rec := range recs[1:] {
		var (
			num = make([]float64, len(rec))
			bad error
		)
		for j := 2; j < len(rec); j++ {
			if num[j], err = strconv.ParseFloat(rec[j], 64); err != nil && bad == nil {
				bad = fmt.Errorf("bench: CSV line %d, %s: %w", i+2, CSVHeader[j], err)
			}
		}
		if bad != nil {
			return nil, bad
		}
		r := Result{
			Impl: rec[0], Transport: rec[1], Size: int(num[2]), Concurrency: int(num[3]),
			Calls: int64(num[4]), Elapsed: time.Duration(num[5] * float64(time.Second)),
			CallsPerSecOverride: num[6], MBPerSecOverride: num[7],
			P50: usDur(num[8]), P99: usDur(num[9]), P999: usDur(num[10]),
			AllocsPerCall: num[11], BytesPerCall: num[12],
		}
		if len(rec) >= noServerEnd {
			r.CSWPerCall, r.WakeupsPerCall, r.CgoPerCall = num[13], num[14], num[15]
			r.CPUPerCall = usDur(num[16])
		}
		if len(rec) >= noInstr {
			r.VCSWPerCall = num[17]
			r.Server = EndCosts{CPU: usDur(num[18]), VCSW: num[19], Allocs: num[20]}
		}
		if len(rec) >= noServerCgo {
			r.InstrPerCall, r.Server.Instr = num[21], num[22]
		}
		if len(rec) == len(CSVHeader) {
			r.Server.Cgo, r.Server.Wakeups = num[23], num[24]
		}
		out = append(out, r)
	}
	return out, nil
}

func usDur(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }

// Ratio compares two results of the same size (and concurrency).
type Ratio struct {
	Size, Concurrency int
	P50, P99, P999    float64 // num/den latency: below 1 is faster
	Throughput        float64 // num/den calls per second: above 1 is more
	MBps              float64 // num/den MB/s
	Allocs            float64 // num/den allocations per call; 0 when den has none
}

// Ratios pairs each result in num with the result in den of the same size
// and concurrency (a den row of concurrency 0 pairs with every
// concurrency) and returns num/den for each pair, in num's order.
func Ratios(num, den []Result) []Ratio {
	var out []Ratio
	for _, n := range num {
		for _, d := range den {
			if d.Size != n.Size || (d.Concurrency != 0 && d.Concurrency != n.Concurrency) {
				continue
			}
			r := Ratio{
				Size: n.Size, Concurrency: n.Concurrency,
				P50: div(float64(n.P50), float64(d.P50)), P99: div(float64(n.P99), float64(d.P99)),
				P999:       div(float64(n.P999), float64(d.P999)),
				Throughput: div(n.CallsPerSec(), d.CallsPerSec()), MBps: div(n.MBPerSec(), d.MBPerSec()),
				Allocs: div(n.AllocsPerCall, d.AllocsPerCall),
			}
			out = append(out, r)
			break
		}
	}
	return out
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// WriteRatios prints ratios as a table headed by what is divided by what.
func WriteRatios(w io.Writer, title string, rs []Ratio, withAllocs bool) error {
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "size\tconc\tp50\tp99\tp99.9\tcalls/s\tMB/s\t"
	if withAllocs {
		head += "allocs/call\t"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t", SizeName(r.Size), r.Concurrency, r.P50, r.P99, r.P999, r.Throughput, r.MBps)
		if withAllocs {
			fmt.Fprintf(tw, "%.2f\t", r.Allocs)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
