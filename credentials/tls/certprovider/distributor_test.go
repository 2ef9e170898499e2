package certprovider_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/credentials/tls/certprovider"
)

// TestDistributor: a reader waits for the first Set (or gives up with its
// context), then gets what was set last, an error included; after Stop,
// readers waiting or to come get ErrProviderClosed and Set does nothing.
func TestDistributor(t *testing.T) {
	d := certprovider.NewDistributor()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.KeyMaterial(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("before any Set, with a cancelled context: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan *certprovider.KeyMaterial, 1)
	go func() {
		km, _ := d.KeyMaterial(ctx)
		got <- km
	}()
	first := &certprovider.KeyMaterial{}
	d.Set(first, nil)
	if km := <-got; km != first {
		t.Fatalf("the waiting reader got %p, want the material set %p", km, first)
	}
	boom := errors.New("boom")
	d.Set(nil, boom)
	if _, err := d.KeyMaterial(ctx); !errors.Is(err, boom) {
		t.Fatalf("after a failed source: %v, want its error", err)
	}

	stopped := certprovider.NewDistributor()
	waiting := make(chan error, 1)
	go func() {
		_, err := stopped.KeyMaterial(ctx)
		waiting <- err
	}()
	stopped.Stop()
	if err := <-waiting; !errors.Is(err, certprovider.ErrProviderClosed) {
		t.Fatalf("a reader waiting at Stop: %v", err)
	}
	stopped.Set(first, nil)
	if _, err := stopped.KeyMaterial(ctx); !errors.Is(err, certprovider.ErrProviderClosed) {
		t.Fatalf("after Stop and a Set: %v", err)
	}
}
