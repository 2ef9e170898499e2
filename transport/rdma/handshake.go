package rdma

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"time"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

// ErrRefused is wrapped when the peer refused the handshake; the error
// carries the peer's reason.
var ErrRefused = errors.New("rdma: peer refused the connection")

// bounded applies the handshake timeout (and ctx) to boot's I/O and returns
// a function that lifts it.
func (t *Transport) bounded(ctx context.Context, boot net.Conn) (func() error, context.Context) {
	ctx, cancel := context.WithTimeout(ctx, t.o.HandshakeTimeout)
	dl, _ := ctx.Deadline()
	_ = boot.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = boot.SetDeadline(time.Now()) })
	return func() error {
		stopped := stop()
		cancel()
		if !stopped {
			return fmt.Errorf("%w: handshake not finished within %v", transport.ErrProtocol, t.o.HandshakeTimeout)
		}
		return boot.SetDeadline(time.Time{})
	}, ctx
}

// ioErr says what a failed read or write of the handshake means.
func (t *Transport) ioErr(what string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: %s: no answer within %v", transport.ErrProtocol, what, t.o.HandshakeTimeout)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: peer closed the connection", transport.ErrProtocol, what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// readReply reads what a peer sends where a hello (or, with n == 1, the
// ready byte) is expected: that, or a refusal with its reason.
func (t *Transport) readReply(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return nil, t.ioErr("reading the peer's answer", err)
	}
	if b[0] == refuseMagic[0] {
		head := make([]byte, 6)
		head[0] = b[0]
		if _, err := io.ReadFull(r, head[1:]); err != nil {
			return nil, t.ioErr("reading the peer's refusal", err)
		}
		if string(head[:4]) == refuseMagic {
			reason := make([]byte, min(binary.BigEndian.Uint16(head[4:]), maxReasonLen))
			if _, err := io.ReadFull(r, reason); err != nil {
				return nil, t.ioErr("reading the peer's refusal", err)
			}
			return nil, fmt.Errorf("%w: %s", ErrRefused, reason)
		}
		if n == 1 {
			return nil, protoErr("garbage instead of the ready byte")
		}
		copy(b, head)
		if _, err := io.ReadFull(r, b[len(head):]); err != nil {
			return nil, t.ioErr("reading the peer's hello", err)
		}
		return b, nil
	}
	if _, err := io.ReadFull(r, b[1:]); err != nil {
		return nil, t.ioErr("reading the peer's hello", err)
	}
	return b, nil
}

// prepare creates the connection's queue pair (receives posted, in INIT)
// on ep's device and port.
//
// With shared, its receives come from the device's shared receive queue.
func (t *Transport) prepare(ep rdmadev.Endpoint, boot net.Conn, shared bool) (*conn, hello, verbs.PortAttr, error) {
	dev, err := t.acquire(ep.Device)
	if err != nil {
		t.forgetEndpoint(ep)
		return nil, hello{}, verbs.PortAttr{}, err
	}
	pa, err := dev.ctx.QueryPort(ep.Port)
	if err == nil && pa.State != verbs.PortActive {
		err = fmt.Errorf("%w: port %d of %s is %v", transport.ErrNoDevice, ep.Port, ep.Device, pa.State)
	}
	if err != nil {
		t.forgetEndpoint(ep)
		t.release(dev)
		return nil, hello{}, pa, err
	}
	c, err := t.newConn(dev, ep.Port, boot, shared)
	if err != nil {
		t.release(dev)
		return nil, hello{}, pa, err
	}
	local := hello{
		features:   featLend | featAnswer,
		qpn:        c.qp.Num(),
		psn:        rand.Uint32() & 0xFFFFFF,
		gid:        ep.GID,
		lid:        pa.LID,
		mtu:        uint16(min(pa.ActiveMTU, 4096)),
		bufSize:    uint32(t.o.BufferSize),
		recvs:      uint32(c.led.Recvs()),
		maxMessage: uint32(t.o.MaxMessageSize),
	}
	if c.pool != nil {
		local.guaranteed = uint32(t.o.SharedCredits)
	}
	if t.o.RendezvousThreshold > 0 {
		local.features |= featRndv
	}
	if t.noAsks {
		local.features &^= featAnswer
	}
	if t.oldHello {
		local.features = 0
	}
	return c, local, pa, nil
}

