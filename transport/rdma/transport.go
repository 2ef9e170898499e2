package rdma

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/internal/rdmadev"
	"github.com/rdmarpc/rdmarpc/transport"
	"github.com/rdmarpc/rdmarpc/transport/rdma/internal/verbs"
)

func init() { transport.Register("rdma", New(Options{})) }

// Options configure the RDMA transport. The zero value is usable.
type Options struct {
	// BufferSize is the size of each receive buffer, and so of the largest
	// message that travels whole and is handed up in place; larger messages
	// are fragmented. Default 64 KiB.
	BufferSize int
	// RecvBuffers is the number of data receive buffers posted per
	// connection: the credits the peer starts with. Default 16.
	RecvBuffers int
	// SendSlots is the most registered send buffers, each of the peer's
	// BufferSize, that a connection holds at once (sent and not yet
	// completed, or lent by NewSendBuffer). They come from one registered
	// arena per device shared by the transport's connections, which grows
	// by SendSlots buffers at a time within MemoryBudget: an idle
	// connection holds none. Default 16.
	SendSlots int
	// PrivateSendSlots registers each connection's SendSlots send buffers
	// at its handshake, for its life, instead of sharing the device's
	// arena (the layout before the arena).
	PrivateSendSlots bool
	// MaxMessageSize is the largest message this side accepts. Default
	// transport.DefaultMaxMessageSize (64 MiB).
	MaxMessageSize int
	// RecvQueueBytes bounds the reassembled (fragmented) messages that
	// wait for Recv; beyond it their receive buffers are not re-posted,
	// which holds the peer's credits back. Default 4 MiB. Whole messages
	// are bounded by RecvBuffers.
	RecvQueueBytes int
	// RendezvousThreshold: a message larger than this, and than one of
	// the peer's receive buffers, goes by rendezvous when both sides
	// offer it: the peer pulls it with one RDMA Read through a key that
	// reads that message alone (a memory window bound to it, or a region
	// registered for it), instead of receiving it in fragments
	// (docs/rdma.md, "Rendezvous"). Default DefaultRendezvousThreshold
	// (1 MiB); negative turns the rendezvous off (and with it the queue
	// pairs' remote-read access).
	RendezvousThreshold int
	// PollSpin bounds how long a goroutine waiting in Recv polls an empty
	// completion queue while a reply is expected (a message left and
	// none has arrived since) before it sleeps: it polls for twice the
	// connection's observed round trip, at most PollSpin. Nothing
	// expected, or a fragmented message on its way: it sleeps at once.
	// Default 500 µs; negative means never spin.
	PollSpin time.Duration
	// SignalEvery is the most sends posted without asking for a
	// completion. Default 16.
	SignalEvery int
	// AckTimeout is the QP's local ACK timeout, encoded as the verbs do:
	// 4.096 µs × 2^AckTimeout. Default 17 (about 0.5 s: rxe under
	// emulation is slow). RetryCount is the transport retry count,
	// default 7. Together they bound how long a dead peer goes unnoticed
	// by the hardware (the bootstrap TCP connection usually tells first).
	AckTimeout uint8
	RetryCount uint8
	// HandshakeTimeout bounds the bootstrap handshake. Default 10 s. A
	// server holds the queue pair it made for a client's hello for a
	// third of it at most (at least 2 s, or all of it when shorter),
	// waiting for the client to say ready.
	HandshakeTimeout time.Duration
	// MaxHandshakes bounds the handshakes a server runs at once past the
	// client's hello, each holding a queue pair and its receive buffers
	// until the client says ready: in all, and an eighth of it (at least
	// one) from one source address. A hello beyond waits for a place,
	// without a queue pair, within HandshakeTimeout; places that free go
	// to the waiting sources in turn, so a source that floods the server
	// with hellos that never complete holds its eighth while other
	// clients still connect. A source with 4 × MaxHandshakes hellos
	// waiting, or 16 × MaxHandshakes waiting in all, is refused at once.
	// Default 64 (docs/rdma.md, "Handshakes in progress").
	MaxHandshakes int
	// CloseGrace bounds how long Close waits for posted sends to complete
	// and for flushed work requests. Default 2 s.
	CloseGrace time.Duration
	// Receive is where a connection's receive buffers come from: its own
	// (ReceivePerConnection: RecvBuffers posted per connection), or one
	// shared receive queue per device whose buffers are lent to the
	// connections as credits (ReceiveShared; docs/rdma.md, "Shared receive
	// queue"): each peer always holds SharedCredits of them and borrows
	// more, up to RecvBuffers, while it is busy, giving them back once
	// idle, so registered receive memory grows with the load, not with the
	// connections. Shared, BufferSize defaults to 16 KiB. The peer must
	// support lent credits: a shared client refuses a server that does
	// not; a shared server gives such a client its own buffers. The zero
	// value is DefaultReceive, or ReceiveShared when MemoryBudget (its
	// default included) holds fewer than 256 connections of
	// DefaultReceive at these sizes.
	Receive ReceiveLayout
	// Completions is where a connection's completions go: a completion
	// queue, completion channel (an fd) and poller goroutine of its own
	// (CompletionsPerConnection), or the device's shared ones
	// (CompletionsShared: one completion channel and one poller per
	// device, a completion queue per qpsPerCQ connections, demultiplexed
	// by QP number; docs/rdma.md, "Shared completion queues"), so fds and
	// goroutines stop growing with the connections. Either way a
	// goroutine waiting in Recv, or a send waiting for credits or slots,
	// polls the queue itself; shared, it handles every connection's
	// completions it finds. The zero value is CompletionsShared with
	// ReceiveShared (the layout for many connections) and
	// DefaultCompletions otherwise: in one boot of the test bed, shared
	// was faster at one caller (Conn ping-pong 64 B p50 40–41 against
	// 46 µs, RPC echo 135–142 against 250–264 µs) but had a higher p50
	// for the Conn ping-pong with 16 callers (459–480 against 183–215
	// µs, its p99 lower); docs/rdma.md.
	Completions CompletionLayout
	// SharedCredits is the guaranteed window of a connection with
	// ReceiveShared. Default 1.
	SharedCredits int
	// MemoryBudget bounds the registered (pinned) memory of all this
	// transport's connections, in bytes: a handshake that would go beyond
	// it is refused, on either side, with an error wrapping
	// ErrMemoryBudget, instead of pinning pages until the kernel kills the
	// process. Default: a quarter of the machine's memory, or
	// RLIMIT_MEMLOCK when lower and the process lacks CAP_IPC_LOCK (which
	// lifts it); negative means no budget. The first refusal is logged
	// once, with the budget's source, what a connection costs, how many
	// fit and what to raise.
	MemoryBudget int64
	// Devices, Netdevs and GIDIndex choose the RDMA endpoints (device,
	// port, GID) a server offers its clients, whatever address the
	// bootstrap connection arrived on, and the local ones a client may use
	// (docs/rdma.md, "Endpoints"). Devices are device names ("mlx5_0") or
	// device ports ("mlx5_0:1"); Netdevs keep the RoCE ports whose GID
	// belongs to one of these network interfaces ("net1"); GIDIndex is the
	// GID table entry to use (0: the RoCE v2 GID of an IPv4 address, else
	// of a global IPv6 one; on InfiniBand entry 0). Empty: every ACTIVE
	// port of every device (at most 16 are offered).
	Devices  []string
	Netdevs  []string
	GIDIndex int
	// Logger receives one line per refused peer or broken connection,
	// and one (Info) when an address moved to another GID table entry.
	// Default zap.NewNop().
	Logger *zap.Logger
}

