package channelz

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials"
)

// DefaultMaxResults is the page size of a listing that asks for none (or
// for a nonpositive number), as gRPC-go's.
const DefaultMaxResults = 50

// CallMetrics counts the calls through a channel, subchannel or server.
// Its methods are safe for concurrent use and take no lock.
type CallMetrics struct {
	started, succeeded, failed atomic.Int64
	lastStarted                atomic.Int64 // Unix nanoseconds; 0: never
}

// Start counts a call started now.
func (m *CallMetrics) Start() { m.StartAt(time.Now().UnixNano()) }

// StartAt counts a call started at now (Unix nanoseconds), for a caller
// that counts one call on several entities with one reading of the clock.
func (m *CallMetrics) StartAt(now int64) {
	m.started.Add(1)
	m.lastStarted.Store(now)
}

// End counts a call's end, successful (an OK status) or not.
func (m *CallMetrics) End(ok bool) {
	if ok {
		m.succeeded.Add(1)
	} else {
		m.failed.Add(1)
	}
}

// CallCounts is a CallMetrics read at one time.
type CallCounts struct {
	Started, Succeeded, Failed int64
	LastStarted                time.Time // zero: no call yet
}

// Counts reads the counters.
func (m *CallMetrics) Counts() CallCounts {
	c := CallCounts{Started: m.started.Load(), Succeeded: m.succeeded.Load(), Failed: m.failed.Load()}
	if ns := m.lastStarted.Load(); ns != 0 {
		c.LastStarted = time.Unix(0, ns)
	}
	return c
}

// entity is what every registered thing has.
type entity struct {
	id      int64
	name    string
	created time.Time
}

// ID is the entity's id, unique among all entities of the process, never
// reused; ids grow in the order entities were made.
func (e *entity) ID() int64 { return e.id }

// Name is the entity's reference name (a channel's target, a socket's
// addresses).
func (e *entity) Name() string { return e.name }

// Created is when the entity was made.
func (e *entity) Created() time.Time { return e.created }

var lastID atomic.Int64

func newEntity(name string) entity {
	return entity{id: lastID.Add(1), name: name, created: time.Now()}
}

// registry holds every entity still open, by id.
type registry struct {
	mu          sync.Mutex
	channels    map[int64]*Channel // top channels
	subchannels map[int64]*SubChannel
	servers     map[int64]*Server
	sockets     map[int64]*Socket
}

var db = registry{
	channels:    make(map[int64]*Channel),
	subchannels: make(map[int64]*SubChannel),
	servers:     make(map[int64]*Server),
	sockets:     make(map[int64]*Socket),
}

// Channel is a ClientConn.
type Channel struct {
	entity
	Calls CallMetrics
	state func() connectivity.State

	mu     sync.Mutex // guards subs and closed; the registry's lock is taken inside it
	subs   map[int64]*SubChannel
	closed bool
}

// NewChannel registers a top channel for target; state reads its
// connectivity state (called only when someone asks). Close removes it.
func NewChannel(target string, state func() connectivity.State) *Channel {
	c := &Channel{entity: newEntity(target), state: state, subs: make(map[int64]*SubChannel)}
	db.mu.Lock()
	db.channels[c.id] = c
	db.mu.Unlock()
	return c
}

// Target is the channel's target, as given to NewChannel.
func (c *Channel) Target() string { return c.name }

// State is the channel's connectivity state now.
func (c *Channel) State() connectivity.State { return c.state() }

// NewSubChannel registers a backend of c, named name (its addresses);
// state reads its connectivity state. Its Close, or c's, removes it.
func (c *Channel) NewSubChannel(name string, state func() connectivity.State) *SubChannel {
	s := &SubChannel{entity: newEntity(name), parent: c, state: state, sockets: make(map[int64]*Socket)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return s // never registered
	}
	c.subs[s.id] = s
	db.mu.Lock()
	db.subchannels[s.id] = s
	db.mu.Unlock()
	return s
}

// SubChannels lists c's backends, by id.
func (c *Channel) SubChannels() []*SubChannel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedValues(c.subs)
}

// Close removes c and its subchannels from the registry. Their sockets
// stay until they close themselves.
func (c *Channel) Close() {
	c.mu.Lock()
	c.closed = true
	subs := c.subs
	c.subs = nil
	c.mu.Unlock()
	db.mu.Lock()
	delete(db.channels, c.id)
	for id := range subs {
		delete(db.subchannels, id)
	}
	db.mu.Unlock()
}

// SubChannel is one backend of a channel: the connection to one server
// over one of its addresses at a time.
type SubChannel struct {
	entity
	Calls  CallMetrics
	parent *Channel
	state  func() connectivity.State

	mu      sync.Mutex // guards sockets
	sockets map[int64]*Socket
}

// Parent is the channel the subchannel belongs to.
func (s *SubChannel) Parent() *Channel { return s.parent }