// abandon frees a connection whose handshake failed.
func (t *Transport) abandon(c *conn) {
	c.destroy()
	t.release(c.dev)
}

func rtrAttr(peer hello, ep rdmadev.Endpoint, pa verbs.PortAttr) verbs.RTRAttr {
	return verbs.RTRAttr{
		DestQPN:     peer.qpn,
		RQPSN:       peer.psn,
		PathMTU:     min(pa.ActiveMTU, int(peer.mtu)),
		DGID:        peer.gid,
		DLID:        peer.lid,
		SGIDIndex:   uint8(ep.GIDIndex),
		Port:        ep.Port,
		MinRNRTimer: 12,
	}
}

// handshakeClient: ask the server for its endpoints and pick one (unless
// legacy: the device of the bootstrap's local address), send our hello,
// take the server's, bring the QP up, say ready.
func (t *Transport) handshakeClient(ctx context.Context, boot net.Conn, legacy bool) (*conn, error) {
	done, _ := t.bounded(ctx, boot)
	var ep rdmadev.Endpoint
	var picked int
	var err error
	routed := !legacy && !t.oldHello
	if routed {
		if _, err := boot.Write(encodeQuery()); err != nil {
			done()
			return nil, t.ioErr("sending the endpoints query", err)
		}
		eps, err := t.readEndpoints(boot)
		if err == nil {
			picked, ep, err = t.pick(eps)
			if err != nil {
				_, _ = boot.Write(encodeRefusal("client: " + err.Error()))
			}
		}
		if err != nil {
			done()
			return nil, err
		}
	} else if ep, err = t.endpointFor(boot.LocalAddr()); err != nil {
		done()
		return nil, err
	}
	c, local, pa, err := t.prepare(ep, boot, t.o.Receive == ReceiveShared)
	if err != nil {
		done()
		return nil, err
	}
	if routed {
		local.features |= featRoute
		local.endpoint = uint8(picked)
	}
	fail := func(err error) (*conn, error) {
		done()
		t.abandon(c)
		return nil, err
	}
	if _, err := boot.Write(local.encode()); err != nil {
		return fail(t.ioErr("sending hello", err))
	}
	b, err := t.readReply(boot, helloLen)
	if err != nil {
		return fail(err)
	}
	peer, err := decodeHello(b)
	if err == nil && c.pool != nil && peer.features&featLend == 0 {
		// Our receive window would stay at SharedCredits for good: an
		// old server takes no lent credits.
		err = protoErr("the server does not support lent credits (an rdmarpc without shared receive queues): set Options.Receive to ReceivePerConnection to reach it")
	}
	if err != nil {
		_, _ = boot.Write(encodeRefusal(err.Error()))
		return fail(err)
	}
	if err := c.connect(peer, local, rtrAttr(peer, ep, pa)); err != nil {
		_, _ = boot.Write(encodeRefusal("client could not bring its queue pair up: " + err.Error()))
		// The local endpoint came from the cache of local addresses: an
		// address removed and added again (a failover's NIC coming back)
		// has a new GID table entry, and the old index fails RTR with
		// ENODATA on every dial. The next dial reads the table again.
		t.forgetEndpoint(ep)
		return fail(fmt.Errorf("%w (local endpoint %s port %d, GID index %d)", err, ep.Device, ep.Port, ep.GIDIndex))
	}
	if _, err := boot.Write([]byte{readyByte}); err != nil {
		return fail(t.ioErr("sending ready", err))
	}
	if err := done(); err != nil {
		t.abandon(c)
		return nil, err
	}
	c.start()
	t.counters.deviceConn(c.dev.name)
	return c, nil
}

