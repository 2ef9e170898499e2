package attributes

import (
	"fmt"
	"maps"
	"sort"
	"strings"
)

// Attributes is an immutable map. A nil *Attributes is empty and valid.
type Attributes struct {
	m map[any]any
}

// New returns an Attributes holding key and value.
func New(key, value any) *Attributes {
	return &Attributes{m: map[any]any{key: value}}
}

// WithValue returns a copy of a with key set to value; a is unchanged.
func (a *Attributes) WithValue(key, value any) *Attributes {
	n := &Attributes{m: make(map[any]any, a.Len()+1)}
	if a != nil {
		maps.Copy(n.m, a.m)
	}
	n.m[key] = value
	return n
}

// Value returns the value for key, or nil.
func (a *Attributes) Value(key any) any {
	if a == nil {
		return nil
	}
	return a.m[key]
}

// Len is the number of keys.
func (a *Attributes) Len() int {
	if a == nil {
		return 0
	}
	return len(a.m)
}

// Equal reports whether a and o hold the same keys with equal values. A
// value with an Equal(any) bool method is compared with it, any other with ==
// (values that are not comparable are never equal).
func (a *Attributes) Equal(o *Attributes) bool {
	if a.Len() != o.Len() {
		return false
	}
	if a.Len() == 0 {
		return true
	}
	for k, v := range a.m {
		ov, ok := o.m[k]
		if !ok || !equal(v, ov) {
			return false
		}
	}
	return true
}

func equal(v, o any) (eq bool) {
	if e, ok := v.(interface{ Equal(any) bool }); ok {
		return e.Equal(o)
	}
	defer func() {
		if recover() != nil { // == on values that are not comparable
			eq = false
		}
	}()
	return v == o
}

// String lists the pairs in a stable order, for logs and test failures.
func (a *Attributes) String() string {
	if a.Len() == 0 {
		return "{}"
	}
	pairs := make([]string, 0, len(a.m))
	for k, v := range a.m {
		pairs = append(pairs, fmt.Sprintf("%v: %v", k, v))
	}
	sort.Strings(pairs)
	return "{" + strings.Join(pairs, ", ") + "}"
}
