package metadata

import (
	"context"
	"reflect"
	"testing"
)

func TestOutgoing(t *testing.T) {
	ctx := NewOutgoingContext(context.Background(), Pairs("A", "1"))
	ctx = AppendToOutgoingContext(ctx, "a", "2", "b", "3")
	ctx2 := AppendToOutgoingContext(ctx, "c", "4") // must not change ctx's view
	md, ok := FromOutgoingContext(ctx)
	if !ok || !reflect.DeepEqual(md, MD{"a": {"1", "2"}, "b": {"3"}}) {
		t.Fatalf("%v", md)
	}
	md2, _ := FromOutgoingContext(ctx2)
	if len(md2) != 3 {
		t.Fatalf("%v", md2)
	}
	md["a"][0] = "changed"
	if again, _ := FromOutgoingContext(ctx); again["a"][0] != "1" {
		t.Fatal("FromOutgoingContext must return a copy")
	}
}

func TestIncomingAndJoin(t *testing.T) {
	ctx := NewIncomingContext(context.Background(), Pairs("k", "v"))
	if got := ValueFromIncomingContext(ctx, "K"); len(got) != 1 || got[0] != "v" {
		t.Fatalf("%v", got)
	}
	j := Join(Pairs("a", "1"), Pairs("a", "2", "b", "3"))
	if !reflect.DeepEqual(j, MD{"a": {"1", "2"}, "b": {"3"}}) {
		t.Fatalf("%v", j)
	}
	j.Set("B", "x")
	j.Delete("a")
	if !reflect.DeepEqual(j, MD{"b": {"x"}}) {
		t.Fatalf("%v", j)
	}
}

func TestPairsOdd(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Pairs with an odd count must panic")
		}
	}()
	//lint:ignore SA5012 the odd count is what this test is about
	Pairs("a")
}
