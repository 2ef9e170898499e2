package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/internal/bufpool"
	"github.com/rdmarpc/rdmarpc/rpc/internal/conn"
	"github.com/rdmarpc/rdmarpc/status"
	"github.com/rdmarpc/rdmarpc/transport"
)

// sendFrame sends head followed by v's encoding as one message, encoding v
// in place in transport memory when the codec can. limit caps the payload
// size (ResourceExhausted beyond). With a budget, the whole frame's bytes
// are acquired from it before v is encoded and given back once the
// transport has taken the frame (or refused it). With a connection window
// (a stream's MESSAGE), the frame's cost is taken from it first, and given
// back when the frame is not sent. With an estimate (a unary response),
// the frame's size is told to it as soon as it is known, before the
// budget is waited for. It returns the payload's size. A message with
// large parts goes in parts instead, those from v's own memory, where
// the codec and the connection can (sendVec).
func sendFrame(ctx context.Context, tc transport.Conn, codec Codec, head []byte, v any, limit int, budget *conn.ByteBudget, flow *conn.ConnFlow, est *conn.RespEstimate) (int, error) {
	if sc, ok := codec.(SizedCodec); ok && v != nil {
		n := sc.Size(v)
		est.Observe(len(head) + n)
		if err := checkSize(n, limit, len(head), tc); err != nil {
			return n, err
		}
		if !flow.Take(ctx, len(head)+n) {
			return n, ctx.Err()
		}
		if budget != nil {
			if err := budget.Acquire(ctx, len(head)+n); err != nil {
				flow.GiveBack(len(head) + n)
				return n, err
			}
			defer budget.Release(len(head) + n)
		}
		if n >= vecMin {
			if sent, err := sendVec(ctx, tc, sc, head, v, n); sent {
				if err != nil {
					flow.GiveBack(len(head) + n)
				}
				return n, err
			}
		}
		buf, err := tc.NewSendBuffer(ctx, len(head)+n)
		if err != nil {
			flow.GiveBack(len(head) + n)
			return n, err
		}
		b := buf.Bytes()
		copy(b, head)
		if err := sc.MarshalTo(b[len(head):], v); err != nil {
			buf.Release()
			flow.GiveBack(len(head) + n)
			return n, status.Errorf(codes.Internal, "encoding %T: %v", v, err)
		}
		if err := tc.SendBuffer(ctx, buf); err != nil {
			flow.GiveBack(len(head) + n)
			return n, err
		}
		return n, nil
	}
	var payload []byte
	if v != nil {
		var err error
		if payload, err = codec.Marshal(v); err != nil {
			return 0, status.Errorf(codes.Internal, "encoding %T: %v", v, err)
		}
	}
	n := len(payload)
	est.Observe(len(head) + n)
	if err := checkSize(n, limit, len(head), tc); err != nil {
		return n, err
	}
	if !flow.Take(ctx, len(head)+n) {
		return n, ctx.Err()
	}
	if budget != nil {
		if err := budget.Acquire(ctx, len(head)+n); err != nil {
			flow.GiveBack(len(head) + n)
			return n, err
		}
		defer budget.Release(len(head) + n)
	}
	b := bufpool.Get(len(head) + n)
	copy(b, head)
	copy(b[len(head):], payload)
	err := tc.Send(ctx, b)
	bufpool.Put(b)
	if err != nil {
		flow.GiveBack(len(head) + n)
	}
	return n, err
}

// vecPool holds the vectors sendVec hands to SendVec: room for ProtoCodec's
// parts (two per field left in place).
var vecPool = sync.Pool{New: func() any { return new([2 * maxVec][]byte) }}

// sendVec sends head and v's encoding, n bytes, as one message in parts,
// v's large parts from v's own memory, when the codec and the connection
// can (VectorCodec, transport.VectorSender) and v has such parts; else it
// reports false and has sent nothing. The head and the encoding's small
// parts go in one pooled buffer, which SendVec is done with when it
// returns (it copies what it cannot write at once).
func sendVec(ctx context.Context, tc transport.Conn, sc SizedCodec, head []byte, v any, n int) (sent bool, err error) {
	vc, ok := sc.(VectorCodec)
	if !ok {
		return false, nil
	}
	vs, ok := tc.(transport.VectorSender)
	if !ok {
		return false, nil
	}
	small := vc.VecSize(v)
	if small <= 0 || small >= n {
		return false, nil
	}
	b := bufpool.Get(len(head) + small)
	defer bufpool.Put(b)
	copy(b, head)
	arr := vecPool.Get().(*[2 * maxVec][]byte)
	defer func() {
		clear(arr[:])
		vecPool.Put(arr)
	}()
	vec, err := vc.MarshalVec(b[len(head):], arr[:0], v)
	if err == nil {
		// The encoding starts in b, right after head: one part for both.
		if len(vec) == 0 || cap(vec[0]) == 0 || &vec[0][:1][0] != &b[len(head)] {
			err = errors.New("the codec's vector does not start in its buffer")
		} else {
			vec[0] = b[:len(head)+len(vec[0])]
		}
	}
	total := 0
	for _, p := range vec {
		total += len(p)
	}
	if err == nil && total != len(head)+n {
		err = fmt.Errorf("%d bytes encoded, sized %d", total-len(head), n)
	}
	if err != nil {
		return true, status.Errorf(codes.Internal, "encoding %T: %v", v, err)
	}
	return true, vs.SendVec(ctx, vec)
}

func checkSize(n, limit, head int, tc transport.Conn) error {
	if n > limit {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the limit (%d)", n, limit)
	}
	if max := tc.MaxMessageSize() - head; n > max {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the peer accepts (%d)", n, max)
	}
	return nil
}
