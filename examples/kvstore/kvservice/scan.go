package kvservice

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"

	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/kvpb"
	"github.com/rdmarpc/rdmarpc/examples/kvstore/store"
	"github.com/rdmarpc/rdmarpc/status"
)

// Scan pages.
const (
	// DefaultScanLimit is the page size when a request says 0.
	DefaultScanLimit = 100
	// MaxScanLimit is the largest page; larger limits are lowered to it.
	MaxScanLimit = 1000
	// MaxScanBytes stops a page once its keys and values reach about this
	// size, so that pages stay far below the message size limit (a page
	// always holds at least one pair, at most MaxKeySize+MaxValueSize).
	MaxScanBytes = 2 << 20
)

// A page token is a version byte, the CRC-32 of the scan's selection (so a
// token is not reused with another selection), then the last key returned:
// the next page starts right after it.
const tokenVersion = 1

func (s *Service) Scan(_ context.Context, req *kvpb.ScanRequest) (*kvpb.ScanResponse, error) {
	prefix, start, end := req.GetPrefix(), req.GetStart(), req.GetEnd()
	for name, b := range map[string][]byte{"prefix": prefix, "start": start, "end": end} {
		if len(b) > store.MaxKeySize {
			return nil, status.Errorf(codes.InvalidArgument, "scan %s of %d bytes is longer than the key size limit (%d)", name, len(b), store.MaxKeySize)
		}
	}
	var lower, upper []byte
	switch {
	case len(prefix) > 0 && (len(start) > 0 || len(end) > 0):
		return nil, status.Error(codes.InvalidArgument, "a scan takes a prefix or a start/end range, not both")
	case len(prefix) > 0:
		lower, upper = prefix, prefixEnd(prefix)
	default:
		lower, upper = start, end
		if len(upper) > 0 && bytes.Compare(lower, upper) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "scan start %q is after end %q", lower, upper)
		}
		if len(upper) == 0 {
			upper = nil
		}
	}
	sel := selection(prefix, start, end)
	if tok := req.GetPageToken(); len(tok) > 0 {
		last, err := parseToken(tok, sel)
		if err != nil {
			return nil, err
		}
		// The next page starts at the smallest key after last.
		if next := append(last, 0); bytes.Compare(next, lower) > 0 {
			lower = next
		}
		if upper != nil && bytes.Compare(lower, upper) >= 0 {
			return &kvpb.ScanResponse{}, nil
		}
	}
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = DefaultScanLimit
	case limit > MaxScanLimit:
		limit = MaxScanLimit
	}
	pairs, more, rev, err := s.st.ScanRevision(store.ScanOptions{Lower: lower, Upper: upper, Limit: limit, MaxBytes: MaxScanBytes, KeysOnly: req.GetKeysOnly()})
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &kvpb.ScanResponse{Pairs: make([]*kvpb.KeyValue, len(pairs)), Revision: int64(rev)}
	for i, p := range pairs {
		resp.Pairs[i] = &kvpb.KeyValue{Key: p.Key, Value: p.Value}
	}
	if more {
		resp.NextPageToken = makeToken(sel, pairs[len(pairs)-1].Key)
	}
	return resp, nil
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil when there is none (p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func selection(prefix, start, end []byte) uint32 {
	h := crc32.NewIEEE()
	for _, b := range [][]byte{prefix, start, end} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return h.Sum32()
}

func makeToken(sel uint32, last []byte) []byte {
	tok := make([]byte, 5, 5+len(last))
	tok[0] = tokenVersion
	binary.BigEndian.PutUint32(tok[1:], sel)
	return append(tok, last...)
}

func parseToken(tok []byte, sel uint32) (last []byte, err error) {
	switch {
	case len(tok) < 6 || tok[0] != tokenVersion:
		return nil, status.Error(codes.InvalidArgument, "malformed page token")
	case binary.BigEndian.Uint32(tok[1:]) != sel:
		return nil, status.Error(codes.InvalidArgument, "the page token belongs to a scan with another prefix, start or end")
	case len(tok)-5 > store.MaxKeySize:
		return nil, status.Error(codes.InvalidArgument, "malformed page token")
	}
	return bytes.Clone(tok[5:]), nil
}