// ReceiveLayout says where a connection's receive buffers come from
// (Options.Receive).
type ReceiveLayout int

const (
	// ReceivePerConnection: each connection posts RecvBuffers receive
	// buffers of its own (2 + RecvBuffers of BufferSize registered per
	// connection).
	ReceivePerConnection ReceiveLayout = iota + 1
	// ReceiveShared: one shared receive queue per device, credits lent
	// from its pool.
	ReceiveShared
)

// DefaultReceive is the layout of Options whose Receive is zero when the
// memory budget holds at least 256 connections of it (a quarter of a few
// GiB of RAM does, about 290 MiB with the default sizes); a smaller budget — an 8 MiB
// RLIMIT_MEMLOCK, as ordinary users and containers get — makes it
// ReceiveShared, whose connections cost tens of KiB instead of over a MiB
// (docs/rdma.md, "Memory budget").
const DefaultReceive = ReceivePerConnection

// perConnectionMin is the fewest connections of the per-connection receive
// layout a memory budget must hold for a zero Options.Receive to be
// DefaultReceive rather than ReceiveShared (the number in DefaultReceive's
// comment).
const perConnectionMin = 256

// DefaultCompletions is the completion layout of Options whose
// Completions is zero and whose Receive is ReceivePerConnection; with
// ReceiveShared it is CompletionsShared.
const DefaultCompletions = CompletionsPerConnection

