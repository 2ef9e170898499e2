package rpc

import (
	"context"

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
// budget is waited for. It returns the payload's size.
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

func checkSize(n, limit, head int, tc transport.Conn) error {
	if n > limit {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the limit (%d)", n, limit)
	}
	if max := tc.MaxMessageSize() - head; n > max {
		return status.Errorf(codes.ResourceExhausted, "message of %d bytes is larger than the peer accepts (%d)", n, max)
	}
	return nil
}
