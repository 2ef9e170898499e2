package callgrind

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
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

// Command returns the command that runs exe with args under callgrind,
// its dumps written to out (where %p stands for the pid, as in
// --callgrind-out-file), with the environment Take and the Go runtime need.
//
// Valgrind runs one thread at a time. By default a thread that yields
// (sched_yield, which the Go runtime's lock and preemption spins call)
// may take the lock straight back, so the thread it waits for does not
// run: a collection cycle or a scheduler spin then burns billions of
// instructions in one cell (seen at 64 KiB: 2M–365M "per call" where a
// call takes 120k). --fair-sched=yes hands the lock over in turn.
func Command(out, exe string, args ...string) *exec.Cmd {
	cmd := exec.Command("valgrind", append([]string{"--tool=callgrind", "--quiet", "--fair-sched=yes", "--callgrind-out-file=" + out, exe}, args...)...)
	cmd.Env = append(os.Environ(), OutEnv+"="+out, Godebug)
	return cmd
}

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