// defaultCompletions, set only by tests that run their suites over one
// layout, is what a zero Completions becomes whatever Receive is.
var defaultCompletions CompletionLayout

func (o Options) withDefaults() Options {
	if o.MemoryBudget == 0 {
		o.MemoryBudget, _ = rdmadev.ReadPinning().Budget()
	}
	if o.Receive == 0 {
		o.Receive = chooseReceive(o)
	}
	if o.Completions == 0 {
		switch {
		case defaultCompletions != 0:
			o.Completions = defaultCompletions
		case o.Receive == ReceiveShared:
			o.Completions = CompletionsShared
		default:
			o.Completions = DefaultCompletions
		}
	}
	o = o.withSizes()
	if o.PollSpin < 0 {
		o.PollSpin = 0
	} else if o.PollSpin == 0 {
		o.PollSpin = 500 * time.Microsecond
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = 17
	}
	if o.RetryCount == 0 {
		o.RetryCount = 7
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.MaxHandshakes <= 0 {
		o.MaxHandshakes = 64
	}
	if o.CloseGrace <= 0 {
		o.CloseGrace = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	o.Logger = o.Logger.Named("rdma")
	return o
}

// withSizes is o with the defaults and bounds of its buffer sizes and
// counts, which depend on o.Receive (set).
func (o Options) withSizes() Options {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Receive == ReceiveShared {
		def(&o.BufferSize, 16<<10)
		def(&o.SharedCredits, 1)
	}
	def(&o.BufferSize, 64<<10)
	def(&o.RecvBuffers, 16)
	def(&o.SendSlots, 16)
	def(&o.MaxMessageSize, transport.DefaultMaxMessageSize)
	def(&o.RecvQueueBytes, 4<<20)
	def(&o.SignalEvery, 16)
	if o.RendezvousThreshold == 0 {
		o.RendezvousThreshold = DefaultRendezvousThreshold
	} else if o.RendezvousThreshold < 0 {
		o.RendezvousThreshold = -1
	}
	o.BufferSize = min(max(o.BufferSize, minBufferSize), maxBufferSize)
	o.RecvBuffers = min(o.RecvBuffers, maxRecvs)
	o.SharedCredits = min(o.SharedCredits, o.RecvBuffers)
	o.MaxMessageSize = min(max(o.MaxMessageSize, minMaxMessage), maxMaxMessage)
	o.SendSlots = max(o.SendSlots, 2) // one may be lent, one keeps messages moving
	return o
}

// Transport is the RDMA transport. It opens each device once and shares it
// (context and protection domain) among its connections.
type Transport struct {
	o Options

	mu      sync.Mutex
	devices map[string]*device

	// endpoints caches what rdmadev.ForIP found for each local IP: the
	// lookup walks sysfs and netlink (hundreds of milliseconds on a slow
	// machine), once per IP is enough. Each use checks that the entry's
	// GID table entry still holds the address (rdmadev.Current, two sysfs
	// reads) and looks again when it does not; an entry is dropped when a
	// connection set up from it fails.
	endpoints sync.Map // string(IP) -> rdmadev.Endpoint

	// locals are the host's endpoints under the options' selection,
	// looked up once (InfiniBand subnets, whether any device exists).
	localOnce sync.Once
	locals    []rdmadev.Endpoint
	localsErr error
	// spread counts the client's endpoint picks: connections take the
	// server endpoints they reach in turn.
	spread atomic.Uint64

	counters  counters
	budget    budget
	gate      *gate   // the handshakes a server runs past the hello
	giveBacks lenders // connections holding lent credits, for the idle give-back

	// oldHello, set only by tests, leaves featLend out of this side's
	// hellos: a peer built before lent credits.
	oldHello bool
	// noAsks, set only by tests, leaves featAnswer out: a peer built
	// before asks and answers.
	noAsks bool

	// connHook, set only by tests before the first connection, sees each
	// new connection (the stall watchdog dumps their state).
	connHook func(*conn)
}

// New returns an RDMA transport with options o.
func New(o Options) *Transport {
	t := &Transport{o: o.withDefaults(), devices: make(map[string]*device)}
	t.gate = newGate(t.o.MaxHandshakes, max(1, t.o.MaxHandshakes/8))
	t.budget.limit = t.o.MemoryBudget
	t.budget.source = budgetSource(o.MemoryBudget == 0)
	t.budget.cost = costOf(t.o)
	t.budget.log = t.o.Logger
	return t
}

// device is an opened RDMA device shared by the connections that use it.
type device struct {
	name string
	ctx  *verbs.Context
	pd   *verbs.PD
	pool *srqPool // its shared receive queue (ReceiveShared), made by the first connection
	hub  *cqHub   // its shared completions (CompletionsShared), under the transport's mu
	refs int
	// arenas are the shared send arenas by slot size (arena.go), under
	// the transport's mu.
	arenas map[int]*arena
	// reads are the rendezvous receivers' idle read buffers, wins the
	// senders' idle windowed regions (rendezvous_pool.go).
	reads, wins *readPool
	// noWindows: the device has no type 2 memory windows; rendezvous
	// regions are registered per transfer (rendezvous_window.go).
	noWindows atomic.Bool
}

// acquire opens the device (once) and counts a user.
func (t *Transport) acquire(name string) (*device, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.devices[name]; d != nil {
		d.refs++
		return d, nil
	}
	ctx, err := verbs.Open(name)
	if err != nil {
		if errors.Is(err, verbs.ErrNotSupported) {
			// A build without cgo: no device serves any address.
			return nil, fmt.Errorf("%w: %w", transport.ErrNoDevice, err)
		}
		return nil, err
	}
	pd, err := ctx.AllocPD()
	if err != nil {
		ctx.Close()
		return nil, err
	}
	d := &device{name: name, ctx: ctx, pd: pd, refs: 1,
		reads: newReadPool(pd.Register, &t.budget, t.o.Logger),
		wins:  newReadPool(pd.RegisterForWindows, &t.budget, t.o.Logger)}
	t.devices[name] = d
	return d, nil
}

// release drops a user; the last one closes the device.
func (t *Transport) release(d *device) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d.refs--; d.refs > 0 {
		return
	}
	delete(t.devices, d.name)
	t.closeArenasLocked(d)
	d.reads.close()
	d.wins.close()
	if d.pool != nil {
		d.pool.destroy()
		d.pool = nil
	}
	if err := d.pd.Close(); err != nil {
		t.o.Logger.Error("closing protection domain", zap.String("device", d.name), zap.Error(err))
		return
	}
	if err := d.ctx.Close(); err != nil {
		t.o.Logger.Error("closing device", zap.String("device", d.name), zap.Error(err))
	}
}

// endpointFor finds the device, port and GID that serve the local IP of a
// bootstrap connection. No device is an error wrapping ErrNoDevice.
func (t *Transport) endpointFor(addr net.Addr) (rdmadev.Endpoint, error) {
	ta, ok := addr.(*net.TCPAddr)
	if !ok {
		return rdmadev.Endpoint{}, fmt.Errorf("rdma: local address %v is not TCP", addr)
	}
	key := string(ta.IP.To16())
	cached, ok := t.endpoints.Load(key)
	if ok && rdmadev.Current(cached.(rdmadev.Endpoint)) {
		return cached.(rdmadev.Endpoint), nil
	}
	ep, err := rdmadev.ForIP(ta.IP)
	if err != nil {
		if ok {
			t.endpoints.CompareAndDelete(key, cached)
		}
		return ep, noDevice(err)
	}
	switch {
	case !ok:
		t.endpoints.Store(key, ep)
	case t.endpoints.CompareAndSwap(key, cached, ep):
		t.logMoved(cached.(rdmadev.Endpoint), ep)
	}
	return ep, nil
}

// relocate finds the endpoint of ep's address now that ep's GID table
// entry no longer holds it (rdmadev.Current): the address was removed and
// added again, and took another entry, maybe on another device. An
// InfiniBand GID is no address and has nowhere else to be.
func (t *Transport) relocate(ep rdmadev.Endpoint) (rdmadev.Endpoint, error) {
	if ep.InfiniBand {
		return ep, noDevice(fmt.Errorf("rdma: GID index %d of %s port %d no longer holds %v: %w",
			ep.GIDIndex, ep.Device, ep.Port, net.IP(ep.GID[:]), rdmadev.ErrNoDevice))
	}
	n, err := rdmadev.ForIP(net.IP(ep.GID[:]))
	if err != nil {
		return ep, noDevice(fmt.Errorf("rdma: the address of GID index %d of %s port %d left it: %w", ep.GIDIndex, ep.Device, ep.Port, err))
	}
	if !t.o.selected(n) {
		return ep, noDevice(fmt.Errorf("rdma: %v moved to %s port %d (%s), which Options.Devices/Netdevs leave out: %w",
			net.IP(ep.GID[:]), n.Device, n.Port, n.Netdev, rdmadev.ErrNoDevice))
	}
	return n, nil
}

// logMoved says, once per move, that an address's endpoint changed under
// a cached or offered endpoint.
func (t *Transport) logMoved(was, now rdmadev.Endpoint) {
	t.o.Logger.Info("an address moved to another GID table entry: using the new one",
		zap.Stringer("address", net.IP(now.GID[:])),
		zap.String("device", now.Device), zap.Uint8("port", now.Port), zap.Int("gid_index", now.GIDIndex),
		zap.String("was_device", was.Device), zap.Uint8("was_port", was.Port), zap.Int("was_gid_index", was.GIDIndex))
}

// noDevice makes an rdmadev error that says no device serves an address
// (rdmadev.ErrNoDevice) also say transport.ErrNoDevice, which is what
// callers of the transport (auto://, the fallbacks) look for; its text is
// rdmadev's.
func noDevice(err error) error {
	if errors.Is(err, rdmadev.ErrNoDevice) {
		return noDeviceError{err}
	}
	return err
}

type noDeviceError struct{ err error }

func (e noDeviceError) Error() string        { return e.err.Error() }
func (e noDeviceError) Unwrap() error        { return e.err }
func (e noDeviceError) Is(target error) bool { return target == transport.ErrNoDevice }

// forgetEndpoint drops ep from the cache of local addresses' endpoints
// (its key is the address, which is the RoCE GID).
func (t *Transport) forgetEndpoint(ep rdmadev.Endpoint) {
	t.endpoints.Delete(string(ep.GID[:]))
}

// Dial connects to addr ("ip:port"): the bootstrap TCP connection first,
// over which the server names the RDMA endpoints it offers, then the
// handshake on a local device that reaches one of them (docs/rdma.md,
// "Endpoints"). addr need not be an address of an RDMA device.
func (t *Transport) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	return t.DialWithCredentials(ctx, addr, nil)
}