// handshakeServer: take the client's hello, bring our QP up to RTS, answer
// with our hello, wait until the client is ready to receive.
//
// Past the hello the handshake takes a place at the transport's gate (which
// bounds the handshakes holding a queue pair, in all and per source
// address), and the client has a third of the handshake timeout (at least
// 2 s) to say ready before the queue pair is dropped: a flood of hellos that never
// complete holds a bounded number of queue pairs, each briefly.
//
// A client's query for the endpoints (docs/rdma.md, "Endpoints") is
// answered from srv before the hello, costing no queue pair; its hello
// then names the endpoint it picked. An older client's hello comes first,
// and gets the device of the bootstrap's local address (else srv's first
// endpoint).
func (t *Transport) handshakeServer(ctx context.Context, boot net.Conn, srv *serving) (*conn, error) {
	done, hctx := t.bounded(ctx, boot)
	refuse := func(err error) (*conn, error) {
		_, _ = boot.Write(encodeRefusal(err.Error()))
		done()
		t.counters.refused.Add(1)
		t.budget.refusedHandshake(err)
		return nil, err
	}
	b := make([]byte, helloLen)
	if n, err := io.ReadFull(boot, b); err != nil {
		done()
		t.counters.refused.Add(1)
		if n > 0 {
			return nil, protoErr("truncated hello: %d of %d bytes, then %v", n, helloLen, t.ioErr("reading hello", err))
		}
		return nil, t.ioErr("reading hello", err)
	}
	routed := string(b[:4]) == queryMagic && !t.oldHello
	// What this handshake offers: the hello's endpoint is an index into it.
	o := srv.current()
	if routed {
		if err := checkQuery(b); err != nil {
			return refuse(err)
		}
		if _, err := boot.Write(o.answer); err != nil {
			done()
			return nil, t.ioErr("sending the endpoints", err)
		}
		// The client may refuse instead (it reaches none of them).
		var err error
		if b, err = t.readReply(boot, helloLen); err != nil {
			done()
			t.counters.refused.Add(1)
			return nil, err
		}
	}
	peer, err := decodeHello(b)
	if err != nil {
		return refuse(err)
	}
	var ep rdmadev.Endpoint
	offered := -1 // the index in srv of the endpoint to use, if one of them
	switch {
	case routed && peer.features&featRoute == 0:
		return refuse(protoErr("a hello after the endpoints query names no endpoint"))
	case routed && int(peer.endpoint) >= len(o.eps):
		return refuse(protoErr("the hello picks endpoint %d of the %d offered", peer.endpoint, len(o.eps)))
	case routed:
		offered = int(peer.endpoint)
	default:
		if ep, err = t.endpointFor(boot.LocalAddr()); err != nil {
			if len(o.eps) == 0 {
				return refuse(err)
			}
			offered = 0
		}
	}
	src := sourceOf(boot.RemoteAddr())
	waited, err := t.gate.enter(hctx, src)
	if waited {
		t.counters.handshakesWaited.Add(1)
	}
	if err != nil {
		return refuse(err)
	}
	defer t.gate.leave(src)
	// Past the gate: an offered endpoint whose address moved is looked
	// up again (sysfs and netlink), and no more peers at once than the
	// gate admits make the server do that.
	if offered >= 0 {
		if ep, err = srv.endpoint(o, offered); err != nil {
			return refuse(err)
		}
	}
	// A client that does not support lent credits gets the per-connection
	// layout.
	c, local, pa, err := t.prepare(ep, boot, t.o.Receive == ReceiveShared && peer.features&featLend != 0)
	if err != nil {
		return refuse(err)
	}
	if err := c.connect(peer, local, rtrAttr(peer, ep, pa)); err != nil {
		t.abandon(c)
		return refuse(fmt.Errorf("server could not bring its queue pair up: %w (endpoint %s port %d, GID index %d)", err, ep.Device, ep.Port, ep.GIDIndex))
	}
	if _, err := boot.Write(local.encode()); err != nil {
		done()
		t.abandon(c)
		return nil, t.ioErr("sending hello", err)
	}
	readyWait := max(t.o.HandshakeTimeout/3, min(t.o.HandshakeTimeout, 2*time.Second))
	readyBy := time.Now().Add(readyWait)
	if dl, ok := hctx.Deadline(); ok && readyBy.Before(dl) {
		_ = boot.SetReadDeadline(readyBy)
	}
	r, err := t.readReply(boot, 1)
	if err == nil && r[0] != readyByte {
		err = protoErr("byte %#x instead of the ready byte", r[0])
	}
	if err != nil && hctx.Err() == nil && !time.Now().Before(readyBy) {
		err = protoErr("the client did not say ready within %v of the server's hello: a server holds a queue pair no longer", readyWait)
	}
	if err != nil {
		done()
		t.abandon(c)
		return nil, err
	}
	if err := done(); err != nil {
		t.abandon(c)
		return nil, err
	}
	c.start()
	t.counters.deviceConn(c.dev.name)
	return c, nil
}

