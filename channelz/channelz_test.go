package channelz_test

import (
	"net"
	"testing"
	"time"

	"github.com/rdmarpc/rdmarpc/channelz"
	"github.com/rdmarpc/rdmarpc/connectivity"
)

func ready() connectivity.State { return connectivity.Ready }

// TestPaging: listings go by id from the start asked, as many as asked
// (DefaultMaxResults when none), and say when they reached the end.
func TestPaging(t *testing.T) {
	var made []*channelz.Channel
	for range channelz.DefaultMaxResults + 3 {
		c := channelz.NewChannel("paging", ready)
		made = append(made, c)
		defer c.Close()
	}
	first := made[0].ID()
	got, end := channelz.TopChannels(first, 2)
	if len(got) != 2 || end || got[0] != made[0] || got[1] != made[1] {
		t.Fatalf("TopChannels(%d, 2) = %d channels, end %v", first, len(got), end)
	}
	got, end = channelz.TopChannels(first, 0)
	if len(got) != channelz.DefaultMaxResults || end {
		t.Fatalf("TopChannels(%d, 0) = %d channels, end %v: want a default page", first, len(got), end)
	}
	for i := 1; i < len(got); i++ {
		if got[i].ID() <= got[i-1].ID() {
			t.Fatalf("ids out of order: %d after %d", got[i].ID(), got[i-1].ID())
		}
	}
	last := made[len(made)-1]
	got, end = channelz.TopChannels(last.ID(), 5)
	if len(got) != 1 || got[0] != last || !end {
		t.Fatalf("TopChannels from the last = %d channels, end %v", len(got), end)
	}
}

// TestClose: a closed channel, its subchannels, a closed server and closed
// sockets are gone from every lookup; a subchannel made after its
// channel's Close is never listed.
func TestClose(t *testing.T) {
	c := channelz.NewChannel("closing", ready)
	sc := c.NewSubChannel("a:1", ready)
	k := sc.NewSocket(channelz.SocketInfo{Transport: "tcp", Local: &net.TCPAddr{Port: 1}})
	if channelz.GetChannel(c.ID()) != c || channelz.GetSubChannel(sc.ID()) != sc || channelz.GetSocket(k.ID()) != k {
		t.Fatal("not registered")
	}
	if s := c.SubChannels(); len(s) != 1 || s[0] != sc || s[0].Parent() != c {
		t.Fatalf("SubChannels: %v", s)
	}
	c.Close()
	if channelz.GetChannel(c.ID()) != nil || channelz.GetSubChannel(sc.ID()) != nil {
		t.Fatal("closed channel or its subchannel still found")
	}
	if late := c.NewSubChannel("b:1", ready); channelz.GetSubChannel(late.ID()) != nil {
		t.Fatal("a subchannel of a closed channel was registered")
	}
	if channelz.GetSocket(k.ID()) != k {
		t.Fatal("a socket went before it closed")
	}
	k.Close()
	k.Close()
	if channelz.GetSocket(k.ID()) != nil || len(sc.Sockets()) != 0 {
		t.Fatal("closed socket still found")
	}

	s := channelz.NewServer("")
	ls := s.NewListenSocket(channelz.SocketInfo{Transport: "tcp"})
	conns := []*channelz.Socket{s.NewSocket(channelz.SocketInfo{}), s.NewSocket(channelz.SocketInfo{}), s.NewSocket(channelz.SocketInfo{})}
	if got := s.ListenSockets(); len(got) != 1 || got[0] != ls || !ls.Info().Listen {
		t.Fatalf("ListenSockets: %v", got)
	}
	page, end := s.Sockets(conns[1].ID(), 1)
	if len(page) != 1 || page[0] != conns[1] || end {
		t.Fatalf("Sockets(from the second, 1): %v, end %v", page, end)
	}
	conns[2].Close()
	if page, end = s.Sockets(conns[1].ID(), 1); len(page) != 1 || !end {
		t.Fatalf("Sockets after the last closed: %v, end %v", page, end)
	}
	s.Close()
	if channelz.GetServer(s.ID()) != nil {
		t.Fatal("closed server still found")
	}
	for _, k := range append(conns, ls) {
		k.Close()
	}
}

// TestCounts: the counters count; a socket reads its keepalives and its
// transport's counters from its owner.
func TestCounts(t *testing.T) {
	var m channelz.CallMetrics
	if c := m.Counts(); !c.LastStarted.IsZero() {
		t.Fatalf("a call started before any: %v", c)
	}
	m.Start()
	m.Start()
	m.End(true)
	m.End(false)
	if c := m.Counts(); c.Started != 2 || c.Succeeded != 1 || c.Failed != 1 || c.LastStarted.IsZero() {
		t.Fatalf("Counts: %+v", c)
	}
	s := channelz.NewServer("")
	defer s.Close()
	k := s.NewSocket(channelz.SocketInfo{KeepalivesSent: func() uint64 { return 7 }, Counters: func() map[string]uint64 { return map[string]uint64{"x": 1} }})
	defer k.Close()
	k.StreamStarted(false)
	k.StreamEnded(true)
	k.MessageSent()
	k.MessageReceived()
	k.MessageReceived()
	got := k.Metrics()
	if got.StreamsStarted != 1 || got.StreamsSucceeded != 1 || got.MessagesSent != 1 || got.MessagesReceived != 2 || got.KeepalivesSent != 7 || got.Counters["x"] != 1 {
		t.Fatalf("Metrics: %+v", got)
	}
	if got.LastRemoteStreamCreated.IsZero() || !got.LastLocalStreamCreated.IsZero() || got.LastMessageReceived.IsZero() {
		t.Fatalf("a remote stream made %v, a local one %v, a message received %v", got.LastRemoteStreamCreated, got.LastLocalStreamCreated, got.LastMessageReceived)
	}

	// The owner's clock for what came in.
	last := time.Unix(1e9, 0)
	k2 := s.NewSocket(channelz.SocketInfo{LastReceived: func() time.Time { return last }})
	defer k2.Close()
	if m := k2.Metrics(); !m.LastMessageReceived.IsZero() {
		t.Fatalf("no message yet, but the last came at %v", m.LastMessageReceived)
	}
	k2.MessageReceived()
	if m := k2.Metrics(); m.MessagesReceived != 1 || !m.LastMessageReceived.Equal(last) {
		t.Fatalf("received %d, the last at %v; want 1 at the owner's %v", m.MessagesReceived, m.LastMessageReceived, last)
	}
}

// BenchmarkCall is what a call costs channelz on one entity: a start and
// an end.
func BenchmarkCall(b *testing.B) {
	var m channelz.CallMetrics
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Start()
			m.End(true)
		}
	})
}

// BenchmarkClientCall is what one unary call costs channelz on a client:
// the channel's, the subchannel's and the socket's counts, the request
// sent and the response received.
func BenchmarkClientCall(b *testing.B) {
	c := channelz.NewChannel("bench", ready)
	defer c.Close()
	sc := c.NewSubChannel("bench", ready)
	k := sc.NewSocket(channelz.SocketInfo{LastReceived: time.Now}) // rpc's links keep it
	defer k.Close()
	b.ReportAllocs()
	for b.Loop() {
		c.Calls.Start()
		now := time.Now().UnixNano()
		sc.Calls.StartAt(now)
		k.StreamStartedAt(true, now)
		k.MessageSent()
		k.MessageReceived()
		k.StreamEnded(true)
		sc.Calls.End(true)
		c.Calls.End(true)
	}
}