// DialWithCredentials is Dial with the bootstrap connection secured by
// creds (TLS) before the hellos, so the queue pair's parameters travel
// only to the authenticated server (docs/rdma.md, "Credentials"); nil
// creds: plaintext. The connection's AuthInfo is what the handshake
// verified. It implements transport.CredentialsDialer.
func (t *Transport) DialWithCredentials(ctx context.Context, addr string, creds credentials.TransportCredentials) (transport.Conn, error) {
	return t.dial(ctx, addr, creds, false)
}

// dial is DialWithCredentials; legacy skips the endpoints exchange, for a
// server that predates it: the device is the one of the bootstrap's local
// address, as it always was.
func (t *Transport) dial(ctx context.Context, addr string, creds credentials.TransportCredentials, legacy bool) (transport.Conn, error) {
	// Learn which local address routes to addr without sending anything
	// (a UDP socket's connect), so a machine without a device that could
	// serve it fails fast and leaves the server alone: a loopback address
	// (no RDMA device serves one), or no device at all.
	var d net.Dialer
	if probe, err := d.DialContext(ctx, "udp", addr); err == nil {
		local := probe.LocalAddr().(*net.UDPAddr)
		remote := probe.RemoteAddr().(*net.UDPAddr)
		probe.Close()
		if _, err := t.endpointFor(&net.TCPAddr{IP: local.IP}); err != nil {
			if remote.IP.IsLoopback() || legacy {
				return nil, fmt.Errorf("rdma: dial %s: %w", addr, err)
			}
			if rdmadev.ActivePorts() == 0 {
				return nil, fmt.Errorf("rdma: dial %s: %w (and no other device is ACTIVE)", addr, err)
			}
		}
	}
	boot, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: dial %s: %w", addr, err)
	}
	var auth credentials.AuthInfo
	if creds != nil {
		hctx, cancel := context.WithTimeout(ctx, t.o.HandshakeTimeout)
		sec, ai, err := creds.ClientHandshake(hctx, addr, boot)
		cancel()
		if err != nil {
			boot.Close()
			return nil, fmt.Errorf("rdma: dial %s: %w", addr, err)
		}
		boot, auth = sec, ai
	}
	c, err := t.handshakeClient(ctx, boot, legacy)
	if errors.Is(err, errLegacyServer) && !legacy {
		// An older server refused the query: dial again without it. Not
		// remembered: an upgraded server is noticed at the next dial.
		boot.Close()
		t.o.Logger.Debug("server predates the endpoints exchange: dialing again with the bootstrap's device", zap.String("addr", addr))
		return t.dial(ctx, addr, creds, true)
	}
	if err != nil {
		boot.Close()
		t.budget.refusedHandshake(err)
		return nil, fmt.Errorf("rdma: dial %s: %w", addr, err)
	}
	if err := t.bindQP(ctx, c, auth); err != nil {
		c.Close()
		return nil, fmt.Errorf("rdma: dial %s: %w", addr, err)
	}
	return secured(c, auth), nil
}

