package conn

import "testing"

// TestUnread: a run answered before anything arrives keeps the reading;
// an arrival during a run hands it on once, and a late answer of that run
// changes nothing; without arrivals nothing runs unread.
func TestUnread(t *testing.T) {
	var u Unread
	if _, ok := u.Start(); ok {
		t.Fatal("a run started before Init")
	}
	u.Init(nil, func() { t.Fatal("handed on without arrivals") })
	if _, ok := u.Start(); ok {
		t.Fatal("a run started on a transport that reports no arrivals")
	}

	a := &arrivals{}
	handed := 0
	u = Unread{}
	u.Init(a, func() { handed++ })
	n, ok := u.Start()
	if !ok || a.f == nil {
		t.Fatal("no run, or no arrival callback set")
	}
	u.Answered(n)
	if !u.Reading(n) || handed != 0 {
		t.Fatalf("answered run %d: reading %v, handed %d", n, u.Reading(n), handed)
	}

	m, ok := u.Start()
	if !ok || m == n {
		t.Fatalf("second run %d (ok %v), after run %d", m, ok, n)
	}
	a.f() // a frame arrives while the call runs
	a.f() // and another: the reading was handed on already
	u.Answered(m)
	if u.Reading(m) || handed != 1 {
		t.Fatalf("run %d with an arrival: reading %v, handed %d; want handed once", m, u.Reading(m), handed)
	}
	u.Answered(n) // an older run's reader cannot end the state
	if k, _ := u.Start(); k != m+1 {
		t.Fatalf("next run %d, want %d", k, m+1)
	}
}
