package verbs

import (
	"fmt"
	"net"
)

// GID is a port's 128-bit global identifier: for RoCE the IPv6 address (or
// IPv4-mapped IPv6 address) the port sends from.
type GID [16]byte

// String formats the GID as an IPv6 address (IPv4-mapped GIDs print as IPv4).
func (g GID) String() string { return net.IP(g[:]).String() }

// IsZero reports whether g is the all-zero (unset) GID.
func (g GID) IsZero() bool { return g == GID{} }

// GUID is a 64-bit globally unique identifier (node, system image), in host
// byte order.
type GUID uint64

// String formats the GUID the way ibv_devinfo does: "0123:4567:89ab:cdef".
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// DeviceInfo describes a device found by Devices, before it is opened.
type DeviceInfo struct {
	Name     string // "rxe0", "mlx5_0"
	GUID     GUID   // node GUID
	NodeType string // "InfiniBand channel adapter", "iWARP NIC", ...
}

// DeviceAttr holds the limits of an opened device (ibv_query_device).
type DeviceAttr struct {
	FWVersion       string
	NodeGUID        GUID
	SysImageGUID    GUID
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32
	VendorPartID    uint32
	HWVersion       uint32
	MaxQP           int
	MaxQPWR         int // work requests per send or receive queue
	DeviceCapFlags  uint32
	MaxSGE          int
	MaxCQ           int
	MaxCQE          int
	MaxMR           int
	MaxPD           int
	MaxQPRdAtom     int
	MaxQPInitRdAtom int
	MaxSRQ          int
	MaxSRQWR        int
	PhysPortCount   int
}

// PortState is the logical state of a port (enum ibv_port_state).
type PortState uint32

// Port states.
const (
	PortNOP         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

func (s PortState) String() string {
	switch s {
	case PortNOP:
		return "NOP"
	case PortDown:
		return "DOWN"
	case PortInit:
		return "INIT"
	case PortArmed:
		return "ARMED"
	case PortActive:
		return "ACTIVE"
	case PortActiveDefer:
		return "ACTIVE_DEFER"
	}
	return fmt.Sprintf("PortState(%d)", uint32(s))
}

// LinkLayer is a port's link layer (IBV_LINK_LAYER_*).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerUnspecified:
		return "Unspecified"
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return fmt.Sprintf("LinkLayer(%d)", uint8(l))
}

// PortAttr is what ibv_query_port says about a port. MTUs are in bytes.
type PortAttr struct {
	State        PortState
	MaxMTU       int // bytes
	ActiveMTU    int // bytes
	GIDTableLen  int
	PortCapFlags uint32
	MaxMsgSize   uint32
	LID          uint16
	SMLID        uint16
	LMC          uint8
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    uint8
	LinkLayer    LinkLayer
}

// mtuToEnum converts an MTU in bytes to enum ibv_mtu (1..5).
func mtuToEnum(bytes int) (uint32, error) {
	switch bytes {
	case 256:
		return 1, nil
	case 512:
		return 2, nil
	case 1024:
		return 3, nil
	case 2048:
		return 4, nil
	case 4096:
		return 5, nil
	}
	return 0, fmt.Errorf("rdma: path MTU %d is not one of 256, 512, 1024, 2048, 4096", bytes)
}

// mtuFromEnum converts enum ibv_mtu to bytes (0 for an unknown value).
func mtuFromEnum(e uint32) int {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e
}

// QPState is the state of a queue pair (enum ibv_qp_state).
type QPState uint32

// Queue pair states.
const (
	QPReset   QPState = 0
	QPInit    QPState = 1
	QPRTR     QPState = 2
	QPRTS     QPState = 3
	QPSQD     QPState = 4
	QPSQE     QPState = 5
	QPError   QPState = 6
	QPUnknown QPState = 7
)