// Counters returns what the transport counted over all its connections.
func (t *Transport) Counters() map[string]uint64 { return t.counters.snapshot() }

// Gauges returns the registered memory in use (registered_bytes), the part
// of it in shared receive queues' buffers (shared_recv_bytes), when there
// is one, its budget (registered_budget) and, while there are any, the
// server's handshakes holding a queue pair (handshakes_in_progress) and
// waiting for a place (handshakes_waiting).
func (t *Transport) Gauges() map[string]uint64 {
	m := map[string]uint64{"registered_bytes": uint64(t.budget.inUse())}
	if n := t.sharedBytes(); n > 0 {
		m["shared_recv_bytes"] = uint64(n)
	}
	if t.budget.limit > 0 {
		m["registered_budget"] = uint64(t.budget.limit)
	}
	if held, waiting := t.gate.inProgress(); held+waiting > 0 {
		m["handshakes_in_progress"], m["handshakes_waiting"] = uint64(held), uint64(waiting)
	}
	return m
}

// counters are the transport's running totals.
type counters struct {
	connsOpened, connsClosed atomic.Uint64
	creditWaits              atomic.Uint64 // a send found no credit and waited
	slotWaits                atomic.Uint64 // a send found no send slot and waited
	creditOnlySent           atomic.Uint64
	sendsPosted, recvsPosted atomic.Uint64
	sendPosts                atomic.Uint64 // PostSend calls (doorbells): sendsPosted over it is the batch
	sendCompletions          atomic.Uint64
	recvCompletions          atomic.Uint64
	cqArms                   atomic.Uint64 // completion queues armed (req_notify)
	cqEvents                 atomic.Uint64 // completion events read by a poller goroutine
	messagesSent, received   atomic.Uint64
	fragmentsSent            atomic.Uint64
	protocolErrors           atomic.Uint64
	creditsLent              atomic.Uint64 // lent to peers from shared receive pools
	creditsGivenBack         atomic.Uint64 // lent credits this side gave back, idle
	srqLimitEvents           atomic.Uint64 // a shared receive queue ran low (the safety net)
	refused                  atomic.Uint64
	handshakesWaited         atomic.Uint64 // a hello waited for a place at the gate
	tcpPeers                 atomic.Uint64 // clients of the TCP transport served on the bootstrap port
	strayCompletions         atomic.Uint64 // a shared CQ's completion for a QP no longer attached
	cqPlacesLeaked           atomic.Uint64 // a QP left a shared CQ with work requests unaccounted for
	closeGraceExpired        atomic.Uint64 // a teardown stopped waiting for its work requests at the close grace
	lastWQEMissed            atomic.Uint64 // an SRQ QP's LAST_WQE_REACHED did not come within the close grace
	lastWQESettled           atomic.Uint64 // an SRQ QP was destroyed after a settle, the device raising no LAST_WQE_REACHED
	sharedRecvsLost          atomic.Uint64 // shared receive buffers neither on the SRQ nor handled when it was destroyed
	rndvSent                 atomic.Uint64 // messages sent by rendezvous (descriptors)
	rndvRead                 atomic.Uint64 // messages received by rendezvous (RDMA Reads completed)
	rndvRefused              atomic.Uint64 // rendezvous the peer refused (sent in fragments instead)
	rndvFallbacks            atomic.Uint64 // messages over the threshold sent in fragments: no memory for the region here
	rndvPooled               atomic.Uint64 // rendezvous read into a pooled buffer (no registration)
	rndvWindowed             atomic.Uint64 // rendezvous sent from a windowed region (a memory window, no registration)

	mu       sync.Mutex
	wcErrors map[string]uint64 // failed work completions by status
	devConns map[string]uint64 // connections opened, by device
}

