package verbs

import "fmt"

// WorkCompletion is one completion polled from a CQ: a compact copy of the
// fields of struct ibv_wc that rdmarpc uses.
//
// When Status is not WCSuccess only ID, Status, QPNum and VendorErr are
// meaningful. Its layout is shared with C (struct rr_wc in shim.h); do not
// reorder the fields.
type WorkCompletion struct {
	ID        uint64   // the work request's ID
	Status    WCStatus // WCSuccess or why it failed
	Opcode    WCOpcode // what completed
	ByteLen   uint32   // bytes received (receive completions)
	Imm       uint32   // immediate data in host byte order, when HasImm
	QPNum     uint32   // the local QP the work request was posted on
	VendorErr uint32   // device-specific detail of a failure
	HasImm    bool     // the message carried immediate data
	_         [7]byte
}

// Err returns nil for a successful completion, otherwise a *WCError.
func (wc *WorkCompletion) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &WCError{ID: wc.ID, QPNum: wc.QPNum, Status: wc.Status, VendorErr: wc.VendorErr}
}

// WCError is a failed work completion.
type WCError struct {
	ID        uint64
	QPNum     uint32
	Status    WCStatus
	VendorErr uint32
}

func (e *WCError) Error() string {
	return fmt.Sprintf("rdma: work request %d on QP %d failed: %v (vendor_err 0x%x)",
		e.ID, e.QPNum, e.Status, e.VendorErr)
}

// WCStatus is a work completion status (enum ibv_wc_status).
type WCStatus uint32

// Work completion statuses.
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRdReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
	WCTMErr
	WCTMRndvIncomplete
)

var wcStatusText = [...]struct{ name, desc string }{
	WCSuccess:          {"IBV_WC_SUCCESS", "success"},
	WCLocLenErr:        {"IBV_WC_LOC_LEN_ERR", "local length error"},
	WCLocQPOpErr:       {"IBV_WC_LOC_QP_OP_ERR", "local QP operation error"},
	WCLocEECOpErr:      {"IBV_WC_LOC_EEC_OP_ERR", "local EE context operation error"},
	WCLocProtErr:       {"IBV_WC_LOC_PROT_ERR", "local protection error"},
	WCWRFlushErr:       {"IBV_WC_WR_FLUSH_ERR", "Work Request Flushed Error"},
	WCMWBindErr:        {"IBV_WC_MW_BIND_ERR", "memory management operation error"},
	WCBadRespErr:       {"IBV_WC_BAD_RESP_ERR", "bad response error"},
	WCLocAccessErr:     {"IBV_WC_LOC_ACCESS_ERR", "local access error"},
	WCRemInvReqErr:     {"IBV_WC_REM_INV_REQ_ERR", "remote invalid request error"},
	WCRemAccessErr:     {"IBV_WC_REM_ACCESS_ERR", "remote access error"},
	WCRemOpErr:         {"IBV_WC_REM_OP_ERR", "remote operation error"},
	WCRetryExcErr:      {"IBV_WC_RETRY_EXC_ERR", "transport retry counter exceeded"},
	WCRNRRetryExcErr:   {"IBV_WC_RNR_RETRY_EXC_ERR", "RNR retry counter exceeded"},
	WCLocRDDViolErr:    {"IBV_WC_LOC_RDD_VIOL_ERR", "local RDD violation error"},
	WCRemInvRdReqErr:   {"IBV_WC_REM_INV_RD_REQ_ERR", "remote invalid RD request"},
	WCRemAbortErr:      {"IBV_WC_REM_ABORT_ERR", "aborted error"},
	WCInvEECNErr:       {"IBV_WC_INV_EECN_ERR", "invalid EE context number"},
	WCInvEECStateErr:   {"IBV_WC_INV_EEC_STATE_ERR", "invalid EE context state"},
	WCFatalErr:         {"IBV_WC_FATAL_ERR", "fatal error"},
	WCRespTimeoutErr:   {"IBV_WC_RESP_TIMEOUT_ERR", "response timeout error"},
	WCGeneralErr:       {"IBV_WC_GENERAL_ERR", "general error"},
	WCTMErr:            {"IBV_WC_TM_ERR", "TM error"},
	WCTMRndvIncomplete: {"IBV_WC_TM_RNDV_INCOMPLETE", "TM software rendezvous"},
}

// String returns the status's name and meaning, for example
// "IBV_WC_RNR_RETRY_EXC_ERR: RNR retry counter exceeded".
func (s WCStatus) String() string {
	if int(s) < len(wcStatusText) {
		t := wcStatusText[s]
		return t.name + ": " + t.desc
	}
	return fmt.Sprintf("IBV_WC_STATUS(%d): unknown status", uint32(s))
}

// WCOpcode says what a work completion completed (enum ibv_wc_opcode).
type WCOpcode uint32

// Work completion opcodes; receive opcodes have the WCRecv bit set.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCTSO             WCOpcode = 7
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

// IsRecv reports whether the completion is for a receive work request.
func (o WCOpcode) IsRecv() bool { return o&WCRecv != 0 }

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCTSO:
		return "TSO"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint32(o))
}
