package status

import (
	"errors"
	"reflect"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/rdmarpc/rdmarpc/codes"
)

// FromProto returns the Status that p, google.rpc.Status, describes, as
// gRPC-go's: its code, message and details. A nil p is OK.
func FromProto(p *spb.Status) *Status {
	if p == nil {
		return nil
	}
	return FromParts(codes.Code(p.GetCode()), p.GetMessage(), p.GetDetails())
}

// Proto returns s as a google.rpc.Status, as gRPC-go's; nil for OK.
func (s *Status) Proto() *spb.Status {
	if s == nil {
		return nil
	}
	return &spb.Status{Code: int32(s.code), Message: s.message, Details: s.details}
}

// ErrorProto returns the error p describes (nil for OK), as gRPC-go's.
func ErrorProto(p *spb.Status) error { return FromProto(p).Err() }

// grpcStatus finds, in err's chain, an error of another gRPC
// implementation (gRPC-go's among them) that says its status the way
// gRPC-go's do, by a method GRPCStatus whose result has a Proto method
// returning google.rpc.Status, and returns that status. Found by
// reflection, so that this package need not import gRPC-go. With chain
// false, only err itself is looked at.
func grpcStatus(err error, chain bool) (*Status, bool) {
	for err != nil {
		if m := reflect.ValueOf(err).MethodByName("GRPCStatus"); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 {
			if p, ok := m.Call(nil)[0].Interface().(interface{ Proto() *spb.Status }); ok {
				if rv := reflect.ValueOf(p); !(rv.Kind() == reflect.Pointer && rv.IsNil()) {
					if s := FromProto(p.Proto()); s != nil {
						return s, true
					}
				}
			}
		}
		if !chain {
			break
		}
		err = errors.Unwrap(err)
	}
	return nil, false
}
