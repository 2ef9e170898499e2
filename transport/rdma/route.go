package rdma

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
)

// The endpoints exchange (docs/rdma.md, "Endpoints") runs before the hellos
// so that the RDMA path does not depend on the bootstrap's address: the
// client asks which RDMA endpoints the server offers, picks one it reaches
// and a local device for it, and names its pick in its hello.
const (
	queryMagic     = "RRPQ" // the client's query, 64 bytes like a hello
	endpointsMagic = "RRPE" // the server's answer: magic, count, entries
	queryVersion   = 1
	maxEndpoints   = 16 // entries an answer may carry
	endpointLen    = 24

	endpointRoCE = 1 // the GID is an IP address (RoCE v2)
	endpointIB   = 2 // the GID's first 8 bytes are an InfiniBand subnet prefix

	// featRoute: the hello's byte 56 is the index of the server's
	// endpoint, from its answer to the query, the client picked.
	featRoute = 1 << 1
)

// offered is one endpoint of a server's answer.
type offered struct {
	gid  [16]byte
	lid  uint16
	kind uint8
}

// encodeQuery is the client's query: the magic, the version, zeros.
func encodeQuery() []byte {
	b := make([]byte, helloLen)
	copy(b, queryMagic)
	binary.BigEndian.PutUint16(b[4:], queryVersion)
	return b
}

// checkQuery validates a query whose magic was recognised.
func checkQuery(b []byte) error {
	if v := binary.BigEndian.Uint16(b[4:]); v != queryVersion {
		return protoErr("endpoints query version %d, this side speaks %d", v, queryVersion)
	}
	return nil
}

// encodeEndpoints is the server's answer listing eps (1..maxEndpoints).
func encodeEndpoints(eps []offered) []byte {
	b := make([]byte, 6, 6+len(eps)*endpointLen)
	copy(b, endpointsMagic)
	binary.BigEndian.PutUint16(b[4:], uint16(len(eps)))
	for _, ep := range eps {
		var e [endpointLen]byte
		copy(e[:16], ep.gid[:])
		binary.BigEndian.PutUint16(e[16:], ep.lid)
		e[18] = ep.kind
		b = append(b, e[:]...)
	}
	return b
}

// decodeEndpointEntries validates the entries of an answer (its 6-byte
// head already read and its count checked).
func decodeEndpointEntries(b []byte) ([]offered, error) {
	if len(b)%endpointLen != 0 || len(b) == 0 || len(b) > maxEndpoints*endpointLen {
		return nil, protoErr("endpoints answer of %d bytes", len(b))
	}
	eps := make([]offered, 0, len(b)/endpointLen)
	for e := b; len(e) > 0; e = e[endpointLen:] {
		var ep offered
		copy(ep.gid[:], e[:16])
		ep.lid = binary.BigEndian.Uint16(e[16:])
		ep.kind = e[18]
		if ep.kind != endpointRoCE && ep.kind != endpointIB {
			return nil, protoErr("endpoint %d of kind %d (want 1, RoCE, or 2, InfiniBand)", len(eps), ep.kind)
		}
		if ep.gid == [16]byte{} {
			return nil, protoErr("endpoint %d has the zero GID", len(eps))
		}
		eps = append(eps, ep)
	}
	return eps, nil
}

// errLegacyServer: the server refused the query as a hello it does not
// know, as an rdmarpc from before the endpoints exchange does.
var errLegacyServer = errors.New("rdma: the server predates the endpoints exchange")

// notRDMAError says the server answered the query with something that is
// not an rdmarpc RDMA server's answer (a TCP rdmarpc server, say): there is
// no RDMA path, which is transport.ErrNoDevice to the fallbacks.
type notRDMAError struct{ head []byte }

func (e notRDMAError) Error() string {
	return fmt.Sprintf("rdma: the server is not an rdmarpc RDMA server (it answered %q to the endpoints query)", e.head)
}
func (e notRDMAError) Is(target error) bool { return target == transport.ErrNoDevice }

// readEndpoints reads the server's answer to the query: its endpoints, or
// its refusal.
func (t *Transport) readEndpoints(r io.Reader) ([]offered, error) {
	head := make([]byte, 6)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, t.ioErr("reading the server's endpoints", err)
	}
	switch string(head[:4]) {
	case refuseMagic:
		reason := make([]byte, min(binary.BigEndian.Uint16(head[4:]), maxReasonLen))
		if _, err := io.ReadFull(r, reason); err != nil {
			return nil, t.ioErr("reading the server's refusal", err)
		}
		if bytes.Contains(reason, []byte(`"`+queryMagic+`"`)) {
			return nil, fmt.Errorf("%w: %s", errLegacyServer, reason)
		}
		return nil, fmt.Errorf("%w: %s", ErrRefused, reason)
	case endpointsMagic:
	default:
		return nil, notRDMAError{head}
	}
	n := int(binary.BigEndian.Uint16(head[4:]))
	if n == 0 || n > maxEndpoints {
		return nil, protoErr("the server offers %d endpoints (allowed 1..%d)", n, maxEndpoints)
	}
	b := make([]byte, n*endpointLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, t.ioErr("reading the server's endpoints", err)
	}
	return decodeEndpointEntries(b)
}