// deviceConn counts a connection opened on device dev.
func (c *counters) deviceConn(dev string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.devConns == nil {
		c.devConns = make(map[string]uint64)
	}
	c.devConns[dev]++
}

func (c *counters) wcError(s verbs.WCStatus) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wcErrors == nil {
		c.wcErrors = make(map[string]uint64)
	}
	c.wcErrors[wcStatusName(s)]++
}

func (c *counters) snapshot() map[string]uint64 {
	m := map[string]uint64{
		"conns_opened":        c.connsOpened.Load(),
		"conns_closed":        c.connsClosed.Load(),
		"credit_waits":        c.creditWaits.Load(),
		"slot_waits":          c.slotWaits.Load(),
		"credit_only_sent":    c.creditOnlySent.Load(),
		"sends_posted":        c.sendsPosted.Load(),
		"send_posts":          c.sendPosts.Load(),
		"recvs_posted":        c.recvsPosted.Load(),
		"send_completions":    c.sendCompletions.Load(),
		"recv_completions":    c.recvCompletions.Load(),
		"cq_arms":             c.cqArms.Load(),
		"cq_events":           c.cqEvents.Load(),
		"messages_sent":       c.messagesSent.Load(),
		"messages_received":   c.received.Load(),
		"fragments_sent":      c.fragmentsSent.Load(),
		"protocol_errors":     c.protocolErrors.Load(),
		"credits_lent":        c.creditsLent.Load(),
		"credits_given_back":  c.creditsGivenBack.Load(),
		"srq_limit_events":    c.srqLimitEvents.Load(),
		"handshakes_refused":  c.refused.Load(),
		"handshakes_waited":   c.handshakesWaited.Load(),
		"tcp_peers":           c.tcpPeers.Load(),
		"stray_completions":   c.strayCompletions.Load(),
		"cq_places_leaked":    c.cqPlacesLeaked.Load(),
		"close_grace_expired": c.closeGraceExpired.Load(),
		"last_wqe_missed":     c.lastWQEMissed.Load(),
		"last_wqe_settled":    c.lastWQESettled.Load(),
		"shared_recvs_lost":   c.sharedRecvsLost.Load(),
		"rendezvous_sent":     c.rndvSent.Load(),
		"rendezvous_read":     c.rndvRead.Load(),
		"rendezvous_refused":  c.rndvRefused.Load(),
		"rendezvous_fallback": c.rndvFallbacks.Load(),
		"rendezvous_pooled":   c.rndvPooled.Load(),
		"rendezvous_windowed": c.rndvWindowed.Load(),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.wcErrors))
	for k := range c.wcErrors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		m["wc_error_"+k] = c.wcErrors[k]
	}
	for dev, n := range c.devConns {
		m["conns_opened_"+dev] = n
	}
	return m
}

// wcStatusName turns "IBV_WC_RNR_RETRY_EXC_ERR: RNR retry counter exceeded"
// into "rnr_retry_exc_err".
func wcStatusName(s verbs.WCStatus) string {
	name := s.String()
	for i, r := range name {
		if r == ':' {
			name = name[:i]
			break
		}
	}
	const prefix = "IBV_WC_"
	if len(name) > len(prefix) && name[:len(prefix)] == prefix {
		name = name[len(prefix):]
	}
	b := []byte(name)
	for i, r := range b {
		if r >= 'A' && r <= 'Z' {
			b[i] = r + 'a' - 'A'
		}
	}
	return string(b)
}
