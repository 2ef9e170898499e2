package golden_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The end-to-end tests start servers and connections; none may outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
