package connpool

import (
	"errors"
	"testing"
)

type fake struct{ closed int }

func (f *fake) Close() error { f.closed++; return nil }

func TestPool(t *testing.T) {
	var made []*fake
	p := New(func() (*fake, error) { f := &fake{}; made = append(made, f); return f, nil })
	a, _ := p.Get()
	b, _ := p.Get()
	if a == b || len(made) != 2 {
		t.Fatalf("two Gets in use share a connection, or made %d", len(made))
	}
	p.Put(a)
	if c, _ := p.Get(); c != a || len(made) != 2 {
		t.Errorf("Get after Put dialed again (made %d) instead of reusing", len(made))
	}
	p.Discard(b)
	if b.closed != 1 || p.Len() != 1 {
		t.Errorf("Discard: closed %d times, %d open", b.closed, p.Len())
	}
	p.Put(a)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if a.closed != 1 || b.closed != 1 {
		t.Errorf("after Close: closed %d and %d times, want once each", a.closed, b.closed)
	}
	if _, err := p.Get(); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	p.Put(a) // a late Put after Close neither panics nor keeps it
	if p.Len() != 0 || a.closed != 1 {
		t.Errorf("late Put: %d open, closed %d times", p.Len(), a.closed)
	}
}
