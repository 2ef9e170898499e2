package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchpage:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("benchpage", flag.ContinueOnError)
	area := fs.String("area", "", "the page: tcp, rdma, kv or scale")
	dir := fs.String("dir", "", "the run's files (default bench/results/<area>)")
	out := fs.String("out", "", "the page to write (default <dir>.md; - for stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		*dir = filepath.Join("bench", "results", *area)
	}
	if *out == "" {
		*out = filepath.Clean(*dir) + ".md"
	}
	page, err := render(*area, *dir)
	if err != nil {
		return err
	}
	if *out == "-" {
		_, err = stdout.Write(page)
		return err
	}
	return os.WriteFile(*out, page, 0o644)
}

// An area is one page: what it is about, how to regenerate it, and its
// figures from the run's files in dir.
type area struct {
	title, about, target string
	figures              func(w io.Writer, dir string) error
}

var areas = map[string]area{
	"tcp":   tcpArea,
	"rdma":  rdmaArea,
	"kv":    kvArea,
	"scale": scaleArea,
}

// render writes the page of area name from the files in dir.
func render(name, dir string) ([]byte, error) {
	a, ok := areas[name]
	if !ok {
		return nil, fmt.Errorf("-area %q: want tcp, rdma, kv or scale", name)
	}
	m, err := readMeta(filepath.Join(dir, "meta.txt"))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", a.title, a.about)
	fmt.Fprintf(&b, "Regenerate with `%s` (bench/pages.sh %s): it runs the benchmark, replaces the run's files in [%s/](%s/) and writes this page from them with bench/cmd/benchpage.\n\n",
		a.target, name, filepath.Base(dir), filepath.Base(dir))
	fmt.Fprintf(&b, "| run | |\n|---|---|\n")
	for _, k := range []string{"date", "commit", "machine", "load", "command", "source"} {
		if v := m.get(k); v != "" {
			if k == "command" {
				v = "`" + v + "`"
			}
			fmt.Fprintf(&b, "| %s | %s |\n", k, v)
		}
	}
	b.WriteString("\n")
	if err := a.figures(&b, dir); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if notes := m.all("note"); len(notes) > 0 {
		b.WriteString("\nNotes on this run:\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.Bytes(), nil
}

// meta is meta.txt: its "key: value" lines in order.
type meta [][2]string

var required = []string{"date", "commit", "machine", "load", "command"}

func readMeta(path string) (meta, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var m meta
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key: value, got %q", path, n, line)
		}
		m = append(m, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var missing []string
	for _, k := range required {
		if m.get(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: no %s", path, strings.Join(missing, ", "))
	}
	return m, nil
}

// get returns the last value of key, or "".
func (m meta) get(key string) string {
	v := ""
	for _, kv := range m {
		if kv[0] == key {
			v = kv[1]
		}
	}
	return v
}

// all returns every value of key, in order.
func (m meta) all(key string) []string {
	var vs []string
	for _, kv := range m {
		if kv[0] == key {
			vs = append(vs, kv[1])
		}
	}
	return vs
}

// errNoFigures is returned when a run's files hold none of what the page shows.
var errNoFigures = errors.New("no figures")
