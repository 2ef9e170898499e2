package attributes

import "testing"

type key string

type eqVal struct{ n int }

func (e eqVal) Equal(o any) bool { x, ok := o.(eqVal); return ok && x.n%10 == e.n%10 }

func TestWithValueCopies(t *testing.T) {
	a := New(key("a"), 1)
	b := a.WithValue(key("b"), 2)
	if a.Value(key("b")) != nil || a.Len() != 1 {
		t.Fatalf("WithValue changed the original: %v", a)
	}
	if b.Value(key("a")) != 1 || b.Value(key("b")) != 2 {
		t.Fatalf("b = %v", b)
	}
	var n *Attributes
	if n.Value(key("a")) != nil || n.Len() != 0 || n.WithValue(key("x"), 3).Value(key("x")) != 3 {
		t.Fatal("a nil Attributes is not an empty map")
	}
}

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b *Attributes
		want bool
	}{
		{"both nil", nil, nil, true},
		{"nil and empty", nil, &Attributes{}, true},
		{"same", New(key("a"), 1), New(key("a"), 1), true},
		{"other value", New(key("a"), 1), New(key("a"), 2), false},
		{"other key", New(key("a"), 1), New(key("b"), 1), false},
		{"more keys", New(key("a"), 1), New(key("a"), 1).WithValue(key("b"), 2), false},
		{"Equal method", New(key("a"), eqVal{1}), New(key("a"), eqVal{11}), true},
		{"not comparable", New(key("a"), []int{1}), New(key("a"), []int{1}), false},
	} {
		if got := tc.a.Equal(tc.b); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
		if got := tc.b.Equal(tc.a); got != tc.want {
			t.Errorf("%s: reversed Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
}
