package store

import (
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
)

// failure holds the first fatal error Pebble reported. Pebble calls its
// logger's Fatalf where it cannot go on (a WAL write or sync that failed,
// a MANIFEST it could not write) and expects the process to exit; when
// Fatalf returns instead, Pebble carries on as if the operation had worked
// (DB.Apply returns nil after "fatal commit error"). So the store records
// the error, checks it after every commit, and refuses writes from then on.
type failure struct {
	mu  sync.Mutex
	err error
}

// set records err unless an error is already recorded; it reports whether
// err was the first.
func (f *failure) set(err error) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false
	}
	f.err = &failedError{err}
	return true
}

// Err returns the recorded error (wrapping ErrFailed), or nil.
func (f *failure) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

type failedError struct{ cause error }

func (e *failedError) Error() string {
	return fmt.Sprintf("storage failed, writes are refused until the store is reopened: %v", e.cause)
}
func (e *failedError) Is(target error) bool { return target == ErrFailed }
func (e *failedError) Unwrap() error        { return e.cause }

// pebbleLogger sends Pebble's messages to zap: its chatty informational
// lines at debug level, its errors rate-limited (a flush that fails on a
// full disk is retried, and reported, again and again), and its fatal
// errors to the store's failure instead of os.Exit.
type pebbleLogger struct {
	l       *zap.SugaredLogger
	failure *failure

	// errors limits each of Pebble's error formats on its own, so that a
	// flush failing again and again hides no other error. The formats are
	// literals in Pebble's code: a small, fixed set.
	mu     *sync.Mutex
	errors map[string]*limiter
}

func newPebbleLogger(l *zap.Logger, f *failure) pebbleLogger {
	return pebbleLogger{l: l.Sugar(), failure: f, mu: &sync.Mutex{}, errors: map[string]*limiter{}}
}

// errorLogInterval is the least time between two of Pebble's error lines.
const errorLogInterval = 10 * time.Second

func (p pebbleLogger) Infof(format string, args ...any) { p.l.Debugf(format, args...) }

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.mu.Lock()
	lim := p.errors[format]
	if lim == nil {
		lim = newLimiter(errorLogInterval)
		p.errors[format] = lim
	}
	p.mu.Unlock()
	if ok, suppressed := lim.allow(); ok {
		p.l.With("suppressed", suppressed).Errorf(format, args...)
	}
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	err := &pebbleError{msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if e, ok := a.(error); ok {
			err.causes = append(err.causes, e) // ENOSPC stays visible to errors.Is
		}
	}
	if p.failure.set(err) {
		p.l.Errorw("fatal storage error: refusing writes from now on; reads go on", "error", err)
	}
}

// pebbleError is a message of Pebble's, with the errors it formatted.
type pebbleError struct {
	msg    string
	causes []error
}

func (e *pebbleError) Error() string   { return e.msg }
func (e *pebbleError) Unwrap() []error { return e.causes }

// limiter lets one event through per interval and counts the others.
type limiter struct {
	interval time.Duration
	mu       sync.Mutex
	last     time.Time
	dropped  int
}

func newLimiter(interval time.Duration) *limiter { return &limiter{interval: interval} }

// allow reports whether an event may be logged now, and how many were
// suppressed since the last one that was.
func (l *limiter) allow() (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.interval {
		l.dropped++
		return false, 0
	}
	l.last, suppressed, l.dropped = now, l.dropped, 0
	return true, suppressed
}
