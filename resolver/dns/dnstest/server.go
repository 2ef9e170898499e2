package dnstest

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// MaxRecords is the most addresses one answer carries; more would not fit
// the 1232-byte UDP payload the Go resolver offers.
const MaxRecords = 32

// maxQuery bounds a query read over TCP; real ones are well under it.
const maxQuery = 4096

// Server answers DNS questions on 127.0.0.1 until Close.
type Server struct {
	conn net.PacketConn
	lis  net.Listener // TCP on the same port, for resolvers configured to use it
	wg   sync.WaitGroup

	mu      sync.Mutex
	names   map[string][]netip.Addr // canonical name ("kv.test.") to addresses
	queries map[string]int
	streams map[net.Conn]struct{}
	closed  bool
}

// NewServer starts a server on a free port of 127.0.0.1, UDP and TCP.
func NewServer() (*Server, error) {
	var err error
	for range 10 { // the TCP port may be taken where the UDP one was free
		var conn net.PacketConn
		conn, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		var lis net.Listener
		lis, err = net.Listen("tcp", conn.LocalAddr().String())
		if err != nil {
			conn.Close()
			continue
		}
		s := &Server{
			conn: conn, lis: lis,
			names: make(map[string][]netip.Addr), queries: make(map[string]int), streams: make(map[net.Conn]struct{}),
		}
		s.wg.Add(2)
		go s.serve()
		go s.serveTCP()
		return s, nil
	}
	return nil, err
}

// Addr is the server's "ip:port", the authority of a dns target.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Set makes name resolve to addrs, replacing what it had. With no addrs the
// name exists but has no records: the answer is empty, not "no such name".
func (s *Server) Set(name string, addrs ...netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[canonical(name)] = append([]netip.Addr{}, addrs...)
}

// Delete makes name unknown: the answer is "no such name" (NXDOMAIN).
func (s *Server) Delete(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.names, canonical(name))
}

// Queries is how many questions about name the server has answered.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[canonical(name)]
}

// Close stops the server and waits for it.
func (s *Server) Close() error {
	err := s.conn.Close()
	s.lis.Close()
	s.mu.Lock()
	s.closed = true
	for c := range s.streams {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) serveTCP() {
	defer s.wg.Done()
	for {
		c, err := s.lis.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.streams[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serveStream(c)
	}
}

// serveStream answers the length-prefixed queries of one TCP connection.
func (s *Server) serveStream(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.streams, c)
		s.mu.Unlock()
		c.Close()
	}()
	var hdr [2]byte
	buf := make([]byte, maxQuery)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n > maxQuery {
			return // not a query this server sends answers to
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		resp, err := Answer(buf[:n], s.lookup)
		if err != nil {
			return
		}
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(resp)), uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}

func (s *Server) serve() {
	defer s.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a bad datagram is not the end of the server
		}
		resp, err := Answer(buf[:n], s.lookup)
		if err != nil {
			continue // not a question we can parse: ignore, as servers do
		}
		_, _ = s.conn.WriteTo(resp, from)
	}
}

func (s *Server) lookup(name string) ([]netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries[name]++
	addrs, ok := s.names[name]
	return addrs, ok
}

func canonical(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// Answer builds the response to the DNS query msg, looking names up with
// lookup (given canonical, lower-case names ending in "."). It answers the
// first question only; A questions get the IPv4 addresses, AAAA the IPv6
// ones, at most MaxRecords, other types none.
func Answer(msg []byte, lookup func(name string) ([]netip.Addr, bool)) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return nil, err
	}
	if h.Response {
		return nil, errors.New("dnstest: a response, not a query")
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	addrs, found := lookup(canonical(q.Name.String()))
	rh := dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true,
	}
	if !found {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	n := 0
	for _, a := range addrs {
		if n == MaxRecords {
			break
		}
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rr, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
			err = b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: a.As16()})
		default:
			continue
		}
		if err != nil {
			return nil, err
		}
		n++
	}
	return b.Finish()
}
