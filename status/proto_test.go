package status

import (
	"fmt"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rdmarpc/rdmarpc/codes"
)

func TestProtoRoundTrip(t *testing.T) {
	d, err := anypb.New(durationpb.New(3))
	if err != nil {
		t.Fatal(err)
	}
	p := &spb.Status{Code: int32(codes.Aborted), Message: "m", Details: []*anypb.Any{d}}
	s := FromProto(p)
	if s.Code() != codes.Aborted || s.Message() != "m" || len(s.Details()) != 1 {
		t.Fatalf("FromProto = %v (%d details)", s, len(s.Details()))
	}
	if !proto.Equal(s.Proto(), p) {
		t.Errorf("Proto = %v, want %v", s.Proto(), p)
	}
	if FromProto(nil) != nil || (*Status)(nil).Proto() != nil || ErrorProto(&spb.Status{}) != nil {
		t.Error("OK is not nil both ways")
	}
	if Code(ErrorProto(p)) != codes.Aborted {
		t.Errorf("ErrorProto: %v", ErrorProto(p))
	}
}

// foreignStatus and foreignError have the shape of gRPC-go's status.Status
// and status.Error.
type foreignStatus struct{ p *spb.Status }

func (s *foreignStatus) Proto() *spb.Status { return s.p }

type foreignError struct{ s *foreignStatus }

func (e *foreignError) Error() string              { return "foreign" }
func (e *foreignError) GRPCStatus() *foreignStatus { return e.s }

func TestForeignStatusError(t *testing.T) {
	foreign := &foreignError{&foreignStatus{&spb.Status{Code: int32(codes.NotFound), Message: "no such key"}}}
	for _, err := range []error{foreign, fmt.Errorf("get: %w", foreign)} {
		s, ok := FromError(err)
		if !ok || s.Code() != codes.NotFound || s.Message() != "no such key" {
			t.Errorf("FromError(%v) = %v, %v; want NotFound: no such key", err, s, ok)
		}
	}
	if s, ok := FromError(&foreignError{(*foreignStatus)(nil)}); ok || s.Code() != codes.Unknown {
		t.Errorf("a nil foreign status: %v, %v; want Unknown, false", s, ok)
	}
}
