package perftest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// LatRow is one line of ib_send_lat's result table. Times are as printed:
// half a round trip, in microseconds.
type LatRow struct {
	Bytes, Iterations             int
	Min, Max, Typical, Avg, Stdev float64 // t_min … t_stdev [usec]
	P99, P999                     float64 // 99% and 99.9% percentile [usec]
}

// RoundTrip turns a printed half-round-trip time in microseconds into the
// full round trip: what an RPC's latency compares with.
func RoundTrip(halfUsec float64) time.Duration {
	return time.Duration(2 * halfUsec * float64(time.Microsecond))
}

// BWRow is one line of ib_send_bw's result table.
type BWRow struct {
	Bytes, Iterations int
	PeakMiBps         float64 // BW peak [MB/sec], MB being 2^20 bytes
	AvgMiBps          float64 // BW average [MB/sec]
	MsgRateMpps       float64 // MsgRate [Mpps]
}

// AvgMBps is the average bandwidth in 10^6 bytes per second, the unit the
// bench package reports in.
func (r BWRow) AvgMBps() float64 { return r.AvgMiBps * (1 << 20) / 1e6 }

// ErrNoTable is returned when the output holds no result table: perftest
// failed (its messages are in the output), or this is not perftest output.
var ErrNoTable = errors.New("perftest: no result table in output")

// Headers with spaces inside a column name; joined before splitting on
// white space.
var multiword = regexp.MustCompile(`(BW|99%|99\.9%)\s+(peak|average|percentile)`)

// gluedNumber is a number with the start of a message stuck to it.
var gluedNumber = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)[A-Za-z]`)

// table finds the result tables (a "#bytes" header and the numeric rows
// under it; one per perftest run, so several when outputs were joined) and
// returns each row as a map from column name to value.
func table(r io.Reader) ([]map[string]float64, error) {
	var (
		cols []string
		rows []map[string]float64
		sc   = bufio.NewScanner(r)
	)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#bytes") {
			cols = strings.Fields(multiword.ReplaceAllString(line, "${1}_${2}"))
			continue
		}
		if cols == nil {
			continue
		}
		if strings.HasPrefix(line, "---") && len(rows) > 0 {
			cols = nil // the table's bottom rule; outputs joined by cat hold more
			continue
		}
		f := strings.Fields(line)
		if len(f) > len(cols) {
			// perftest ends a row without a newline, so a message printed
			// after it ("Couldn't read remote address", "Can't produce a
			// report" for the next size) is glued to its last number. The
			// row itself is whole: keep it.
			m := gluedNumber.FindStringSubmatch(f[len(cols)-1])
			if m == nil {
				continue
			}
			f = append(f[:len(cols)-1:len(cols)-1], m[1])
		}
		if len(f) != len(cols) {
			continue // a warning between rows, or the table's top rule
		}
		row := make(map[string]float64, len(cols))
		for i, s := range f {
			v, err := number(s)
			if err != nil {
				row = nil
				break
			}
			row[cols[i]] = v
		}
		if row != nil {
			rows = append(rows, row)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, ErrNoTable
	}
	return rows, nil
}

// need returns the named columns of row, or an error naming the first one
// that is missing (another perftest test, or a format we do not know).
func need(row map[string]float64, names ...string) ([]float64, error) {
	v := make([]float64, len(names))
	for i, n := range names {
		x, ok := row[n]
		if !ok {
			return nil, fmt.Errorf("perftest: result table has no %q column", n)
		}
		v[i] = x
	}
	return v, nil
}

// ParseLat reads ib_send_lat's output (client or server side; one size or
// -a) and returns its rows.
func ParseLat(r io.Reader) ([]LatRow, error) {
	rows, err := table(r)
	if err != nil {
		return nil, err
	}
	out := make([]LatRow, 0, len(rows))
	for _, row := range rows {
		v, err := need(row, "#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]",
			"t_avg[usec]", "t_stdev[usec]", "99%_percentile[usec]", "99.9%_percentile[usec]")
		if err != nil {
			return nil, err
		}
		out = append(out, LatRow{
			Bytes: int(v[0]), Iterations: int(v[1]),
			Min: v[2], Max: v[3], Typical: v[4], Avg: v[5], Stdev: v[6], P99: v[7], P999: v[8],
		})
	}
	return out, nil
}

// ParseBW reads ib_send_bw's output (best from the client side: the server
// prints no peak) and returns its rows.
func ParseBW(r io.Reader) ([]BWRow, error) {
	rows, err := table(r)
	if err != nil {
		return nil, err
	}
	out := make([]BWRow, 0, len(rows))
	for _, row := range rows {
		v, err := need(row, "#bytes", "#iterations", "BW_peak[MB/sec]", "BW_average[MB/sec]", "MsgRate[Mpps]")
		if err != nil {
			return nil, err
		}
		out = append(out, BWRow{Bytes: int(v[0]), Iterations: int(v[1]), PeakMiBps: v[2], AvgMiBps: v[3], MsgRateMpps: v[4]})
	}
	return out, nil
}

// number parses one cell. glibc prints a NaN (t_stdev of a run it could
// not time) as "-nan", which strconv does not take.
func number(s string) (float64, error) {
	if t := strings.TrimLeft(s, "+-"); strings.EqualFold(t, "nan") {
		return math.NaN(), nil
	}
	return strconv.ParseFloat(s, 64)
}