// serverCredentials runs creds' server handshake on boot within the
// handshake timeout (and until ctx, the listener's, ends).
func (t *Transport) serverCredentials(ctx context.Context, boot net.Conn, creds credentials.TransportCredentials) (net.Conn, credentials.AuthInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, t.o.HandshakeTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = boot.SetDeadline(time.Now()) })
	sec, ai, err := creds.ServerHandshake(boot)
	if !stop() {
		if err == nil {
			sec.Close()
		}
		return nil, nil, fmt.Errorf("%w: credentials handshake not finished within %v", transport.ErrProtocol, t.o.HandshakeTimeout)
	}
	if err != nil {
		return nil, nil, err
	}
	return sec, ai, nil
}

// securedConn is a connection whose bootstrap ran transport credentials.
type securedConn struct {
	*conn
	auth credentials.AuthInfo
}

// secured is c with auth as its AuthInfo, or c itself without credentials.
func secured(c *conn, auth credentials.AuthInfo) transport.Conn {
	if auth == nil {
		return c
	}
	return &securedConn{conn: c, auth: auth}
}

// AuthInfo is what the bootstrap's credentials verified; it implements
// transport.Secured.
func (c *securedConn) AuthInfo() credentials.AuthInfo { return c.auth }

// exporterLabel names the secret both ends of a TLS bootstrap derive to
// prove, on the queue pair itself, that they hold the TLS session
// (docs/rdma.md, "Credentials").
const (
	exporterLabel = "EXPORTER-rdmarpc-qp"
	proofLen      = 32
)

// bindQP binds c's queue pair to the TLS session of its bootstrap: each end
// sends the secret exported from the session as the first message on the
// queue pair and refuses the queue pair unless the first message it
// receives is the same secret, before the connection is handed to anyone.
// A host that attached a queue pair without the session cannot produce it.
// Both ends send first: each has the other's initial credits, so neither
// Send waits for the other's Recv. Without TLS there is nothing to bind.
func (t *Transport) bindQP(ctx context.Context, c *conn, auth credentials.AuthInfo) error {
	ti, ok := auth.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	proof, err := ti.State.ExportKeyingMaterial(exporterLabel, nil, proofLen)
	if err != nil {
		return fmt.Errorf("binding the queue pair to TLS: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, t.o.HandshakeTimeout)
	defer cancel()
	if err := c.Send(ctx, proof); err != nil {
		return fmt.Errorf("binding the queue pair to TLS: sending the proof: %w", err)
	}
	b, err := c.Recv(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: binding the queue pair to TLS: no proof from the peer within %v", transport.ErrProtocol, t.o.HandshakeTimeout)
		}
		return fmt.Errorf("binding the queue pair to TLS: %w", err)
	}
	defer b.Release()
	if subtle.ConstantTimeCompare(b.Bytes(), proof) != 1 {
		return fmt.Errorf("%w: the first message on the queue pair is not this TLS session's proof: another host's queue pair?", transport.ErrProtocol)
	}
	return nil
}
