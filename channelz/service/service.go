package service

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/rdmarpc/rdmarpc/channelz"
	channelzpb "github.com/rdmarpc/rdmarpc/channelz/grpc_channelz_v1"
	"github.com/rdmarpc/rdmarpc/codes"
	"github.com/rdmarpc/rdmarpc/connectivity"
	"github.com/rdmarpc/rdmarpc/credentials"
	"github.com/rdmarpc/rdmarpc/rpc"
	"github.com/rdmarpc/rdmarpc/status"
)

// RegisterChannelzServiceToServer registers the channelz service with s.
func RegisterChannelzServiceToServer(s rpc.ServiceRegistrar) {
	channelzpb.RegisterChannelzServer(s, server{})
}

// maxPage bounds what a request may ask for in one page: the registry
// allocates for what it holds, not for the number asked, but an int64
// must fit an int.
const maxPage = 1 << 20

func pageSize(n int64) int { return int(min(n, maxPage)) }

type server struct {
	channelzpb.UnimplementedChannelzServer
}

func (server) GetTopChannels(_ context.Context, req *channelzpb.GetTopChannelsRequest) (*channelzpb.GetTopChannelsResponse, error) {
	chs, end := channelz.TopChannels(req.GetStartChannelId(), pageSize(req.GetMaxResults()))
	resp := &channelzpb.GetTopChannelsResponse{End: end}
	for _, c := range chs {
		resp.Channel = append(resp.Channel, channelProto(c))
	}
	return resp, nil
}

func (server) GetServers(_ context.Context, req *channelzpb.GetServersRequest) (*channelzpb.GetServersResponse, error) {
	srvs, end := channelz.Servers(req.GetStartServerId(), pageSize(req.GetMaxResults()))
	resp := &channelzpb.GetServersResponse{End: end}
	for _, s := range srvs {
		resp.Server = append(resp.Server, serverProto(s))
	}
	return resp, nil
}

func (server) GetServer(_ context.Context, req *channelzpb.GetServerRequest) (*channelzpb.GetServerResponse, error) {
	s := channelz.GetServer(req.GetServerId())
	if s == nil {
		return nil, status.Errorf(codes.NotFound, "requested server %d not found", req.GetServerId())
	}
	return &channelzpb.GetServerResponse{Server: serverProto(s)}, nil
}

func (server) GetServerSockets(_ context.Context, req *channelzpb.GetServerSocketsRequest) (*channelzpb.GetServerSocketsResponse, error) {
	s := channelz.GetServer(req.GetServerId())
	if s == nil {
		return nil, status.Errorf(codes.NotFound, "requested server %d not found", req.GetServerId())
	}
	socks, end := s.Sockets(req.GetStartSocketId(), pageSize(req.GetMaxResults()))
	return &channelzpb.GetServerSocketsResponse{SocketRef: socketRefs(socks), End: end}, nil
}

func (server) GetChannel(_ context.Context, req *channelzpb.GetChannelRequest) (*channelzpb.GetChannelResponse, error) {
	c := channelz.GetChannel(req.GetChannelId())
	if c == nil {
		return nil, status.Errorf(codes.NotFound, "requested channel %d not found", req.GetChannelId())
	}
	return &channelzpb.GetChannelResponse{Channel: channelProto(c)}, nil
}

func (server) GetSubchannel(_ context.Context, req *channelzpb.GetSubchannelRequest) (*channelzpb.GetSubchannelResponse, error) {
	s := channelz.GetSubChannel(req.GetSubchannelId())
	if s == nil {
		return nil, status.Errorf(codes.NotFound, "requested sub channel %d not found", req.GetSubchannelId())
	}
	return &channelzpb.GetSubchannelResponse{Subchannel: &channelzpb.Subchannel{
		Ref:       &channelzpb.SubchannelRef{SubchannelId: s.ID(), Name: s.Name()},
		Data:      channelData(s.State(), s.Name(), s.Created(), s.Calls.Counts()),
		SocketRef: socketRefs(s.Sockets()),
	}}, nil
}

func (server) GetSocket(_ context.Context, req *channelzpb.GetSocketRequest) (*channelzpb.GetSocketResponse, error) {
	k := channelz.GetSocket(req.GetSocketId())
	if k == nil {
		return nil, status.Errorf(codes.NotFound, "requested socket %d not found", req.GetSocketId())
	}
	return &channelzpb.GetSocketResponse{Socket: socketProto(k, req.GetSummary())}, nil
}

func channelProto(c *channelz.Channel) *channelzpb.Channel {
	ch := &channelzpb.Channel{
		Ref:  &channelzpb.ChannelRef{ChannelId: c.ID(), Name: c.Target()},
		Data: channelData(c.State(), c.Target(), c.Created(), c.Calls.Counts()),
	}
	for _, s := range c.SubChannels() {
		ch.SubchannelRef = append(ch.SubchannelRef, &channelzpb.SubchannelRef{SubchannelId: s.ID(), Name: s.Name()})
	}
	return ch
}

func channelData(st connectivity.State, target string, created time.Time, calls channelz.CallCounts) *channelzpb.ChannelData {
	return &channelzpb.ChannelData{
		State:                    &channelzpb.ChannelConnectivityState{State: stateProto(st)},
		Target:                   target,
		Trace:                    &channelzpb.ChannelTrace{CreationTimestamp: timestamppb.New(created)},
		CallsStarted:             calls.Started,
		CallsSucceeded:           calls.Succeeded,
		CallsFailed:              calls.Failed,
		LastCallStartedTimestamp: timestamp(calls.LastStarted),
	}
}

