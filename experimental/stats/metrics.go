package stats

import (
	"maps"
	"slices"
)

// Metrics is a set of metric names. Its methods return new sets: a set,
// once made, is not changed.
type Metrics struct {
	names map[string]bool
}

// NewMetrics returns the set of names.
func NewMetrics(names ...string) *Metrics {
	m := &Metrics{names: make(map[string]bool, len(names))}
	for _, n := range names {
		m.names[n] = true
	}
	return m
}

// Metrics returns the set's names, sorted.
func (m *Metrics) Metrics() []string {
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(m.names))
}

// Has reports whether name is in the set.
func (m *Metrics) Has(name string) bool { return m != nil && m.names[name] }

// Add returns the set with names added.
func (m *Metrics) Add(names ...string) *Metrics {
	return NewMetrics(append(m.Metrics(), names...)...)
}

// Join returns the union of m and other.
func (m *Metrics) Join(other *Metrics) *Metrics {
	return m.Add(other.Metrics()...)
}

// Remove returns the set without names.
func (m *Metrics) Remove(names ...string) *Metrics {
	out := NewMetrics(m.Metrics()...)
	for _, n := range names {
		delete(out.names, n)
	}
	return out
}
