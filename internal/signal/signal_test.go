package signal

import (
	"errors"
	"sync"
	"testing"
)

func TestFirstErrorWins(t *testing.T) {
	var s Signal
	if s.IsSet() || s.Err() != nil {
		t.Fatal("zero Signal is set")
	}
	select {
	case <-s.Done():
		t.Fatal("Done closed before Set")
	default:
	}
	a, b := errors.New("a"), errors.New("b")
	if !s.Set(a) {
		t.Fatal("first Set reported false")
	}
	if s.Set(b) {
		t.Fatal("second Set reported true")
	}
	<-s.Done()
	if s.Err() != a || s.Wait() != a {
		t.Fatalf("Err = %v, want a", s.Err())
	}
}

func TestNilErrorStillSets(t *testing.T) {
	var s Signal
	s.Set(nil)
	if !errors.Is(s.Err(), ErrSet) {
		t.Fatalf("Err = %v, want ErrSet", s.Err())
	}
}

func TestConcurrentSetOneWinner(t *testing.T) {
	var s Signal
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Done()
			if s.Set(errors.New("x")) {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d winners, want 1", wins)
	}
}
