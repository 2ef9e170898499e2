package callgrind

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestTotals(t *testing.T) {
	n, err := totals("testdata/dump.1")
	if err != nil || n != 4087061 {
		t.Fatalf("totals: %d, %v; want 4087061", n, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("events: Ir\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := totals(empty); err == nil {
		t.Fatal("a dump without totals read as one")
	}
}

// Outside valgrind the client requests are no-ops: Take counts nothing.
func TestOutsideValgrind(t *testing.T) {
	if Running() {
		t.Skip("running under valgrind")
	}
	if n, err := Take(); n != 0 || err != nil {
		t.Fatalf("Take outside valgrind: %d, %v", n, err)
	}
}

// Under callgrind (when valgrind is installed), Take counts a loop's
// instructions: about three per iteration of a loop of a million.
func TestUnderCallgrind(t *testing.T) {
	if os.Getenv("CALLGRIND_CHILD") != "" {
		if _, err := Take(); err != nil {
			t.Fatal(err)
		}
		s := 0
		for i := range 1_000_000 {
			s += i
		}
		n, err := Take()
		if err != nil {
			t.Fatal(err)
		}
		if n < 1_000_000 || n > 20_000_000 {
			t.Fatalf("a loop of a million iterations: %d instructions (sum %d)", n, s)
		}
		return
	}
	if _, err := exec.LookPath("valgrind"); err != nil {
		t.Skip("no valgrind")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := Command(filepath.Join(t.TempDir(), "cg.%p"), exe, "-test.run=^TestUnderCallgrind$")
	cmd.Env = append(cmd.Env, "CALLGRIND_CHILD=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("under callgrind: %v\n%s", err, b)
	}
}
