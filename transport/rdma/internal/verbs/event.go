package verbs

import "fmt"

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint32

// Asynchronous event types.
const (
	EventCQErr EventType = iota
	EventQPFatal
	EventQPReqErr
	EventQPAccessErr
	EventCommEst
	EventSQDrained
	EventPathMig
	EventPathMigErr
	EventDeviceFatal
	EventPortActive
	EventPortErr
	EventLIDChange
	EventPKeyChange
	EventSMChange
	EventSRQErr
	EventSRQLimitReached
	EventQPLastWQEReached
	EventClientReregister
	EventGIDChange
	EventWQFatal
)

var eventText = [...]struct{ name, desc string }{
	EventCQErr:            {"IBV_EVENT_CQ_ERR", "CQ error (overrun)"},
	EventQPFatal:          {"IBV_EVENT_QP_FATAL", "local work queue catastrophic error"},
	EventQPReqErr:         {"IBV_EVENT_QP_REQ_ERR", "invalid request local work queue error"},
	EventQPAccessErr:      {"IBV_EVENT_QP_ACCESS_ERR", "local access violation work queue error"},
	EventCommEst:          {"IBV_EVENT_COMM_EST", "communication established"},
	EventSQDrained:        {"IBV_EVENT_SQ_DRAINED", "send queue drained"},
	EventPathMig:          {"IBV_EVENT_PATH_MIG", "path migrated"},
	EventPathMigErr:       {"IBV_EVENT_PATH_MIG_ERR", "path migration request error"},
	EventDeviceFatal:      {"IBV_EVENT_DEVICE_FATAL", "local catastrophic error"},
	EventPortActive:       {"IBV_EVENT_PORT_ACTIVE", "port active"},
	EventPortErr:          {"IBV_EVENT_PORT_ERR", "port error"},
	EventLIDChange:        {"IBV_EVENT_LID_CHANGE", "LID change"},
	EventPKeyChange:       {"IBV_EVENT_PKEY_CHANGE", "P_Key change"},
	EventSMChange:         {"IBV_EVENT_SM_CHANGE", "SM change"},
	EventSRQErr:           {"IBV_EVENT_SRQ_ERR", "SRQ catastrophic error"},
	EventSRQLimitReached:  {"IBV_EVENT_SRQ_LIMIT_REACHED", "SRQ limit reached"},
	EventQPLastWQEReached: {"IBV_EVENT_QP_LAST_WQE_REACHED", "last WQE reached on a QP of an SRQ"},
	EventClientReregister: {"IBV_EVENT_CLIENT_REREGISTER", "client reregistration"},
	EventGIDChange:        {"IBV_EVENT_GID_CHANGE", "GID table change"},
	EventWQFatal:          {"IBV_EVENT_WQ_FATAL", "WQ fatal"},
}

// String returns the event's name and meaning, for example
// "IBV_EVENT_PORT_ERR: port error".
func (t EventType) String() string {
	if int(t) < len(eventText) {
		e := eventText[t]
		return e.name + ": " + e.desc
	}
	return fmt.Sprintf("IBV_EVENT(%d): unknown event", uint32(t))
}

// AsyncEvent is an asynchronous event of a device, already acknowledged.
type AsyncEvent struct {
	Type  EventType
	QPNum uint32 // the QP concerned, for QP events (QPFatal, CommEst, ...)
	Port  uint8  // the port concerned, for port events (PortActive, PortErr, GIDChange, ...)
}

func (e AsyncEvent) String() string {
	switch {
	case e.QPNum != 0:
		return fmt.Sprintf("%v (QP %d)", e.Type, e.QPNum)
	case e.Port != 0:
		return fmt.Sprintf("%v (port %d)", e.Type, e.Port)
	}
	return e.Type.String()
}