func (s QPState) String() string {
	switch s {
	case QPReset:
		return "RESET"
	case QPInit:
		return "INIT"
	case QPRTR:
		return "RTR"
	case QPRTS:
		return "RTS"
	case QPSQD:
		return "SQD"
	case QPSQE:
		return "SQE"
	case QPError:
		return "ERR"
	case QPUnknown:
		return "UNKNOWN"
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPConfig sizes a reliable-connected queue pair. Zero SGE counts mean 1.
// MaxInlineData is a request: the device may grant more or refuse, see
// QP.MaxInline.
type QPConfig struct {
	SendCQ, RecvCQ *CQ // may be the same CQ; both must belong to the PD's context
	// SRQ, when set, is where the QP takes its receives from: MaxRecvWR is
	// then ignored and QP.PostRecv refused (post to the SRQ).
	SRQ           *SRQ
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
	// RemoteRead lets the QP take part in RDMA Reads, both ways: peers may
	// read the MRs registered with RegisterRemoteRead whose rkey they hold
	// (IBV_ACCESS_REMOTE_READ on the QP, one read outstanding at us), and
	// the QP may post SendWR.Read (one read outstanding from us). Without
	// it the QP grants no remote access at all.
	RemoteRead bool
}

// RTRAttr is what a QP needs to know about its peer to receive (INIT→RTR).
//
// The address vector uses the global route header whenever DGID is set,
// which RoCE requires (hop limit 64); DLID is only for InfiniBand fabrics
// (zero on RoCE). Port 0 means the port given to ToInit.
type RTRAttr struct {
	DestQPN     uint32 // the peer's QP number
	RQPSN       uint32 // the peer's initial send PSN (24 bits)
	PathMTU     int    // bytes: 256, 512, 1024, 2048 or 4096; at most both ports' active MTU
	DGID        GID    // the peer's GID
	DLID        uint16 // the peer's LID (InfiniBand only)
	SGIDIndex   uint8  // index of our GID to send from (the RoCE v2 entry)
	Port        uint8
	MinRNRTimer uint8 // encoded IB value 0..31 (what the peer is told to wait after an RNR NAK)
}

// RTSAttr is what a QP needs to send (RTR→RTS). The RNR retry count is not
// configurable: it is always 0, so that a Send arriving when the receiver has
// no posted receive fails the connection at once (IBV_WC_RNR_RETRY_EXC_ERR)
// instead of being retried; rdmarpc's credits make that impossible, so if it
// happens it is a bug that must be seen.
type RTSAttr struct {
	SQPSN      uint32 // our initial send PSN (24 bits)
	Timeout    uint8  // local ACK timeout, encoded: 4.096 µs × 2^Timeout (0 = infinite), 0..31
	RetryCount uint8  // transport retries after a timeout, 0..7
}

// RecvWR is one receive work request: Length bytes of MR at Offset receive a
// message. MR may be nil when Length is 0 (a receive for a message with no
// payload, such as immediate data only).
type RecvWR struct {
	ID     uint64
	MR     *MR
	Offset uint32
	Length uint32
}

// SendWR is one Send (HasImm false) or Send with immediate (HasImm true) of
// Length bytes from MR at Offset. MR may be nil when Length is 0.
//
// Signaled asks for a completion (unsignaled sends complete silently, but a
// QP's send queue only frees their slots when a later signaled send
// completes). Inline copies the payload into the work request at post time
// (Length must not exceed QP.MaxInline). Solicited sets the solicited-event
// bit, which wakes a peer that armed its CQ with ReqNotify(true). Imm is in
// host byte order; it travels in network byte order.
type SendWR struct {
	ID     uint64
	MR     *MR
	Offset uint32
	Length uint32
	// Read makes it an RDMA Read of Length bytes at RemoteAddr in the
	// peer's memory named by RKey, into MR at Offset (which must be
	// registered; never inline, no immediate data). The QP needs
	// QPConfig.RemoteRead.
	Read       bool
	RemoteAddr uint64
	RKey       uint32
	// Bind makes it a bind of the type 2 memory window Bind to Length
	// bytes of MR at Offset (an MR made by RegisterForWindows), readable
	// by the peer under the new key RKey (Bind.NextRKey): valid on this
	// QP only, once the bind is done (a Send posted after it on the same
	// QP may carry the key), until an Invalidate of it.
	Bind *MW
	// Invalidate makes it a local invalidation of the window key RKey:
	// once it completes, the peer's reads with that key fail.
	Invalidate bool
	Signaled   bool
	Inline     bool
	Solicited  bool
	Imm        uint32
	HasImm     bool
}
