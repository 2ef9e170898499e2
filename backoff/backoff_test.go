package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	c := DefaultConfig
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, time.Second},
		{2, 1600 * time.Millisecond},
		{3, 2560 * time.Millisecond},
		{20, 120 * time.Second}, // capped
	} {
		for range 100 {
			d := c.Delay(tc.failures)
			lo, hi := time.Duration(float64(tc.want)*0.8), time.Duration(float64(tc.want)*1.2)
			if d < lo-time.Millisecond || d > hi+time.Millisecond {
				t.Fatalf("Delay(%d) = %v, want %v ± 20%%", tc.failures, d, tc.want)
			}
		}
	}
	noJitter := Config{BaseDelay: time.Second, Multiplier: 2, MaxDelay: 5 * time.Second}
	if d := noJitter.Delay(3); d != 4*time.Second {
		t.Fatalf("without jitter Delay(3) = %v, want 4s", d)
	}
}
