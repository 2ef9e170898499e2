package store

import (
	"testing"

	"go.uber.org/goleak"
)

// Pebble runs background goroutines; Close must end them all.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
