package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// transportCounter is one transport counter or gauge of a running process,
// read from its Prometheus endpoint (contrib/prometheus's
// rdmarpc_transport_* series): rdma://'s conns_opened_<device>, say.
type transportCounter struct {
	Scheme string  `json:"scheme"`
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
}

// maxMetricsBytes bounds what stats --metrics reads from an endpoint.
const maxMetricsBytes = 8 << 20

// fetchTransportCounters reads the rdmarpc_transport_* series at url.
func fetchTransportCounters(ctx context.Context, url string) ([]transportCounter, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--metrics %q: %w", url, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseTransportCounters(io.LimitReader(resp.Body, maxMetricsBytes))
}

// parseTransportCounters picks the rdmarpc_transport_* samples out of the
// Prometheus text format, sorted by scheme and name ("_total" dropped).
// Other lines, and samples it cannot read, are skipped.
func parseTransportCounters(r io.Reader) ([]transportCounter, error) {
	const prefix = "rdmarpc_transport_"
	var out []transportCounter
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		name, rest := line[len(prefix):], ""
		scheme := ""
		if i := strings.IndexAny(name, "{ "); i >= 0 {
			name, rest = name[:i], name[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				continue
			}
			for _, l := range strings.Split(rest[1:end], ",") {
				if k, v, ok := strings.Cut(l, "="); ok && strings.TrimSpace(k) == "scheme" {
					scheme = strings.Trim(strings.TrimSpace(v), `"`)
				}
			}
			rest = rest[end+1:]
		}
		name = strings.TrimSuffix(name, "_total")
		f := strings.Fields(rest)
		if len(f) == 0 || name == "" {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out = append(out, transportCounter{Scheme: scheme, Name: name, Value: v})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b transportCounter) int {
		if c := strings.Compare(a.Scheme, b.Scheme); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

func printTransportCounters(w io.Writer, url string, cs []transportCounter) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "transport counters of %s\n", url)
	if len(cs) == 0 {
		fmt.Fprintln(tw, "  (none: no rdmarpc_transport_* series)")
	}
	for _, c := range cs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Scheme, c.Name, strconv.FormatFloat(c.Value, 'f', -1, 64))
	}
	return tw.Flush()
}
