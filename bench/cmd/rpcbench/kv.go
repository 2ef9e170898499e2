package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/rdmarpc/rdmarpc/bench"
	"github.com/rdmarpc/rdmarpc/examples/echo/echopb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/rpc"
)

// kvKeys is how many keys of each size --kv writes and then reads in turn.
const kvKeys = 256

// kvBatchBytes bounds one preload Batch, well under the server's message
// limit.
const kvBatchBytes = 1 << 20

// kvGet is a bench.Client whose Say is a KV Get: of a key present, whose
// value is as long as the request's payload (--kv writes kvKeys of each
// size first), answered with the value as the payload. The request
// carries the key only, so a Get cell moves the payload one way, where an
// echo moves it both ways.
type kvGet struct {
	cc   *rpc.ClientConn
	kv   kvpb.KVClient
	keys map[int][][]byte // per value size
	next atomic.Uint64
}

// dialKV connects to the kvstore server at target and writes kvKeys keys
// for each size, under a prefix no one else uses.
func dialKV(ctx context.Context, target string, sizes []int, opts ...rpc.DialOption) (*kvGet, error) {
	cc, err := rpc.Dial(ctx, target, opts...)
	if err != nil {
		return nil, err
	}
	k := &kvGet{cc: cc, kv: kvpb.NewKVClient(cc), keys: map[int][][]byte{}}
	for _, size := range sizes {
		if err := k.preload(ctx, size); err != nil {
			cc.Close()
			return nil, fmt.Errorf("writing %s values to %s: %w", bench.SizeName(size), target, err)
		}
	}
	return k, nil
}

func (k *kvGet) preload(ctx context.Context, size int) error {
	if _, ok := k.keys[size]; ok {
		return nil
	}
	value := make([]byte, size)
	for i := range value {
		value[i] = byte(i)
	}
	var (
		batch []*kvpb.Mutation
		n     int // bytes in batch
		keys  [][]byte
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := k.kv.Batch(ctx, &kvpb.BatchRequest{Mutations: batch})
		batch, n = batch[:0], 0
		return err
	}
	for i := range kvKeys {
		key := []byte("rpcbench/kv/" + strconv.Itoa(size) + "/" + strconv.Itoa(i))
		keys = append(keys, key)
		batch = append(batch, &kvpb.Mutation{Op: &kvpb.Mutation_Put{Put: &kvpb.KeyValue{Key: key, Value: value}}})
		if n += len(key) + size; n >= kvBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	k.keys[size] = keys
	return nil
}

// Say Gets the next key whose value has len(req.Payload) bytes.
func (k *kvGet) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayResponse, error) {
	keys := k.keys[len(req.GetPayload())]
	if len(keys) == 0 {
		return nil, fmt.Errorf("kv: no keys written with %d-byte values", len(req.GetPayload()))
	}
	key := keys[k.next.Add(1)%uint64(len(keys))]
	resp, err := k.kv.Get(ctx, &kvpb.GetRequest{Key: key})
	if err != nil {
		return nil, err
	}
	if !resp.GetFound() {
		return nil, fmt.Errorf("kv: key %q, written before the run, is not found", key)
	}
	return &echopb.SayResponse{Payload: resp.GetValue()}, nil
}

func (k *kvGet) OpenStream(context.Context) (bench.EchoStream, error) {
	return nil, fmt.Errorf("kv: Gets are unary")
}

func (k *kvGet) Close() error { return k.cc.Close() }
