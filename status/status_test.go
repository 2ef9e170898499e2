package status

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rdmarpc/rdmarpc/codes"
)

func TestCode(t *testing.T) {
	cases := []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{Error(codes.NotFound, "x"), codes.NotFound},
		{fmt.Errorf("wrapped: %w", Error(codes.Aborted, "x")), codes.Aborted},
		{context.Canceled, codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{errors.New("plain"), codes.Unknown},
	}
	for _, tc := range cases {
		if got := Code(tc.err); got != tc.want {
			t.Errorf("Code(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestFromError(t *testing.T) {
	if s, ok := FromError(nil); !ok || s.Code() != codes.OK {
		t.Fatal("nil is OK")
	}
	err := Errorf(codes.InvalidArgument, "bad %s", "key")
	s, ok := FromError(err)
	if !ok || s.Code() != codes.InvalidArgument || s.Message() != "bad key" {
		t.Fatalf("%v %v", s, ok)
	}
	wrapped := fmt.Errorf("saving: %w", err)
	s, ok = FromError(wrapped)
	if !ok || s.Code() != codes.InvalidArgument || s.Message() != wrapped.Error() {
		t.Fatalf("wrapped: %v %v", s, ok)
	}
	s, ok = FromError(errors.New("boom"))
	if ok || s.Code() != codes.Unknown || s.Message() != "boom" {
		t.Fatalf("plain: %v %v", s, ok)
	}
	if Error(codes.OK, "fine") != nil {
		t.Fatal("Error(OK) must be nil")
	}
	if !errors.Is(Error(codes.NotFound, "a"), Error(codes.NotFound, "a")) || errors.Is(Error(codes.NotFound, "a"), Error(codes.NotFound, "b")) {
		t.Fatal("errors.Is compares code and message")
	}
}

func TestDetails(t *testing.T) {
	s, err := New(codes.FailedPrecondition, "no").WithDetails(wrapperspb.String("why"), wrapperspb.Int64(7))
	if err != nil {
		t.Fatal(err)
	}
	d := s.Details()
	if len(d) != 2 || d[0].(*wrapperspb.StringValue).Value != "why" || d[1].(*wrapperspb.Int64Value).Value != 7 {
		t.Fatalf("details %v", d)
	}
	if _, err := New(codes.OK, "").WithDetails(wrapperspb.String("x")); err == nil {
		t.Fatal("details on OK must be refused")
	}
	again := FromParts(s.Code(), s.Message(), s.RawDetails())
	if len(again.Details()) != 2 {
		t.Fatal("details lost in a round trip through parts")
	}
}

func TestErrorWithCause(t *testing.T) {
	cause := errors.New("no device")
	err := ErrorWithCause(codes.Unavailable, "connecting: no device", cause)
	if !errors.Is(err, cause) || Code(err) != codes.Unavailable || Convert(err).Message() != "connecting: no device" {
		t.Fatalf("%v", err)
	}
}
