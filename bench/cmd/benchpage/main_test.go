package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommittedPages: each committed page is what benchpage writes from
// the committed files of its run, so a page never says more or other than
// its data (regenerate with bench/pages.sh, or benchpage alone after
// editing a meta.txt).
func TestCommittedPages(t *testing.T) {
	for name := range areas {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "..", "results", name)
			got, err := render(name, dir)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(dir + ".md")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("bench/results/%s.md is not what benchpage writes from bench/results/%s/: run `go run ./cmd/benchpage -area %s -dir results/%s` in bench/", name, name, name, name)
			}
		})
	}
}

// write puts files (name → content) in a new directory, with a complete
// meta.txt unless files has one.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if _, ok := files["meta.txt"]; !ok {
		files["meta.txt"] = "date: d\ncommit: c\nmachine: m\nload: l\ncommand: x --y\nnote: first\nnote: second\n"
	}
	for name, s := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestMeta(t *testing.T) {
	dir := write(t, map[string]string{"meta.txt": "# a comment\ndate: today\ncommit: abc\n"})
	if _, err := readMeta(filepath.Join(dir, "meta.txt")); err == nil || !strings.Contains(err.Error(), "no machine, load, command") {
		t.Errorf("meta without machine, load, command: %v", err)
	}
	dir = write(t, map[string]string{"meta.txt": "date today\n"})
	if _, err := readMeta(filepath.Join(dir, "meta.txt")); err == nil || !strings.Contains(err.Error(), "key: value") {
		t.Errorf("a line without a colon: %v", err)
	}
}

const csvHead = "impl,transport,size_bytes,concurrency,calls,seconds,calls_per_s,mb_per_s,p50_us,p99_us,p999_us,allocs_per_call,bytes_per_call,csw_per_call,wakeups_per_call,cgo_per_call,cpu_us_per_call\n"

