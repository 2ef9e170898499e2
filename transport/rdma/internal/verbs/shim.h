// The C side of package verbs: every verb that is a macro or a static inline
// function in <infiniband/verbs.h> (cgo cannot call those), and the batch
// wrappers that let one cgo crossing post or poll many work requests.
//
// Nothing here keeps a pointer to Go memory after it returns: the rr_*_wr and
// rr_wc arrays live in Go memory only for the duration of the call.
//
// Included by the cgo files of the package; every function is static.

#ifndef RDMARPC_VERBS_SHIM_H
#define RDMARPC_VERBS_SHIM_H

#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>

// How many work requests or completions one inner verb call handles: the
// ibv_send_wr/ibv_sge/ibv_wc scratch arrays live on the C stack.
#define RR_CHUNK 32

// Flags of rr_send_wr.flags.
#define RR_SIGNALED 1u
#define RR_INLINE 2u
#define RR_IMM 4u
#define RR_SOLICITED 8u
#define RR_NOSGE 16u // no scatter/gather entry: a zero-length message

// rr_send_wr and rr_recv_wr are the compact forms Go fills in (see
// cSendWR/cRecvWR in qp.go); addr and lkey are resolved from the MR in Go.
struct rr_send_wr {
	uint64_t id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
	uint32_t imm; // host byte order
	uint32_t flags;
};

struct rr_recv_wr {
	uint64_t id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

// rr_wc has exactly the layout of the Go type WorkCompletion (asserted at
// compile time in cq.go), so rr_poll_cq writes straight into a Go slice.
struct rr_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t imm; // host byte order
	uint32_t qp_num;
	uint32_t vendor_err;
	uint8_t has_imm;
	uint8_t pad[7];
};

static int rr_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr) {
	return ibv_query_port(ctx, port, attr);
}

static int rr_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *out) {
	union ibv_gid gid;
	int rc = ibv_query_gid(ctx, port, index, &gid);
	if (rc == 0)
		memcpy(out, gid.raw, 16);
	return rc;
}

static uint64_t rr_be64toh(uint64_t v) { return be64toh(v); }

static uint64_t rr_device_guid(struct ibv_device *dev) {
	return be64toh(ibv_get_device_guid(dev));
}

// rr_set_nonblock makes fd non-blocking so that ibv_get_cq_event and
// ibv_get_async_event return EAGAIN instead of blocking an OS thread; Go
// waits for readability through its netpoller instead. Returns a dup of fd
// (close-on-exec) for Go to own, or -1 with errno set.
static int rr_nonblock_dup(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

static struct ibv_mr *rr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

// rr_create_cq stores handle (a runtime/cgo.Handle of the Go *CQ) as the
// CQ's context, so a completion event can be mapped back to the Go object.
static struct ibv_cq *rr_create_cq(struct ibv_context *ctx, int cqe, uintptr_t handle,
                                   struct ibv_comp_channel *ch) {
	return ibv_create_cq(ctx, cqe, (void *)handle, ch, 0);
}

static int rr_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	return ibv_req_notify_cq(cq, solicited_only);
}

// rr_get_cq_event reads one completion event; -1 with errno EAGAIN when
// there is none yet (the channel fd is non-blocking).
static int rr_get_cq_event(struct ibv_comp_channel *ch, uintptr_t *handle) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return -1;
	*handle = (uintptr_t)ctx;
	return 0;
}

// rr_get_async_event reads and acknowledges one async event, copying what
// Go needs first (an unacknowledged QP event would block ibv_destroy_qp).
static int rr_get_async_event(struct ibv_context *ctx, uint32_t *type, uint32_t *qp_num,
                              uint32_t *port) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		return -1;
	*type = ev.event_type;
	*qp_num = 0;
	*port = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qp_num = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		*port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

// rr_poll_cq polls up to n completions into out, RR_CHUNK at a time, and
// stops early when the CQ runs dry. Returns how many were written, or a
// negative value if the very first poll failed.
static int rr_poll_cq(struct ibv_cq *cq, struct rr_wc *out, int n) {
	struct ibv_wc wc[RR_CHUNK];
	int total = 0;
	while (total < n) {
		int want = n - total < RR_CHUNK ? n - total : RR_CHUNK;
		int got = ibv_poll_cq(cq, want, wc);
		if (got < 0)
			return total > 0 ? total : got; // report the error on the next call
		for (int i = 0; i < got; i++) {
			struct rr_wc *o = &out[total + i];
			o->wr_id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->byte_len = wc[i].byte_len;
			o->has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
			o->imm = o->has_imm ? ntohl(wc[i].imm_data) : 0;
			o->qp_num = wc[i].qp_num;
			o->vendor_err = wc[i].vendor_err;
		}
		total += got;
		if (got < want)
			break;
	}
	return total;
}

