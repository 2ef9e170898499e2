package callgrind

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Client requests: valgrind core's, and callgrind's ('C','T' tool base).
const (
	reqRunningOnValgrind = 0x1001
	reqDumpStats         = 'C'<<24 | 'T'<<16 + 0
)

// OutEnv names the file callgrind writes to, as given to its
// --callgrind-out-file (with %p for the pid): Take reads its dumps there.
const OutEnv = "RDMARPC_CALLGRIND_OUT"

// Godebug is the GODEBUG a Go program needs to run under callgrind: no
// preemption by signal (callgrind does not survive it), and no RDTSCP in
// the runtime's cputicks, which valgrind before 3.20 does not know (a Go
// program on a CPU that has it dies with SIGILL at its first contended
// runtime lock; without it cputicks fences and reads the TSC).
const Godebug = "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off"

// Running reports whether the process runs under valgrind.
func Running() bool {
	args := [6]uint64{reqRunningOnValgrind}
	return request(&args) > 0
}

var mu sync.Mutex

// Take returns the instructions executed, by all the process's threads,
// since the last Take (or the start), and zeroes callgrind's counters. It
// returns 0 outside valgrind.
func Take() (uint64, error) {
	if !Running() {
		return 0, nil
	}
	mu.Lock()
	defer mu.Unlock()
	pattern := os.Getenv(OutEnv)
	if pattern == "" {
		return 0, fmt.Errorf("callgrind: %s is not set: where the dumps go is unknown", OutEnv)
	}
	out := strings.ReplaceAll(pattern, "%p", strconv.Itoa(os.Getpid()))
	before, _ := filepath.Glob(out + ".*")
	args := [6]uint64{reqDumpStats}
	request(&args)
	after, err := filepath.Glob(out + ".*")
	if err != nil {
		return 0, err
	}
	var fresh string
	seen := make(map[string]bool, len(before))
	for _, f := range before {
		seen[f] = true
	}
	for _, f := range after {
		if !seen[f] {
			fresh = f
		}
	}
	if fresh == "" {
		return 0, fmt.Errorf("callgrind: no new dump beside %s", out)
	}
	return totals(fresh)
}

// totals reads the Ir total of a callgrind dump ("totals:" or "summary:",
// the first event being Ir).
func totals(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, key := range []string{"totals:", "summary:"} {
			if rest, ok := strings.CutPrefix(line, key); ok {
				fields := strings.Fields(rest)
				if len(fields) == 0 {
					continue
				}
				return strconv.ParseUint(fields[0], 10, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("callgrind: %s has no totals", path)
}
