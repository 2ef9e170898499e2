package store

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// BenchmarkBatch measures a Batch committed and synced on disk, as kvserver
// --sync always does, with the change log (Store.Batch) and without it (the
// same mutations in one Pebble batch applied and synced as Batch did before
// the log existed), so that what the log costs a batch is the difference.
// Keys are new each time, as a writer of fresh keys makes them.
func BenchmarkBatch(b *testing.B) {
	for _, n := range []int{16, 10000} {
		for _, valueSize := range []int{16, 128, 1024} {
			for _, withLog := range []bool{false, true} {
				name := fmt.Sprintf("mutations=%d/value=%d/log=%v", n, valueSize, withLog)
				b.Run(name, func(b *testing.B) { benchmarkBatch(b, n, valueSize, withLog) })
			}
		}
	}
}

func benchmarkBatch(b *testing.B, n, valueSize int, withLog bool) {
	s, err := Open(Options{Dir: b.TempDir(), NoFreeSpaceCheck: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	value := make([]byte, valueSize)
	muts := make([]Mutation, n)
	size := 0
	for j := range muts {
		muts[j] = Mutation{Key: fmt.Appendf(nil, "batch/%06d/%05d", 0, j), Value: value}
		size += len(muts[j].Key) + valueSize
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		for j := range muts {
			muts[j].Key = fmt.Appendf(muts[j].Key[:0], "batch/%06d/%05d", i, j)
		}
		if withLog {
			err = s.Batch(muts)
		} else {
			err = s.batchWithoutLog(muts)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// batchWithoutLog is Batch's write as it was before the change log: the
// mutations' keys locked, one Pebble batch, applied and synced.
func (s *Store) batchWithoutLog(muts []Mutation) error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	unlock := s.lock(muts)
	defer unlock()
	pb := s.db.NewBatch()
	defer pb.Close()
	for _, m := range muts {
		if err := pb.Set(dataKey(m.Key), m.Value, nil); err != nil {
			return err
		}
	}
	return s.db.Apply(pb, pebble.Sync)
}