// rr_post_send posts n send work requests, RR_CHUNK per ibv_post_send. On
// failure it returns the errno-style code and sets *bad to the index of the
// first request that was not posted (all before it were).
static int rr_post_send(struct ibv_qp *qp, const struct rr_send_wr *in, int n, int *bad) {
	struct ibv_send_wr wr[RR_CHUNK];
	struct ibv_sge sge[RR_CHUNK];
	for (int base = 0; base < n; base += RR_CHUNK) {
		int m = n - base < RR_CHUNK ? n - base : RR_CHUNK;
		memset(wr, 0, sizeof(wr[0]) * m);
		for (int i = 0; i < m; i++) {
			const struct rr_send_wr *w = &in[base + i];
			wr[i].wr_id = w->id;
			wr[i].next = i + 1 < m ? &wr[i + 1] : NULL;
			if (!(w->flags & RR_NOSGE)) {
				sge[i].addr = w->addr;
				sge[i].length = w->length;
				sge[i].lkey = w->lkey;
				wr[i].sg_list = &sge[i];
				wr[i].num_sge = 1;
			}
			if (w->flags & RR_IMM) {
				wr[i].opcode = IBV_WR_SEND_WITH_IMM;
				wr[i].imm_data = htonl(w->imm);
			} else {
				wr[i].opcode = IBV_WR_SEND;
			}
			if (w->flags & RR_SIGNALED)
				wr[i].send_flags |= IBV_SEND_SIGNALED;
			if (w->flags & RR_INLINE)
				wr[i].send_flags |= IBV_SEND_INLINE;
			if (w->flags & RR_SOLICITED)
				wr[i].send_flags |= IBV_SEND_SOLICITED;
		}
		struct ibv_send_wr *badwr = NULL;
		int rc = ibv_post_send(qp, wr, &badwr);
		if (rc) {
			*bad = base + (badwr ? (int)(badwr - wr) : 0);
			return rc;
		}
	}
	return 0;
}

// rr_post_recv is rr_post_send for the receive queue.
static int rr_post_recv(struct ibv_qp *qp, const struct rr_recv_wr *in, int n, int *bad) {
	struct ibv_recv_wr wr[RR_CHUNK];
	struct ibv_sge sge[RR_CHUNK];
	for (int base = 0; base < n; base += RR_CHUNK) {
		int m = n - base < RR_CHUNK ? n - base : RR_CHUNK;
		memset(wr, 0, sizeof(wr[0]) * m);
		for (int i = 0; i < m; i++) {
			const struct rr_recv_wr *w = &in[base + i];
			wr[i].wr_id = w->id;
			wr[i].next = i + 1 < m ? &wr[i + 1] : NULL;
			if (w->length > 0) {
				sge[i].addr = w->addr;
				sge[i].length = w->length;
				sge[i].lkey = w->lkey;
				wr[i].sg_list = &sge[i];
				wr[i].num_sge = 1;
			}
		}
		struct ibv_recv_wr *badwr = NULL;
		int rc = ibv_post_recv(qp, wr, &badwr);
		if (rc) {
			*bad = base + (badwr ? (int)(badwr - wr) : 0);
			return rc;
		}
	}
	return 0;
}

// rr_post_srq_recv is rr_post_recv for a shared receive queue
// (ibv_post_srq_recv is a static inline).
static int rr_post_srq_recv(struct ibv_srq *srq, const struct rr_recv_wr *in, int n, int *bad) {
	struct ibv_recv_wr wr[RR_CHUNK];
	struct ibv_sge sge[RR_CHUNK];
	for (int base = 0; base < n; base += RR_CHUNK) {
		int m = n - base < RR_CHUNK ? n - base : RR_CHUNK;
		memset(wr, 0, sizeof(wr[0]) * m);
		for (int i = 0; i < m; i++) {
			const struct rr_recv_wr *w = &in[base + i];
			wr[i].wr_id = w->id;
			wr[i].next = i + 1 < m ? &wr[i + 1] : NULL;
			if (w->length > 0) {
				sge[i].addr = w->addr;
				sge[i].length = w->length;
				sge[i].lkey = w->lkey;
				wr[i].sg_list = &sge[i];
				wr[i].num_sge = 1;
			}
		}
		struct ibv_recv_wr *badwr = NULL;
		int rc = ibv_post_srq_recv(srq, wr, &badwr);
		if (rc) {
			*bad = base + (badwr ? (int)(badwr - wr) : 0);
			return rc;
		}
	}
	return 0;
}

// rr_arm_srq sets the SRQ's limit: when fewer receives than limit are
// posted, the device raises IBV_EVENT_SRQ_LIMIT_REACHED once (and disarms).
static int rr_arm_srq(struct ibv_srq *srq, uint32_t limit) {
	struct ibv_srq_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.srq_limit = limit;
	return ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
}

static int rr_query_qp_state(struct ibv_qp *qp, uint32_t *state) {
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int rc = ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (rc == 0)
		*state = attr.qp_state;
	return rc;
}

#endif
