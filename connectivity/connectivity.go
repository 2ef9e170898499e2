package connectivity

// State is the state of a client connection or of one of its backends.
type State int

const (
	// Idle: nothing is connected and nothing is trying to; the first call
	// (or Connect) starts connecting.
	Idle State = iota
	// Connecting: a connection is being made (or, before the first
	// resolver answer, the addresses are being looked up).
	Connecting
	// Ready: calls can go out.
	Ready
	// TransientFailure: the last attempt failed; the next waits for a
	// backoff delay. Calls fail at once unless they wait for ready.
	TransientFailure
	// Shutdown: closed for good.
	Shutdown
)

func (s State) String() string {
	switch s {
	case Idle:
		return "IDLE"
	case Connecting:
		return "CONNECTING"
	case Ready:
		return "READY"
	case TransientFailure:
		return "TRANSIENT_FAILURE"
	case Shutdown:
		return "SHUTDOWN"
	}
	return "INVALID_STATE"
}
