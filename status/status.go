package status

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/rdmarpc/rdmarpc/codes"
)

// Status is a call's outcome. The zero value and a nil *Status mean OK.
type Status struct {
	code    codes.Code
	message string
	details []*anypb.Any
}

// New returns a Status with code c and message msg.
func New(c codes.Code, msg string) *Status { return &Status{code: c, message: msg} }

// Newf is New with a formatted message.
func Newf(c codes.Code, format string, a ...any) *Status {
	return New(c, fmt.Sprintf(format, a...))
}

// FromParts rebuilds a Status from its wire form. Details that are not
// valid Any messages are skipped.
func FromParts(c codes.Code, msg string, details []*anypb.Any) *Status {
	return &Status{code: c, message: msg, details: details}
}

// Error returns an error with code c and message msg, or nil if c is OK.
func Error(c codes.Code, msg string) error { return New(c, msg).Err() }

// Errorf is Error with a formatted message.
func Errorf(c codes.Code, format string, a ...any) error {
	return Error(c, fmt.Sprintf(format, a...))
}

// Code returns the status code. A nil Status is OK.
func (s *Status) Code() codes.Code {
	if s == nil {
		return codes.OK
	}
	return s.code
}

// Message returns the status message.
func (s *Status) Message() string {
	if s == nil {
		return ""
	}
	return s.message
}

// Err returns the status as an error, or nil when it is OK.
func (s *Status) Err() error {
	if s.Code() == codes.OK {
		return nil
	}
	return &statusError{s: s}
}

// String describes the status for logs.
func (s *Status) String() string {
	return fmt.Sprintf("rpc error: code = %s desc = %s", s.Code(), s.Message())
}

// WithDetails returns a copy of s with the given messages attached as
// details. Details cannot be attached to OK.
func (s *Status) WithDetails(details ...proto.Message) (*Status, error) {
	if s.Code() == codes.OK {
		return nil, errors.New("status: no details can be attached to OK")
	}
	c := &Status{code: s.code, message: s.message, details: append([]*anypb.Any(nil), s.details...)}
	for _, d := range details {
		a, err := anypb.New(d)
		if err != nil {
			return nil, fmt.Errorf("status: detail %T: %w", d, err)
		}
		c.details = append(c.details, a)
	}
	return c, nil
}

// Details returns the attached details, each unpacked to its message type
// when that type is linked into the program, or else an error describing why
// it could not be.
func (s *Status) Details() []any {
	if s == nil || len(s.details) == 0 {
		return nil
	}
	out := make([]any, 0, len(s.details))
	for _, a := range s.details {
		m, err := a.UnmarshalNew()
		if err != nil {
			out = append(out, err)
			continue
		}
		out = append(out, m)
	}
	return out
}

// RawDetails returns the details in their wire form.
func (s *Status) RawDetails() []*anypb.Any {
	if s == nil {
		return nil
	}
	return s.details
}

type statusError struct {
	s     *Status
	cause error // what the status reports, when it came from another error
}

func (e *statusError) Error() string { return e.s.String() }

// Unwrap returns the error the status was made from, if any.
func (e *statusError) Unwrap() error { return e.cause }

// ErrorWithCause is Error whose result also wraps cause, so errors.Is and
// errors.As still find it (for instance transport.ErrNoDevice behind an
// Unavailable). Its message is msg alone.
func ErrorWithCause(c codes.Code, msg string, cause error) error {
	if c == codes.OK {
		return nil
	}
	return &statusError{s: New(c, msg), cause: cause}
}

// Is matches another status error with the same code and message.
func (e *statusError) Is(target error) bool {
	t, ok := target.(*statusError)
	return ok && t.s.code == e.s.code && t.s.message == e.s.message
}

// FromError returns the Status carried by err (anywhere in its chain) and
// true, or a Status with code Unknown and err's text and false. A nil err
// is OK and true. A status error of gRPC-go's (or of any package whose
// errors have its GRPCStatus method) counts as a status error.
func FromError(err error) (*Status, bool) {
	if err == nil {
		return nil, true
	}
	if _, ours := err.(*statusError); !ours {
		// An error that says its status gRPC-go's way (which may wrap
		// one of ours, as contrib/grpcgo's do) is taken at its word.
		if s, ok := grpcStatus(err, false); ok {
			return s, true
		}
	}
	var se *statusError
	if errors.As(err, &se) {
		if err == error(se) {
			return se.s, true
		}
		// Wrapped: keep the code and details; the message says what wrapped it.
		c := *se.s
		c.message = err.Error()
		return &c, true
	}
	if s, ok := grpcStatus(err, true); ok {
		return s, true
	}
	return New(codes.Unknown, err.Error()), false
}

// Convert is FromError without the flag, after mapping context errors.
func Convert(err error) *Status {
	if s := FromContextError(err); s != nil {
		if _, ok := FromError(err); !ok {
			return s
		}
	}
	s, _ := FromError(err)
	return s
}

// Code returns the code of err: OK for nil, the status code for status
// errors, Canceled or DeadlineExceeded for context errors, else Unknown.
func Code(err error) codes.Code {
	return Convert(err).Code()
}

// FromContextError maps context.Canceled and context.DeadlineExceeded (also
// wrapped) to Canceled and DeadlineExceeded. It returns nil for other errors.
func FromContextError(err error) *Status {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return New(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return New(codes.Canceled, err.Error())
	}
	return nil
}
