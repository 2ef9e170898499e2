//go:build race

package rdma

// raceEnabled: the race detector is on (sync.Pool then drops a share of
// what is put back, on purpose, so allocation counts mean nothing).
const raceEnabled = true
