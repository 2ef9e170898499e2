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
// half a round trip, in microseconds; all are finite but Stdev, which is
// NaN where perftest printed -nan (see stdevColumn).
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

// ErrBadRow is wrapped by the error returned for a result row that is not
// a row of numbers: a cell that is not a number, a row cut short, or a
// figure that is not finite. perftest prints inf and -nan rather than fail
// when it could not measure the CPU's clock (on a loaded host its sampled
// cycles-per-µs has "Correlation coefficient r^2 … < 0.9" and it divides by
// zero); such a run has no figures, and a comparison must not go on without
// them.
var ErrBadRow = errors.New("perftest: result row is not a row of figures")

// stdevColumn is the one column allowed to be NaN. perftest computes the
// variance in an int, which overflows once a latency passes about 46 ms,
// and then prints -nan (send_lat_all_client.txt, 8 MiB): the row's other
// figures are sound, and nothing here uses the standard deviation.
const stdevColumn = "t_stdev[usec]"

// maxFigure bounds every figure: the largest number of microseconds whose
// double (RoundTrip) a time.Duration still holds.
const maxFigure = math.MaxInt64 / 2 / 1e3

// Headers with spaces inside a column name; joined before splitting on
// white space.
var multiword = regexp.MustCompile(`(BW|99%|99\.9%)\s+(peak|average|percentile)`)

// gluedNumber is a number with the start of a message stuck to it.
var gluedNumber = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)[A-Za-z]`)

// table finds the result tables (a "#bytes" header and the rows under it;
// one per perftest run, so several when outputs were joined) and returns
// each row as a map from column name to value. Under a header, a line whose
// first field is a whole number (the size) is a row and must be whole and
// numeric; any other line (the rules, perftest's messages) is skipped.
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
		if len(f) == 0 {
			continue
		}
		if _, err := strconv.ParseUint(f[0], 10, 64); err != nil {
			continue // a rule or a message between rows
		}
		if len(f) > len(cols) {
			// perftest ends a row without a newline, so a message printed
			// after it ("Couldn't read remote address", "Can't produce a
			// report" for the next size) is glued to its last number. The
			// row itself is whole: keep it.
			if m := gluedNumber.FindStringSubmatch(f[len(cols)-1]); m != nil {
				f = append(f[:len(cols)-1:len(cols)-1], m[1])
			}
		}
		if len(f) != len(cols) {
			return nil, fmt.Errorf("%w: %q has %d fields under a header of %d", ErrBadRow, line, len(f), len(cols))
		}
		row := make(map[string]float64, len(cols))
		for i, s := range f {
			v, err := figure(s, cols[i] == stdevColumn)
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %s %w", ErrBadRow, line, cols[i], err)
			}
			row[cols[i]] = v
		}
		rows = append(rows, row)
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

// figure parses one cell: a finite number from 0 to maxFigure. glibc
// prints a NaN as "-nan" or "nan" and infinity as "inf"; with nanOK, a NaN
// is returned as NaN (the standard deviation column), anything else
// non-finite is an error.
func figure(s string, nanOK bool) (float64, error) {
	if t := strings.TrimLeft(s, "+-"); strings.EqualFold(t, "nan") {
		if nanOK {
			return math.NaN(), nil
		}
		return 0, fmt.Errorf("is %q: perftest could not time the run (see its messages)", s)
	}
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("is %q, not a number", s)
	case math.IsInf(v, 0):
		return 0, fmt.Errorf("is %q: perftest could not time the run (see its messages)", s)
	case v < 0 || v > maxFigure:
		return 0, fmt.Errorf("is %s, out of range", s)
	}
	return v, nil
}