// TestTCP: ratios pair cells of the same size and callers, a missing peer
// is a dash, a run with the servers in processes of their own shows both
// ends' costs, and inproc.csv fills the one-process column.
func TestTCP(t *testing.T) {
	peers := csvHead +
		"rdmarpc,tcp,64,1,1000,1.000,1000.0,0.064,10.00,20.00,30.00,7.00,800.0,0.1,5.00,0.00,12.00\n" +
		"raw,tcp,64,1,2000,1.000,2000.0,0.128,5.00,8.00,9.00,2.00,100.0,0.1,2.00,0.00,6.00\n" +
		"grpc,tcp,64,1,500,1.000,500.0,0.032,20.00,40.00,60.00,140.00,9000.0,0.1,9.00,0.00,30.00\n" +
		"grpc,tcp,64,16,500,1.000,500.0,0.032,99.00,99.00,99.00,140.00,9000.0,0.1,9.00,0.00,30.00\n"
	dir := write(t, map[string]string{"peers.csv": peers})
	page, err := render("tcp", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Client and server in one process",
		"| 64 B | 1 | 10.0 | 20.0 | 1000 | 12.0 | — | 7.0 | 2.00 | — | 0.50 | 2.00 | — |",
		"The last column waits for a run with client and server in one process",
		"| commit | c |", "| command | `x --y` |", "- first\n- second\n",
	} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	splitHead := strings.TrimSuffix(csvHead, "\n") + ",vcsw_per_call,server_cpu_us_per_call,server_vcsw_per_call,server_allocs_per_call\n"
	split := splitHead +
		"rdmarpc,tcp,64,1,1000,1.000,1000.0,0.064,10.00,20.00,30.00,7.00,800.0,0.1,5.00,0.00,12.00,1.20,11.00,1.30,3.00\n" +
		"raw,tcp,64,1,2000,1.000,2000.0,0.128,5.00,8.00,9.00,2.00,100.0,0.1,2.00,0.00,6.00,1.00,5.00,1.00,0.00\n"
	dir = write(t, map[string]string{"peers.csv": split, "inproc.csv": csvHead +
		"rdmarpc,tcp,64,1,1000,1.000,1000.0,0.064,14.00,20.00,30.00,7.00,800.0,0.1,5.00,0.00,12.00\n"})
	page, err = render("tcp", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Each server (rdmarpc's and every peer's) in a process of its own",
		"| 64 B | 1 | 10.0 | 20.0 | 1000 | 12.0 / 11.0 | 1.20 / 1.30 | 7.0 / 3.0 | 2.00 | — | — | — | 14.0 |",
		"| raw | 64 B | 1 | 5.0 | 8.0 | 9.0 | 2000 | 6.0 / 5.0 | 1.00 / 1.00 | 2.0 / — |",
	} {
		if !bytes.Contains(page, []byte(want)) || bytes.Contains(page, []byte("waits for a run")) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	// streams.csv: rdmarpc's stream cells, each beside gRPC-go's of the
	// same mode, size and callers.
	dir = write(t, map[string]string{"peers.csv": split, "streams.csv": splitHead +
		"rdmarpc/pingpong,tcp,64,1,1000,1.000,1000.0,0.064,10.00,20.00,30.00,7.00,800.0,0.1,5.00,0.00,12.00,1.20,11.00,1.30,3.00\n" +
		"grpc/pingpong,tcp,64,1,500,1.000,500.0,0.032,20.00,40.00,60.00,140.00,9000.0,0.1,9.00,0.00,30.00,2.00,28.00,2.00,90.00\n" +
		"grpc/stream,tcp,64,1,4000,1.000,4000.0,0.256,0.00,0.00,0.00,1.00,90.0,0.1,1.00,0.00,3.00,0.10,2.00,0.10,1.00\n" +
		"rdmarpc/stream,tcp,64,1,8000,1.000,8000.0,0.512,0.00,0.00,0.00,0.50,80.0,0.1,1.00,0.00,2.00,0.05,1.50,0.05,0.50\n"})
	page, err = render("tcp", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## Streams, against gRPC-go",
		"| pingpong | 64 B | 1 | 10.0 | 1000 | 12.0 / 11.0 | 1.20 / 1.30 | 7.0 / 3.0 | 0.50 | 2.00 |",
		"| stream | 64 B | 1 | — | 8000 | 2.0 / 1.5 | 0.05 / 0.05 | 0.5 / 0.5 | — | 2.00 |",
	} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if _, err := render("tcp", write(t, map[string]string{"peers.csv": csvHead})); !errors.Is(err, errNoFigures) {
		t.Errorf("no rdmarpc rows: %v, want errNoFigures", err)
	}
}

// TestLadder: the table is taken whole, the progress lines before it and
// the baseline table after it are not.
func TestLadder(t *testing.T) {
	text := "guest: 2 vCPUs, kernel 6.1.0-57-amd64, qemu TCG\n" +
		"  conn             64 B conc 1   p50     89.0 µs  p99    615.0 µs      8494 calls/s\n\n" +
		"The ladder: each rung over the one below it.\n" +
		"rung           size conc     p50 µs\n" +
		"conn             64    1       89.0\n\n" +
		"conn             64   16      593.0\n\n" +
		"rpc-rdma / rpc-tcp at 64 B conc 1: p50 0.24\n\n" +
		"Issue 25's targets, rdma://, client and server in separate processes:\n" +
		"target: rpc-rdma 64 B conc 1 p50 / verbs-busy p50: 2.00 (target ≤ 1.5)\n" +
		"Before (baseline build) and after (this build), same boot:\n" +
		"rung           size conc  p50 before   p50 after\n" +
		"conn             64    1        73.0        89.0\n" +
		"rxe0 rcvd_rnr_err 0\nrxe0 send_rnr_err 0\n" +
		"host: 2 cores, x86_64, load 1.77 1.20 1.35\n"
	l, err := parseLadder(text)
	if err != nil {
		t.Fatal(err)
	}
	if want := "rung           size conc     p50 µs\nconn             64    1       89.0\n\nconn             64   16      593.0"; strings.Join(l.table, "\n") != want {
		t.Errorf("table\n%s\nwant\n%s", strings.Join(l.table, "\n"), want)
	}
	if !l.baseline || len(l.counters) != 2 || l.host == "" || len(l.guest) != 1 || len(l.summary) != 1 ||
		len(l.targets) != 1 || l.targets[0] != "rpc-rdma 64 B conc 1 p50 / verbs-busy p50: 2.00 (target ≤ 1.5)" {
		t.Errorf("parsed %+v", l)
	}
	if _, err := parseLadder("guest: 2 vCPUs\nFAIL no ladder output\n"); !errors.Is(err, errNoFigures) {
		t.Errorf("no table: %v, want errNoFigures", err)
	}
}

// TestScaleLog: from go test -v's log, only the rows under a header count
// (the test logs each row once as it is measured, then the table), and
// two tables are two runs.
func TestScaleLog(t *testing.T) {
	const row1 = "| 1 | 600.0 ms | 28.6 MiB | 26.7 MiB | 0.8 MiB | 0.8 MiB | 15 / 13 | 7 / 9 | 0.3% / 0.2% | 460µs |"
	const row2 = "| 1000 | 6.7 ms | 124.3 MiB | 121.5 MiB | 49.2 MiB | 49.2 MiB | 1014 / 1012 | 2005 / 2007 | 2.6% / 2.5% | 336µs |"
	run := func(keepalive string) string {
		return "=== RUN   TestScaleTable\n" +
			"    scalebench_test.go:365: N=1000: echo p50 on connection 500 of the N: 477µs; client GCs during the extra connection's 1000 echoes: 0\n" +
			"    scalebench_test.go:238: " + row1 + "\n" +
			"    scalebench_test.go:238: " + row2 + "\n" +
			"    scalebench_test.go:241: keepalive on: " + keepalive + "; -scale.opts=shared\n" +
			"    scalebench_test.go:242: | N | setup/conn | RSS client | RSS server | registered client | registered server | fds c/s | goroutines c/s | idle CPU c/s (40s) | echo p50 (extra conn) |\n" +
			"    scalebench_test.go:243: |---|---|---|---|---|---|---|---|---|---|\n" +
			"    scalebench_test.go:245: " + row1 + "\n" +
			"    scalebench_test.go:245: " + row2 + "\n" +
			"    scalebench_test.go:247: Per connection over the idle interval (40s), client / server:\n" +
			"    scalebench_test.go:252: | N | side | messages |\n" +
			"    scalebench_test.go:253: |---|---|---|\n" +
			"    scalebench_test.go:256: | 1000 | client | 1.33 |\n" +
			"    scalebench_test.go:256: | 1000 | server | 1.33 |\n" +
			"--- PASS: TestScaleTable (100.00s)\n"
	}
	runs := parseScale(run("true") + run("false"))
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2: %+v", len(runs), runs)
	}
	for i, r := range runs {
		if len(r.table) != 4 || r.table[2] != row1 || r.table[3] != row2 {
			t.Errorf("run %d: table %q", i, r.table)
		}
		if len(r.options) != 1 || len(r.echoes) != 1 || len(r.costs) != 6 {
			t.Errorf("run %d: options %q, echoes %q, costs %q", i, r.options, r.echoes, r.costs)
		}
	}
	if !strings.Contains(runs[1].options[0], "false") {
		t.Errorf("second run's options: %q", runs[1].options)
	}
}