// State is the subchannel's connectivity state now.
func (s *SubChannel) State() connectivity.State { return s.state() }

// NewSocket registers a connection of s. Its Close removes it.
func (s *SubChannel) NewSocket(info SocketInfo) *Socket {
	k := newSocket(info, s.id)
	k.owner = &s.mu
	k.ownerSet = s.sockets
	s.mu.Lock()
	s.sockets[k.id] = k
	s.mu.Unlock()
	k.register()
	return k
}

// Sockets lists the subchannel's open connections, by id.
func (s *SubChannel) Sockets() []*Socket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedValues(s.sockets)
}

// Close removes s from the registry and from its channel.
func (s *SubChannel) Close() {
	c := s.parent
	c.mu.Lock()
	delete(c.subs, s.id)
	c.mu.Unlock()
	db.mu.Lock()
	delete(db.subchannels, s.id)
	db.mu.Unlock()
}

// Server is a Server.
type Server struct {
	entity
	Calls CallMetrics

	mu      sync.Mutex // guards listen and sockets
	listen  map[int64]*Socket
	sockets map[int64]*Socket
}

// NewServer registers a server. Close removes it.
func NewServer(name string) *Server {
	s := &Server{entity: newEntity(name), listen: make(map[int64]*Socket), sockets: make(map[int64]*Socket)}
	db.mu.Lock()
	db.servers[s.id] = s
	db.mu.Unlock()
	return s
}

// NewListenSocket registers a listener of s. Its Close removes it.
func (s *Server) NewListenSocket(info SocketInfo) *Socket {
	info.Listen = true
	return s.newSocket(info, s.listen)
}

// NewSocket registers a connection s accepted. Its Close removes it.
func (s *Server) NewSocket(info SocketInfo) *Socket {
	return s.newSocket(info, s.sockets)
}

func (s *Server) newSocket(info SocketInfo, set map[int64]*Socket) *Socket {
	k := newSocket(info, s.id)
	k.owner, k.ownerSet = &s.mu, set
	s.mu.Lock()
	set[k.id] = k
	s.mu.Unlock()
	k.register()
	return k
}

// ListenSockets lists the server's listeners, by id.
func (s *Server) ListenSockets() []*Socket {
	s.mu.Lock()
	defer s.mu.Unlock()
	return sortedValues(s.listen)
}

// Sockets lists, by id, up to max (DefaultMaxResults when max <= 0) of the
// server's connections whose id is start or more, and whether that was
// the last of them.
func (s *Server) Sockets(start int64, max int) ([]*Socket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return page(s.sockets, start, max)
}

// Close removes s from the registry. Its sockets stay until they close
// themselves.
func (s *Server) Close() {
	db.mu.Lock()
	delete(db.servers, s.id)
	db.mu.Unlock()
}

// SocketInfo describes a socket when it is made.
type SocketInfo struct {
	Local, Remote net.Addr
	// Transport names what carries it: "tcp", "rdma", "unix", "h2" (a
	// gRPC client's HTTP/2 on the server's port).
	Transport string
	// AuthInfo is the connection's security (credentials.TLSInfo for
	// TLS); nil without credentials.
	AuthInfo credentials.AuthInfo
	// Counters reads the transport's own counters, when it keeps some
	// (RDMA's credits and retries); nil when it does not.
	Counters func() map[string]uint64
	// KeepalivesSent reads how many keepalive pings were sent; nil: none.
	KeepalivesSent func() uint64
	// LastReceived reads when the connection's last frame came, when the
	// owner keeps that anyway: then MessageReceived only counts, and the
	// socket's last message received is the last frame's time (a message,
	// or a control frame after it). nil: MessageReceived reads the clock.
	LastReceived func() time.Time
	// Listen: a listener, not a connection.
	Listen bool
}

// Socket is a connection or a listener.
type Socket struct {
	entity
	parent int64
	info   SocketInfo

	streamsStarted, streamsSucceeded, streamsFailed atomic.Int64
	messagesSent, messagesReceived                  atomic.Int64
	lastLocalStream, lastRemoteStream               atomic.Int64 // Unix nanoseconds
	lastSent, lastReceived                          atomic.Int64

	owner    *sync.Mutex // the lock of ownerSet
	ownerSet map[int64]*Socket
	once     sync.Once
}

func newSocket(info SocketInfo, parent int64) *Socket {
	name := info.Transport
	if info.Local != nil {
		name += " " + info.Local.String()
	}
	if info.Remote != nil {
		name += " -> " + info.Remote.String()
	}
	return &Socket{entity: newEntity(name), parent: parent, info: info}
}

func (k *Socket) register() {
	db.mu.Lock()
	db.sockets[k.id] = k
	db.mu.Unlock()
}

// Close removes k from the registry and from its owner. Calling it again
// does nothing.
func (k *Socket) Close() {
	if k == nil {
		return
	}
	k.once.Do(func() {
		k.owner.Lock()
		delete(k.ownerSet, k.id)
		k.owner.Unlock()
		db.mu.Lock()
		delete(db.sockets, k.id)
		db.mu.Unlock()
	})
}

