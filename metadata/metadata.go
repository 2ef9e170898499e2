package metadata

import (
	"context"
	"fmt"
	"strings"

	"github.com/rdmarpc/rdmarpc/internal/ctxkey"
)

// MD maps lower-case keys to values.
type MD map[string][]string

// New builds MD from a map, lower-casing the keys.
func New(m map[string]string) MD {
	md := make(MD, len(m))
	for k, v := range m {
		md.Append(k, v)
	}
	return md
}

// Pairs builds MD from key, value, key, value ... It panics on an odd count,
// as gRPC-go's does: that is a programming error.
func Pairs(kv ...string) MD {
	if len(kv)%2 == 1 {
		panic(fmt.Sprintf("metadata: Pairs got an odd number of arguments: %d", len(kv)))
	}
	md := make(MD, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		md.Append(kv[i], kv[i+1])
	}
	return md
}

// Len returns the number of keys.
func (md MD) Len() int { return len(md) }

// Copy returns a deep copy.
func (md MD) Copy() MD {
	out := make(MD, len(md))
	for k, v := range md {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Get returns the values for key (case-insensitive).
func (md MD) Get(key string) []string { return md[strings.ToLower(key)] }

// Set replaces the values for key.
func (md MD) Set(key string, vals ...string) {
	if len(vals) == 0 {
		return
	}
	md[strings.ToLower(key)] = vals
}

// Append adds values to key.
func (md MD) Append(key string, vals ...string) {
	if len(vals) == 0 {
		return
	}
	k := strings.ToLower(key)
	md[k] = append(md[k], vals...)
}

// Delete removes key.
func (md MD) Delete(key string) { delete(md, strings.ToLower(key)) }

// Join merges several MDs into a new one.
func Join(mds ...MD) MD {
	out := MD{}
	for _, md := range mds {
		for k, v := range md {
			out[k] = append(out[k], v...)
		}
	}
	return out
}

type outgoingKey struct{}
type incomingKey = ctxkey.IncomingMD // the rpc server answers it too

// outgoing holds the MD set with NewOutgoingContext plus pairs appended
// later, kept apart so appending never copies the whole map.
type outgoing struct {
	md    MD
	added [][]string
}

// NewOutgoingContext attaches md as the request headers of calls made with
// the returned context, replacing any set before.
func NewOutgoingContext(ctx context.Context, md MD) context.Context {
	return context.WithValue(ctx, outgoingKey{}, outgoing{md: md})
}

// AppendToOutgoingContext adds key, value pairs to the request headers.
func AppendToOutgoingContext(ctx context.Context, kv ...string) context.Context {
	if len(kv)%2 == 1 {
		panic(fmt.Sprintf("metadata: AppendToOutgoingContext got an odd number of arguments: %d", len(kv)))
	}
	o, _ := ctx.Value(outgoingKey{}).(outgoing)
	added := make([][]string, len(o.added), len(o.added)+1)
	copy(added, o.added)
	added = append(added, kv)
	return context.WithValue(ctx, outgoingKey{}, outgoing{md: o.md, added: added})
}

// FromOutgoingContext returns the request headers a call made with ctx
// would send (a copy the caller may change).
func FromOutgoingContext(ctx context.Context) (MD, bool) {
	o, ok := ctx.Value(outgoingKey{}).(outgoing)
	if !ok {
		return nil, false
	}
	md := o.md.Copy()
	for _, kv := range o.added {
		for i := 0; i < len(kv); i += 2 {
			md.Append(kv[i], kv[i+1])
		}
	}
	return md, true
}

// NewIncomingContext attaches md as the request headers a server received.
// The rpc server does this; tests of handlers can too.
func NewIncomingContext(ctx context.Context, md MD) context.Context {
	return context.WithValue(ctx, incomingKey{}, md)
}

// FromIncomingContext returns the request headers the server received.
func FromIncomingContext(ctx context.Context) (MD, bool) {
	md, ok := ctx.Value(incomingKey{}).(MD)
	return md, ok
}

// ValueFromIncomingContext returns the values of key in the request headers.
func ValueFromIncomingContext(ctx context.Context, key string) []string {
	md, _ := FromIncomingContext(ctx)
	return md.Get(key)
}
