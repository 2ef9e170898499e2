//go:build !unix

package tcp

import "time"

// processCPU is not measured here: the benchmarks report 0 CPU per op.
func processCPU() time.Duration { return 0 }