// selection is the options' device selection for rdmadev.
func (o Options) selection() rdmadev.Selection {
	return rdmadev.Selection{Devices: o.Devices, Netdevs: o.Netdevs, GIDIndex: o.GIDIndex}
}

// selected reports whether the options' device selection admits ep.
func (o Options) selected(ep rdmadev.Endpoint) bool {
	sel := o.selection()
	if len(sel.Devices) > 0 && !containsStr(sel.Devices, ep.Device) && !containsStr(sel.Devices, fmt.Sprintf("%s:%d", ep.Device, ep.Port)) {
		return false
	}
	return len(sel.Netdevs) == 0 || containsStr(sel.Netdevs, ep.Netdev)
}

func containsStr(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// offer is what a server's answer says of ep.
func offer(ep rdmadev.Endpoint, lid uint16) offered {
	o := offered{gid: ep.GID, lid: lid, kind: endpointRoCE}
	if ep.InfiniBand {
		o.kind = endpointIB
	}
	return o
}

// reach finds the local endpoint that reaches a server's endpoint, or says
// why none does.
//
// RoCE v2: the GID is an IP address; the kernel's route to it (a UDP
// socket's connect, which sends nothing) gives the source address, and the
// local endpoint is the RDMA device and RoCE v2 GID of that address, as
// for rdma://ip:port. Same subnet and routed RoCE v2 alike go where the
// host's IP routing sends them. InfiniBand: a local InfiniBand port (of
// the selection) whose GID has the same 64-bit subnet prefix.
func (t *Transport) reach(ep offered) (rdmadev.Endpoint, error) {
	if ep.kind == endpointIB {
		locals, err := t.localEndpoints()
		if err != nil {
			return rdmadev.Endpoint{}, err
		}
		for _, l := range locals {
			if l.InfiniBand && bytes.Equal(l.GID[:8], ep.gid[:8]) {
				return l, nil
			}
		}
		return rdmadev.Endpoint{}, fmt.Errorf("no local InfiniBand port on subnet %x: %w", ep.gid[:8], rdmadev.ErrNoDevice)
	}
	ip := net.IP(ep.gid[:])
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	probe, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: ip, Port: 4791})
	if err != nil {
		return rdmadev.Endpoint{}, fmt.Errorf("no route to %v: %v: %w", ip, err, rdmadev.ErrNoDevice)
	}
	src := probe.LocalAddr().(*net.UDPAddr).IP
	probe.Close()
	l, err := t.endpointFor(&net.TCPAddr{IP: src})
	if err != nil {
		return l, fmt.Errorf("the route to %v leaves from %v: %w", ip, src, err)
	}
	if !t.o.selected(l) {
		return rdmadev.Endpoint{}, fmt.Errorf("the route to %v leaves from %v on %s (%s), which Options.Devices/Netdevs leave out: %w",
			ip, src, l.Device, l.Netdev, rdmadev.ErrNoDevice)
	}
	return l, nil
}

// localEndpoints are the host's endpoints under the options' selection,
// looked up once.
func (t *Transport) localEndpoints() ([]rdmadev.Endpoint, error) {
	t.localOnce.Do(func() { t.locals, t.localsErr = rdmadev.Endpoints(t.o.selection()) })
	return t.locals, t.localsErr
}

// pick chooses, among a server's endpoints, one this host reaches, and the
// local endpoint for it: the connections of one transport take the
// reachable ones in turn, so they spread over the server's devices and
// the local devices that reach them. None reachable is an error wrapping
// ErrNoDevice that says why for each.
func (t *Transport) pick(eps []offered) (int, rdmadev.Endpoint, error) {
	type cand struct {
		idx   int
		local rdmadev.Endpoint
	}
	var cands []cand
	var why []string
	for i, ep := range eps {
		l, err := t.reach(ep)
		if err != nil {
			why = append(why, fmt.Sprintf("%v: %v", net.IP(ep.gid[:]), err))
			continue
		}
		cands = append(cands, cand{i, l})
	}
	if len(cands) == 0 {
		return 0, rdmadev.Endpoint{}, noDevice(fmt.Errorf("rdma: no local RDMA device reaches any endpoint the server offers (%s): %w",
			strings.Join(why, "; "), rdmadev.ErrNoDevice))
	}
	c := cands[int(t.spread.Add(1)-1)%len(cands)]
	return c.idx, c.local, nil
}
