package stats

import (
	"slices"
	"testing"
)

func TestMetrics(t *testing.T) {
	a := NewMetrics("x", "y")
	b := a.Add("z").Remove("x")
	if got := b.Metrics(); !slices.Equal(got, []string{"y", "z"}) {
		t.Errorf("Add then Remove: %v", got)
	}
	if got := a.Metrics(); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("a changed: %v", got)
	}
	if j := a.Join(NewMetrics("w")); !j.Has("w") || !j.Has("x") || j.Has("z") {
		t.Errorf("Join: %v", j.Metrics())
	}
	var none *Metrics
	if none.Has("x") || len(none.Metrics()) != 0 || !none.Add("x").Has("x") {
		t.Error("a nil set is not the empty set")
	}
}
