package verbs

import (
	"errors"
	"sync"
	"syscall"
	"testing"
)

func TestWCStatusString(t *testing.T) {
	for _, tc := range []struct {
		s    WCStatus
		want string
	}{
		{WCSuccess, "IBV_WC_SUCCESS: success"},
		{WCRNRRetryExcErr, "IBV_WC_RNR_RETRY_EXC_ERR: RNR retry counter exceeded"},
		{WCWRFlushErr, "IBV_WC_WR_FLUSH_ERR: Work Request Flushed Error"},
		{WCRetryExcErr, "IBV_WC_RETRY_EXC_ERR: transport retry counter exceeded"},
		{WCTMRndvIncomplete, "IBV_WC_TM_RNDV_INCOMPLETE: TM software rendezvous"},
		{99, "IBV_WC_STATUS(99): unknown status"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("WCStatus(%d).String() = %q, want %q", uint32(tc.s), got, tc.want)
		}
	}
	// Every status has a name.
	for s := WCSuccess; s <= WCTMRndvIncomplete; s++ {
		if wcStatusText[s].name == "" {
			t.Errorf("WCStatus %d has no text", uint32(s))
		}
	}
}

func TestWorkCompletionErr(t *testing.T) {
	ok := WorkCompletion{ID: 1, Status: WCSuccess}
	if err := ok.Err(); err != nil {
		t.Fatalf("success completion: Err() = %v", err)
	}
	bad := WorkCompletion{ID: 7, Status: WCRNRRetryExcErr, QPNum: 17, VendorErr: 0x81}
	err := bad.Err()
	var wce *WCError
	if !errors.As(err, &wce) || wce.Status != WCRNRRetryExcErr {
		t.Fatalf("Err() = %#v, want a *WCError with the status", err)
	}
	want := "rdma: work request 7 on QP 17 failed: IBV_WC_RNR_RETRY_EXC_ERR: RNR retry counter exceeded (vendor_err 0x81)"
	if err.Error() != want {
		t.Errorf("Err().Error() = %q, want %q", err.Error(), want)
	}
}

func TestEventTypeString(t *testing.T) {
	if got, want := EventPortErr.String(), "IBV_EVENT_PORT_ERR: port error"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := (AsyncEvent{Type: EventQPFatal, QPNum: 5}).String(),
		"IBV_EVENT_QP_FATAL: local work queue catastrophic error (QP 5)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for e := EventCQErr; e <= EventWQFatal; e++ {
		if eventText[e].name == "" {
			t.Errorf("event %d has no text", uint32(e))
		}
	}
}

func TestMTU(t *testing.T) {
	for _, b := range []int{256, 512, 1024, 2048, 4096} {
		e, err := mtuToEnum(b)
		if err != nil {
			t.Fatalf("mtuToEnum(%d): %v", b, err)
		}
		if back := mtuFromEnum(e); back != b {
			t.Errorf("mtuFromEnum(mtuToEnum(%d)) = %d", b, back)
		}
	}
	for _, b := range []int{0, 1000, 1500, 9000} {
		if _, err := mtuToEnum(b); err == nil {
			t.Errorf("mtuToEnum(%d) accepted an invalid MTU", b)
		}
	}
	if mtuFromEnum(0) != 0 || mtuFromEnum(6) != 0 {
		t.Error("mtuFromEnum accepted an invalid enum")
	}
}

func TestGIDAndGUIDString(t *testing.T) {
	g := GID{10: 0xff, 11: 0xff, 12: 10, 13: 9, 14: 9, 15: 1}
	if g.String() != "10.9.9.1" || g.IsZero() {
		t.Errorf("GID %v: String %q IsZero %v", g[:], g.String(), g.IsZero())
	}
	if !(GID{}).IsZero() {
		t.Error("zero GID is not IsZero")
	}
	if got := GUID(0x0123456789abcdef).String(); got != "0123:4567:89ab:cdef" {
		t.Errorf("GUID.String() = %q", got)
	}
}

func TestErrorsWrap(t *testing.T) {
	err := rcError("ibv_modify_qp", int(syscall.EINVAL), nil)
	if !errors.Is(err, syscall.EINVAL) || err.Error() != "rdma: ibv_modify_qp: invalid argument" {
		t.Errorf("rcError(errno value) = %q", err)
	}
	err = rcError("ibv_close_device", -1, syscall.EIO)
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("rcError(-1, errno) = %q, want it to wrap EIO", err)
	}
	if err := verbError("ibv_alloc_pd", syscall.Errno(0)); err == nil || errors.Is(err, syscall.Errno(0)) {
		t.Errorf("verbError with errno 0 = %v", err)
	}
	pe := &PostError{Op: "ibv_post_send", Index: 3, Posted: 3, Err: syscall.ENOMEM}
	if !errors.Is(pe, syscall.ENOMEM) {
		t.Error("PostError does not unwrap to its errno")
	}
	if got, want := pe.Error(), "rdma: ibv_post_send: work request 3: cannot allocate memory (3 posted)"; got != want {
		t.Errorf("PostError = %q, want %q", got, want)
	}
	if err := busyError("PD", 2, "its MRs and QPs"); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("busyError does not wrap EBUSY: %v", err)
	}
}

func TestGuard(t *testing.T) {
	g := newGuard()
	//lint:ignore SA4000 each enter has an effect: this enters twice
	if !g.enter() || !g.enter() { // nesting is allowed
		t.Fatal("enter failed on an open guard")
	}
	shutDone := make(chan struct{})
	go func() {
		g.shut()
		close(shutDone)
	}()
	g.exit()
	select {
	case <-shutDone:
		t.Fatal("shut returned while an operation was in flight")
	default:
	}
	g.exit()
	<-shutDone // returns once the last operation exits
	if g.enter() {
		t.Fatal("enter succeeded after shut")
	}
	if !g.isShut() {
		t.Fatal("isShut false after shut")
	}
}

func TestGuardShutIdle(t *testing.T) {
	g := newGuard()
	g.enter()
	g.exit()
	g.shut() // nothing in flight: must not block
	if g.enter() {
		t.Fatal("enter succeeded after shut")
	}
}

// TestGuardRace hammers enter/exit against shut; run with -race. The
// invariant: once shut returns, no operation is in flight and none starts.
func TestGuardRace(t *testing.T) {
	for range 100 {
		g := newGuard()
		var inFlight sync.WaitGroup
		var mu sync.Mutex
		shut := false
		bad := 0
		for range 4 {
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				for range 200 {
					if !g.enter() {
						return
					}
					mu.Lock()
					if shut {
						bad++
					}
					mu.Unlock()
					g.exit()
				}
			}()
		}
		g.shut()
		mu.Lock()
		shut = true
		mu.Unlock()
		inFlight.Wait()
		if bad != 0 {
			t.Fatalf("%d operations ran after shut returned", bad)
		}
	}
}