// TestKV: each round's echo and Get pair up; a round without its Get is an
// error, not a row.
func TestKV(t *testing.T) {
	round := func(scheme, echo, get string) string {
		return csvHead + "rdmarpc," + scheme + ",1024,1,100,1.000,100.0,0.1," + echo + ",1.0,1.0,2.1,1000.0,0,0,0,0\n" +
			"kv-get," + scheme + ",1024,1,90,1.000,90.0,0.1," + get + ",1.0,1.0,4.0,1200.0,0,0,0,0\n"
	}
	dir := write(t, map[string]string{
		"round1-rdma.csv": round("rdma", "100.0", "110.0"),
		"round2-rdma.csv": round("rdma", "100.0", "130.0"),
		"round3-rdma.csv": round("rdma", "100.0", "120.0"),
		"round1-tcp.csv":  round("tcp", "200.0", "220.0"),
	})
	page, err := render("kv", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| 2 | rdma:// | 1 KiB | 1 | 100.0 | 130.0 | 1.30 |",
		"rdma:// at 1 KiB, 1 caller: Get / echo median 1.20 over 3 rounds (1.10–1.30)",
		"tcp:// p50 over rdma:// p50, same round, echo and Get: median 2.00 (2.00–2.00)",
	} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	dir = write(t, map[string]string{"round1-rdma.csv": csvHead + "rdmarpc,rdma,1024,1,100,1.000,100.0,0.1,100.0,1.0,1.0,2.1,1000.0,0,0,0,0\n"})
	if _, err := render("kv", dir); err == nil || !strings.Contains(err.Error(), "no kv-get row") {
		t.Errorf("a round without its Get: %v", err)
	}
}