// Parent is the id of the subchannel or server the socket belongs to.
func (k *Socket) Parent() int64 { return k.parent }

// Info is what the socket was made with.
func (k *Socket) Info() SocketInfo { return k.info }

// StreamStarted counts a call or stream begun on the connection, by this
// side (local) or by the peer.
func (k *Socket) StreamStarted(local bool) { k.StreamStartedAt(local, time.Now().UnixNano()) }

// StreamStartedAt is StreamStarted at now (Unix nanoseconds).
func (k *Socket) StreamStartedAt(local bool, now int64) {
	k.streamsStarted.Add(1)
	if local {
		k.lastLocalStream.Store(now)
	} else {
		k.lastRemoteStream.Store(now)
	}
}

// StreamEnded counts a call or stream's end, with an OK status or not.
func (k *Socket) StreamEnded(ok bool) {
	if ok {
		k.streamsSucceeded.Add(1)
	} else {
		k.streamsFailed.Add(1)
	}
}

// MessageSent counts a message sent.
func (k *Socket) MessageSent() {
	k.messagesSent.Add(1)
	k.lastSent.Store(time.Now().UnixNano())
}

// MessageReceived counts a message received.
func (k *Socket) MessageReceived() {
	k.messagesReceived.Add(1)
	if k.info.LastReceived == nil {
		k.lastReceived.Store(time.Now().UnixNano())
	}
}

// SocketMetrics is what a socket counted, read at one time.
type SocketMetrics struct {
	StreamsStarted, StreamsSucceeded, StreamsFailed int64
	MessagesSent, MessagesReceived, KeepalivesSent  int64
	// Zero: never.
	LastLocalStreamCreated, LastRemoteStreamCreated time.Time
	LastMessageSent, LastMessageReceived            time.Time
	// Counters are the transport's own, nil when it keeps none.
	Counters map[string]uint64
}

// Metrics reads the socket's counters.
func (k *Socket) Metrics() SocketMetrics {
	m := SocketMetrics{
		StreamsStarted:          k.streamsStarted.Load(),
		StreamsSucceeded:        k.streamsSucceeded.Load(),
		StreamsFailed:           k.streamsFailed.Load(),
		MessagesSent:            k.messagesSent.Load(),
		MessagesReceived:        k.messagesReceived.Load(),
		LastLocalStreamCreated:  unixTime(k.lastLocalStream.Load()),
		LastRemoteStreamCreated: unixTime(k.lastRemoteStream.Load()),
		LastMessageSent:         unixTime(k.lastSent.Load()),
		LastMessageReceived:     unixTime(k.lastReceived.Load()),
	}
	if f := k.info.LastReceived; f != nil && m.MessagesReceived > 0 {
		m.LastMessageReceived = f()
	}
	if f := k.info.KeepalivesSent; f != nil {
		m.KeepalivesSent = int64(f())
	}
	if f := k.info.Counters; f != nil {
		m.Counters = f()
	}
	return m
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// TopChannels lists, by id, up to max (DefaultMaxResults when max <= 0)
// of the open top channels whose id is start or more, and whether that was
// the last of them.
func TopChannels(start int64, max int) ([]*Channel, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return page(db.channels, start, max)
}

// Servers lists servers as TopChannels lists channels.
func Servers(start int64, max int) ([]*Server, bool) {
	db.mu.Lock()
	defer db.mu.Unlock()
	return page(db.servers, start, max)
}

// GetChannel returns the open top channel with that id, or nil.
func GetChannel(id int64) *Channel { return get(db.channels, id) }

// GetSubChannel returns the open subchannel with that id, or nil.
func GetSubChannel(id int64) *SubChannel { return get(db.subchannels, id) }

// GetServer returns the open server with that id, or nil.
func GetServer(id int64) *Server { return get(db.servers, id) }

// GetSocket returns the open socket with that id, or nil.
func GetSocket(id int64) *Socket { return get(db.sockets, id) }

func get[T any](m map[int64]*T, id int64) *T {
	db.mu.Lock()
	defer db.mu.Unlock()
	return m[id]
}

// page returns up to max of m's values with ids from start on, by id, and
// whether no more follow.
func page[T any](m map[int64]*T, start int64, max int) ([]*T, bool) {
	if max <= 0 {
		max = DefaultMaxResults
	}
	ids := make([]int64, 0, len(m))
	for id := range m {
		if id >= start {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	end := len(ids) <= max
	if !end {
		ids = ids[:max]
	}
	out := make([]*T, len(ids))
	for i, id := range ids {
		out[i] = m[id]
	}
	return out, end
}

func sortedValues[T any](m map[int64]*T) []*T {
	out, _ := page(m, 0, len(m)+1)
	return out
}
