package signal

import "sync"

// Signal records the first error it is set with. Its zero value is ready to
// use; it must not be copied after first use.
type Signal struct {
	once sync.Once
	mu   sync.Mutex
	done chan struct{}
	err  error
}

func (s *Signal) init() {
	s.once.Do(func() { s.done = make(chan struct{}) })
}

// Set sets the signal with err and reports whether this call set it; a nil
// err is recorded as ErrSet. Later calls change nothing.
func (s *Signal) Set(err error) bool {
	s.init()
	if err == nil {
		err = ErrSet
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return false
	}
	s.err = err
	close(s.done)
	return true
}

// Done is closed once the signal is set.
func (s *Signal) Done() <-chan struct{} {
	s.init()
	return s.done
}

// Err is the error the signal was set with, or nil while it is not set.
func (s *Signal) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// IsSet reports whether the signal has been set.
func (s *Signal) IsSet() bool { return s.Err() != nil }

// Wait blocks until the signal is set and returns its error.
func (s *Signal) Wait() error {
	<-s.Done()
	return s.Err()
}

// ErrSet is what a signal set with a nil error reports.
var ErrSet = errSet{}

type errSet struct{}

func (errSet) Error() string { return "signal set" }
