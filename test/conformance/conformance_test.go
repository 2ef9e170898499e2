package conformance

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestWithDefaults(t *testing.T) {
	if got := (Config{}).WithDefaults().Timeout; got != DefaultTimeout {
		t.Errorf("zero Timeout becomes %v, want %v", got, DefaultTimeout)
	}
	if got := (Config{Timeout: time.Minute}).WithDefaults().Timeout; got != time.Minute {
		t.Errorf("Timeout 1m becomes %v", got)
	}
}

// TestContext: the context has the timeout's deadline and ends with the
// test that asked for it.
func TestContext(t *testing.T) {
	before := time.Now()
	var ctx context.Context
	t.Run("inner", func(t *testing.T) {
		ctx = Config{Timeout: time.Hour}.Context(t)
		if d, ok := ctx.Deadline(); !ok || d.Before(before.Add(time.Hour)) {
			t.Errorf("deadline %v, %v; want an hour from now", d, ok)
		}
		if ctx.Err() != nil {
			t.Errorf("context ended early: %v", ctx.Err())
		}
	})
	if ctx.Err() == nil {
		t.Error("the context outlived its test")
	}
}

// TestRunOrder: the tests run in the table's order, each as a subtest.
func TestRunOrder(t *testing.T) {
	var ran []string
	Run(t, Config{}, []Test{
		{"B", func(t *testing.T) { ran = append(ran, t.Name()) }},
		{"A", func(t *testing.T) { ran = append(ran, t.Name()) }},
	})
	if want := []string{"TestRunOrder/B", "TestRunOrder/A"}; len(ran) != 2 || ran[0] != want[0] || ran[1] != want[1] {
		t.Errorf("ran %q, want %q", ran, want)
	}
}

// parked blocks until stop closes: the goroutine the leak tests leave.
func parked(stop chan struct{}) { <-stop }

// TestRunAllowsLeakOptions: a goroutine that LeakOptions name does not
// fail the test.
func TestRunAllowsLeakOptions(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	Run(t, Config{LeakOptions: []goleak.Option{goleak.IgnoreAnyFunction("github.com/rdmarpc/rdmarpc/test/conformance.parked")}},
		[]Test{{"Parks", func(t *testing.T) { go parked(stop) }}})
}

// TestRunFindsALeak: a test that leaves a goroutine behind fails. It runs
// the leaking test in a child process, whose failure is the point.
func TestRunFindsALeak(t *testing.T) {
	if os.Getenv("CONFORMANCE_LEAK_CHILD") == "1" {
		stop := make(chan struct{})
		defer close(stop)
		Run(t, Config{}, []Test{{"Leaks", func(t *testing.T) { go parked(stop) }}})
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunFindsALeak$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "CONFORMANCE_LEAK_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte("--- FAIL: TestRunFindsALeak/Leaks")) ||
		!bytes.Contains(out, []byte("found unexpected goroutines")) {
		t.Fatalf("the leaking test did not fail on its leak (err %v):\n%s", err, out)
	}
}
