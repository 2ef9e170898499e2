package codes

import "strconv"

// Code is a call's outcome. Its values are gRPC's.
type Code uint32

const (
	OK                 Code = 0  // Not an error.
	Canceled           Code = 1  // The caller canceled the call.
	Unknown            Code = 2  // An error with no better code.
	InvalidArgument    Code = 3  // The request is malformed, whatever the state.
	DeadlineExceeded   Code = 4  // The deadline passed before the call finished.
	NotFound           Code = 5  // A requested entity does not exist.
	AlreadyExists      Code = 6  // The entity a call tried to create exists.
	PermissionDenied   Code = 7  // The caller may not do this.
	ResourceExhausted  Code = 8  // A quota or size limit was hit.
	FailedPrecondition Code = 9  // The system is not in the state the call needs.
	Aborted            Code = 10 // A concurrency conflict, such as a failed compare-and-swap.
	OutOfRange         Code = 11 // The request went past a valid range.
	Unimplemented      Code = 12 // The method or service does not exist here.
	Internal           Code = 13 // An invariant broke inside the server.
	Unavailable        Code = 14 // The service cannot be reached now; retrying may help.
	DataLoss           Code = 15 // Unrecoverable data loss or corruption.
	Unauthenticated    Code = 16 // The caller has no valid credentials.
)

var names = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
	"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
	"Unauthenticated",
}

// String returns the code's name as gRPC spells it, or "Code(n)".
func (c Code) String() string {
	if int(c) < len(names) {
		return names[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// Parse returns the code with the given name ("NotFound") or number ("5").
func Parse(s string) (Code, bool) {
	for i, n := range names {
		if n == s {
			return Code(i), true
		}
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return Code(n), true
	}
	return 0, false
}
