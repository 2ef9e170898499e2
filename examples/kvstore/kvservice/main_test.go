package kvservice

import (
	"testing"

	"go.uber.org/goleak"
)

// Every watch a test starts must have returned by the end: no handler
// goroutine outlives its stream.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
