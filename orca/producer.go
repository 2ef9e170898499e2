package orca

import (
	"context"
	"sync"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rdmarpc/rdmarpc/backoff"
	"github.com/rdmarpc/rdmarpc/balancer"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/orca/internal/pb"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// OOBListener receives a backend's out-of-band load reports.
type OOBListener interface {
	// OnLoadReport is called with each report, one at a time.
	OnLoadReport(*v3orcapb.OrcaLoadReport)
}

// OOBListenerOptions configure a listener.
type OOBListenerOptions struct {
	// ReportInterval is the interval asked of the server, which may raise
	// it to its minimum. The stream asks for the least interval of the
	// SubConn's listeners.
	ReportInterval time.Duration
}

// RegisterOOBListener streams the out-of-band reports of sc's backend to l
// while sc is Ready (reconnecting the stream, with backoff, as sc
// reconnects), until the returned stop is called or sc shuts down. sc must
// be one the ClientConn made (a balancer.ProducerSubConn); on another, l
// gets nothing.
func RegisterOOBListener(sc balancer.SubConn, l OOBListener, opts OOBListenerOptions) (stop func()) {
	psc, ok := sc.(balancer.ProducerSubConn)
	if !ok {
		return func() {}
	}
	pr, closeP := psc.GetOrBuildProducer(producerBuilder{})
	p := pr.(*producer)
	p.add(l, opts.ReportInterval)
	return sync.OnceFunc(func() {
		p.remove(l, opts.ReportInterval)
		closeP()
	})
}

type producerBuilder struct{}

func (producerBuilder) Build(streams any) (balancer.Producer, func()) {
	p := &producer{client: pb.NewOpenRcaServiceClient(streams.(rpc.ClientConnInterface)), listeners: map[OOBListener]time.Duration{}}
	return p, p.close
}

// producer runs one stream for all the listeners of a SubConn, at the
// least interval they asked for.
type producer struct {
	client pb.OpenRcaServiceClient

	// runMu serializes the changes of the running stream (add, remove,
	// close); it is never held by the stream's goroutine.
	runMu    sync.Mutex
	interval time.Duration // the running stream's
	stop     func()        // stops the running stream's goroutine and waits; nil: none runs
	closed   bool          // the SubConn's Producer was closed: nothing runs again

	mu        sync.Mutex // guards listeners; held while they are told a report
	listeners map[OOBListener]time.Duration
}

func (p *producer) add(l OOBListener, interval time.Duration) {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	p.mu.Lock()
	p.listeners[l] = interval
	p.mu.Unlock()
	if p.stop == nil || interval < p.interval {
		p.restart()
	}
}

func (p *producer) remove(l OOBListener, interval time.Duration) {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	p.mu.Lock()
	delete(p.listeners, l)
	p.mu.Unlock()
	if interval == p.interval {
		p.restart()
	}
}

func (p *producer) close() {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	p.closed = true
	p.restart()
}

// restart stops the running stream and starts one at the least interval
// the listeners ask, if there are any and p is not closed. Under runMu.
func (p *producer) restart() {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	p.mu.Lock()
	n := len(p.listeners)
	first := true
	for _, d := range p.listeners {
		if first || d < p.interval {
			p.interval, first = d, false
		}
	}
	p.mu.Unlock()
	if p.closed || n == 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go p.run(ctx, done, p.interval)
	p.stop = func() { cancel(); <-done }
}

// run keeps a stream open until ctx ends, with backoff between attempts
// that got no report; a server without the service ends it.
func (p *producer) run(ctx context.Context, done chan struct{}, interval time.Duration) {
	defer close(done)
	bo := backoff.DefaultConfig
	for failures := 0; ; {
		got, err := p.runStream(ctx, interval)
		if ctx.Err() != nil || status.Code(err) == codes.Unimplemented {
			return
		}
		if got {
			failures = 0
		}
		t := time.NewTimer(bo.Delay(failures + 1))
		failures++
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (p *producer) runStream(ctx context.Context, interval time.Duration) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := p.client.StreamCoreMetrics(ctx, &pb.OrcaLoadReportRequest{ReportInterval: durationpb.New(interval)})
	if err != nil {
		return false, err
	}
	for {
		r, err := stream.Recv()
		if err != nil {
			return got, err
		}
		got = true
		p.mu.Lock()
		for l := range p.listeners {
			l.OnLoadReport(r)
		}
		p.mu.Unlock()
	}
}