func stateProto(s connectivity.State) channelzpb.ChannelConnectivityState_State {
	switch s {
	case connectivity.Idle:
		return channelzpb.ChannelConnectivityState_IDLE
	case connectivity.Connecting:
		return channelzpb.ChannelConnectivityState_CONNECTING
	case connectivity.Ready:
		return channelzpb.ChannelConnectivityState_READY
	case connectivity.TransientFailure:
		return channelzpb.ChannelConnectivityState_TRANSIENT_FAILURE
	case connectivity.Shutdown:
		return channelzpb.ChannelConnectivityState_SHUTDOWN
	}
	return channelzpb.ChannelConnectivityState_UNKNOWN
}

func serverProto(s *channelz.Server) *channelzpb.Server {
	calls := s.Calls.Counts()
	return &channelzpb.Server{
		Ref: &channelzpb.ServerRef{ServerId: s.ID(), Name: s.Name()},
		Data: &channelzpb.ServerData{
			Trace:                    &channelzpb.ChannelTrace{CreationTimestamp: timestamppb.New(s.Created())},
			CallsStarted:             calls.Started,
			CallsSucceeded:           calls.Succeeded,
			CallsFailed:              calls.Failed,
			LastCallStartedTimestamp: timestamp(calls.LastStarted),
		},
		ListenSocket: socketRefs(s.ListenSockets()),
	}
}

func socketRefs(socks []*channelz.Socket) []*channelzpb.SocketRef {
	refs := make([]*channelzpb.SocketRef, len(socks))
	for i, k := range socks {
		refs[i] = &channelzpb.SocketRef{SocketId: k.ID(), Name: k.Name()}
	}
	return refs
}

// socketProto is k's data. Its options name its transport ("transport")
// and hold the transport's own counters (RDMA's), each by its name; a
// summary leaves them and the security out.
func socketProto(k *channelz.Socket, summary bool) *channelzpb.Socket {
	m := k.Metrics()
	info := k.Info()
	sock := &channelzpb.Socket{
		Ref: &channelzpb.SocketRef{SocketId: k.ID(), Name: k.Name()},
		Data: &channelzpb.SocketData{
			StreamsStarted:                   m.StreamsStarted,
			StreamsSucceeded:                 m.StreamsSucceeded,
			StreamsFailed:                    m.StreamsFailed,
			MessagesSent:                     m.MessagesSent,
			MessagesReceived:                 m.MessagesReceived,
			KeepAlivesSent:                   m.KeepalivesSent,
			LastLocalStreamCreatedTimestamp:  timestamp(m.LastLocalStreamCreated),
			LastRemoteStreamCreatedTimestamp: timestamp(m.LastRemoteStreamCreated),
			LastMessageSentTimestamp:         timestamp(m.LastMessageSent),
			LastMessageReceivedTimestamp:     timestamp(m.LastMessageReceived),
		},
		Local:  address(info.Local),
		Remote: address(info.Remote),
	}
	if summary {
		return sock
	}
	sock.Data.Option = append(sock.Data.Option, &channelzpb.SocketOption{Name: "transport", Value: info.Transport})
	names := make([]string, 0, len(m.Counters))
	for name := range m.Counters {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		sock.Data.Option = append(sock.Data.Option, &channelzpb.SocketOption{Name: info.Transport + "." + name, Value: strconv.FormatUint(m.Counters[name], 10)})
	}
	sock.Security = security(info.AuthInfo)
	return sock
}

func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func address(a net.Addr) *channelzpb.Address {
	switch a := a.(type) {
	case nil:
		return nil
	case *net.TCPAddr:
		ip := a.IP
		if ip4 := ip.To4(); ip4 != nil {
			ip = ip4
		}
		return &channelzpb.Address{Address: &channelzpb.Address_TcpipAddress{TcpipAddress: &channelzpb.Address_TcpIpAddress{IpAddress: ip, Port: int32(a.Port)}}}
	case *net.UnixAddr:
		return &channelzpb.Address{Address: &channelzpb.Address_UdsAddress_{UdsAddress: &channelzpb.Address_UdsAddress{Filename: a.Name}}}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		// An address of another type that holds an IP and a port (rdma's
		// is its TCP bootstrap's).
		return address(net.TCPAddrFromAddrPort(ap))
	}
	return &channelzpb.Address{Address: &channelzpb.Address_OtherAddress_{OtherAddress: &channelzpb.Address_OtherAddress{Name: a.Network() + ":" + a.String()}}}
}

func security(ai credentials.AuthInfo) *channelzpb.Security {
	switch ai := ai.(type) {
	case nil:
		return nil
	case credentials.TLSInfo:
		t := &channelzpb.Security_Tls{}
		if name := tls.CipherSuiteName(ai.State.CipherSuite); ai.State.CipherSuite != 0 {
			t.CipherSuite = &channelzpb.Security_Tls_StandardName{StandardName: name}
		}
		if len(ai.State.PeerCertificates) > 0 {
			t.RemoteCertificate = ai.State.PeerCertificates[0].Raw
		}
		return &channelzpb.Security{Model: &channelzpb.Security_Tls_{Tls: t}}
	}
	if ai.AuthType() == "insecure" {
		return nil
	}
	return &channelzpb.Security{Model: &channelzpb.Security_Other{Other: &channelzpb.Security_OtherSecurity{Name: ai.AuthType()}}}
}
