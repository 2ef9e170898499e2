package loadgen

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is a run's figures, as the text, JSON and CSV reports give them.
// Latencies are in microseconds.
type Summary struct {
	Target      string  `json:"target"`
	Method      string  `json:"method"`
	Concurrency int     `json:"concurrency"`
	Connections int     `json:"connections"`
	Rate        float64 `json:"rate_limit,omitempty"`
	Calls       uint64  `json:"calls"`
	Seconds     float64 `json:"seconds"`
	CallsPerSec float64 `json:"calls_per_s"`
	Latency     struct {
		Min  float64 `json:"min_us"`
		Mean float64 `json:"mean_us"`
		P50  float64 `json:"p50_us"`
		P90  float64 `json:"p90_us"`
		P99  float64 `json:"p99_us"`
		P999 float64 `json:"p999_us"`
		Max  float64 `json:"max_us"`
	} `json:"latency"`
	// Codes counts the calls by status code name, "OK" for the successful.
	Codes     map[string]uint64 `json:"codes"`
	Histogram []HistogramBar    `json:"histogram"`
	// Counters are the transport's counters per call, when it counts.
	Counters map[string]float64 `json:"transport_counters_per_call,omitempty"`
}

// HistogramBar is one bar of the text histogram.
type HistogramBar struct {
	FromUS float64 `json:"from_us"`
	ToUS   float64 `json:"to_us"`
	Count  uint64  `json:"count"`
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Summarize turns a result into its summary; ok names the successful calls'
// code.
func Summarize(r *Result, ok string, bars int) Summary {
	var s Summary
	h := &r.Latency
	s.Calls = h.Count()
	s.Seconds = r.Elapsed.Seconds()
	s.CallsPerSec = r.Rate()
	s.Latency.Min, s.Latency.Mean, s.Latency.Max = us(h.Min()), us(h.Mean()), us(h.Max())
	s.Latency.P50, s.Latency.P90 = us(h.Quantile(0.5)), us(h.Quantile(0.9))
	s.Latency.P99, s.Latency.P999 = us(h.Quantile(0.99)), us(h.Quantile(0.999))
	s.Codes = maps.Clone(r.Errors)
	if s.Codes == nil {
		s.Codes = map[string]uint64{}
	}
	var failed uint64
	for _, n := range r.Errors {
		failed += n
	}
	if s.Calls > failed {
		s.Codes[ok] = s.Calls - failed
	}
	for _, b := range h.Bars(bars) {
		s.Histogram = append(s.Histogram, HistogramBar{FromUS: us(b.Lo), ToUS: us(b.Hi), Count: b.Count})
	}
	return s
}

// WriteText writes the summary as ghz does: totals, latencies, a histogram
// of bars and the counts by code.
func (s Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Summary:\n")
	fmt.Fprintf(&b, "  Target:\t%s\n  Method:\t%s\n", s.Target, s.Method)
	fmt.Fprintf(&b, "  Concurrency:\t%d workers on %d connection(s)", s.Concurrency, s.Connections)
	if s.Rate > 0 {
		fmt.Fprintf(&b, ", at most %g calls/s", s.Rate)
	}
	fmt.Fprintf(&b, "\n  Calls:\t%d in %.3fs\n  Calls/s:\t%.1f\n", s.Calls, s.Seconds, s.CallsPerSec)
	fmt.Fprintf(&b, "\nLatency (µs):\n")
	l := s.Latency
	for _, f := range []struct {
		name string
		v    float64
	}{{"min", l.Min}, {"mean", l.Mean}, {"p50", l.P50}, {"p90", l.P90}, {"p99", l.P99}, {"p99.9", l.P999}, {"max", l.Max}} {
		fmt.Fprintf(&b, "  %s\t%.1f\n", f.name, f.v)
	}
	if len(s.Histogram) > 0 {
		fmt.Fprintf(&b, "\nHistogram (µs):\n")
		var most uint64
		for _, bar := range s.Histogram {
			most = max(most, bar.Count)
		}
		for _, bar := range s.Histogram {
			n := 0
			if most > 0 {
				n = int((bar.Count*40 + most - 1) / most)
			}
			fmt.Fprintf(&b, "  %.1f – %.1f\t%d\t%s\n", bar.FromUS, bar.ToUS, bar.Count, strings.Repeat("∎", n))
		}
	}
	fmt.Fprintf(&b, "\nStatus codes:\n")
	for _, c := range slices.Sorted(maps.Keys(s.Codes)) {
		fmt.Fprintf(&b, "  %s\t%d\n", c, s.Codes[c])
	}
	if len(s.Counters) > 0 {
		fmt.Fprintf(&b, "\nTransport counters per call (this process's transport):\n")
		for _, c := range slices.Sorted(maps.Keys(s.Counters)) {
			fmt.Fprintf(&b, "  %s\t%.3g\n", c, s.Counters[c])
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if _, err := io.WriteString(tw, b.String()); err != nil {
		return err
	}
	return tw.Flush()
}

// WriteJSON writes the summary as one JSON object.
func (s Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// CSVHeader names WriteCSV's columns: one row per run, so that runs
// concatenate into one table.
var CSVHeader = []string{"target", "method", "concurrency", "connections", "rate_limit", "calls", "seconds", "calls_per_s",
	"min_us", "mean_us", "p50_us", "p90_us", "p99_us", "p999_us", "max_us", "errors"}

// WriteCSV writes the header and the summary's row. errors counts the
// calls that did not end with ok.
func (s Summary) WriteCSV(w io.Writer, ok string) error {
	cw := csv.NewWriter(w)
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	l := s.Latency
	row := []string{s.Target, s.Method, strconv.Itoa(s.Concurrency), strconv.Itoa(s.Connections), f(s.Rate),
		strconv.FormatUint(s.Calls, 10), f(s.Seconds), f(s.CallsPerSec),
		f(l.Min), f(l.Mean), f(l.P50), f(l.P90), f(l.P99), f(l.P999), f(l.Max),
		strconv.FormatUint(s.Calls-s.Codes[ok], 10)}
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	if err := cw.Write(row); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}
