// The C side of package verbs, and the only place that knows libibverbs'
// types: Go sees the opaque handles (struct ibv_context * ...), the compact
// rr_* structs below, and the rr_* functions.
//
// The data path (rr_poll_cq, rr_post_send, rr_post_recv, rr_post_srq_recv,
// rr_req_notify_cq) is here, static: the verbs it calls are static inline
// functions of <infiniband/verbs.h> that jump through the provider's ops
// table, so one cgo crossing posts or polls a whole batch and reaches the
// provider without another call. Everything else is in shim.c, which calls
// libibverbs' exported functions through pointers it looks up when the
// library is loaded at run time (rr_load: dlopen of libibverbs.so.1): the
// binary does not link libibverbs, so it builds without its -dev package's
// libibverbs.so and runs where libibverbs is not installed.
//
// Without <infiniband/verbs.h> (libibverbs-dev not installed) the same
// declarations stand, the handles are incomplete types, and every function
// fails: rr_load reports RR_LOAD_NO_HEADERS, so no handle ever exists and
// the data path below is never reached.
//
// Nothing here keeps a pointer to Go memory after it returns: the rr_*_wr and
// rr_wc arrays live in Go memory only for the duration of the call.

#ifndef RDMARPC_VERBS_SHIM_H
#define RDMARPC_VERBS_SHIM_H

#if defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#define RR_HAVE_VERBS 1
#endif
#endif

#ifdef RR_HAVE_VERBS
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#else
struct ibv_device;
struct ibv_context;
struct ibv_comp_channel;
struct ibv_cq;
struct ibv_pd;
struct ibv_mr;
struct ibv_qp;
struct ibv_srq;
struct ibv_mw;
#endif
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// What rr_load returns.
#define RR_LOAD_OK 0
#define RR_LOAD_NO_HEADERS 1 // built without <infiniband/verbs.h>
#define RR_LOAD_NO_LIBRARY 2 // libibverbs.so.1 (or a symbol in it) is missing

// How many work requests or completions one inner verb call handles: the
// ibv_send_wr/ibv_sge/ibv_wc scratch arrays live on the C stack.
#define RR_CHUNK 32

// Flags of rr_send_wr.flags.
#define RR_SIGNALED 1u
#define RR_INLINE 2u
#define RR_IMM 4u
#define RR_SOLICITED 8u
#define RR_NOSGE 16u // no scatter/gather entry: a zero-length message
#define RR_READ 32u  // an RDMA Read from remote_addr/rkey into the local sge
// RR_BIND binds the type 2 memory window mw to bind_len bytes at
// remote_addr of the MR bind_mr, readable by the peer with the new key rkey;
// RR_LOCAL_INV invalidates the window key rkey.
#define RR_BIND 64u
#define RR_LOCAL_INV 128u

// rr_send_wr and rr_recv_wr are the compact forms Go fills in (see
// PostSend/PostRecv in qp.go); addr and lkey are resolved from the MR in Go.
struct rr_send_wr {
	uint64_t id;
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
	uint32_t imm; // host byte order
	uint32_t flags;
	uint64_t remote_addr; // RR_READ, RR_BIND
	uint32_t rkey;        // RR_READ, RR_BIND (the new key), RR_LOCAL_INV
	uint32_t pad;
	uint64_t bind_len; // RR_BIND
	// RR_BIND: the window and the MR, as integers. The struct holds no
	// pointer type, so cgo's pointer check, which walks every element
	// of the batch array Go passes for each pointer field it finds, has
	// nothing to walk (it was 8 % of a 64 B round trip's CPU).
	uintptr_t mw;
	uintptr_t bind_mr;
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

// rr_device_attr is what QueryDevice reports of struct ibv_device_attr
// (GUIDs in host byte order).
struct rr_device_attr {
	char fw_ver[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint64_t max_mr_size;
	uint64_t page_size_cap;
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	uint32_t device_cap_flags;
	int32_t max_qp;
	int32_t max_qp_wr;
	int32_t max_sge;
	int32_t max_cq;
	int32_t max_cqe;
	int32_t max_mr;
	int32_t max_pd;
	int32_t max_qp_rd_atom;
	int32_t max_qp_init_rd_atom;
	int32_t max_srq;
	int32_t max_srq_wr;
	uint8_t phys_port_cnt;
};

// rr_port_attr is what QueryPort reports of struct ibv_port_attr (the MTUs
// as enum ibv_mtu values).
struct rr_port_attr {
	uint32_t state;
	uint32_t max_mtu;
	uint32_t active_mtu;
	int32_t gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
	uint8_t link_layer;
};

// rr_qp_caps are a QP's queue sizes: asked for by rr_create_qp's caller,
// and what the device granted when it returns.
struct rr_qp_caps {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};

// rr_rtr is the INIT to RTR transition's attributes (path_mtu an enum
// ibv_mtu value; dgid used when global is set).
struct rr_rtr {
	uint32_t path_mtu;
	uint32_t dest_qpn;
	uint32_t rq_psn;
	uint16_t dlid;
	uint8_t port;
	uint8_t min_rnr_timer;
	uint8_t global;
	uint8_t sgid_index;
	uint8_t dgid[16];
	uint8_t max_dest_rd_atomic; // RDMA Reads the peer may have outstanding at us (0: none)
};

// rr_rts is the RTR to RTS transition's attributes.
struct rr_rts {
	uint32_t sq_psn;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t max_rd_atomic; // RDMA Reads we may have outstanding (0: none)
};

// shim.c: loading, devices, objects, transitions, events. Each returns what
// its verb returns (NULL or non-zero on failure, errno set as the verb set
// it).
int rr_load(char *msg, int n);
struct ibv_device **rr_get_device_list(int *n);
void rr_free_device_list(struct ibv_device **list);
const char *rr_device_name(struct ibv_device *dev);
const char *rr_device_node_type(struct ibv_device *dev);
uint64_t rr_device_guid(struct ibv_device *dev);
struct ibv_context *rr_open_device(struct ibv_device *dev, int *async_fd);
int rr_close_device(struct ibv_context *ctx);
int rr_query_device(struct ibv_context *ctx, struct rr_device_attr *out);
int rr_query_port(struct ibv_context *ctx, uint8_t port, struct rr_port_attr *out);
int rr_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *out);
int rr_get_async_event(struct ibv_context *ctx, uint32_t *type, uint32_t *qp_num, uint32_t *port);
int rr_nonblock_dup(int fd);
struct ibv_pd *rr_alloc_pd(struct ibv_context *ctx);
int rr_dealloc_pd(struct ibv_pd *pd);
// rr_reg_mr's access: RR_MR_LOCAL, RR_MR_REMOTE_READ, RR_MR_BIND.
#define RR_MR_LOCAL 0
#define RR_MR_REMOTE_READ 1
#define RR_MR_BIND 2 // local write and memory-window binding, no remote access of its own
struct ibv_mr *rr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, uint32_t *lkey,
                         uint32_t *rkey);
int rr_dereg_mr(struct ibv_mr *mr);
struct ibv_comp_channel *rr_create_comp_channel(struct ibv_context *ctx, int *fd);
int rr_destroy_comp_channel(struct ibv_comp_channel *ch);
struct ibv_cq *rr_create_cq(struct ibv_context *ctx, int cqe, uintptr_t handle,
                            struct ibv_comp_channel *ch, int *size);
int rr_destroy_cq(struct ibv_cq *cq);
int rr_get_cq_event(struct ibv_comp_channel *ch, uintptr_t *handle);
void rr_ack_cq_events(struct ibv_cq *cq, unsigned int n);
struct ibv_qp *rr_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                            struct ibv_srq *srq, struct rr_qp_caps *caps, uint32_t *qp_num);
int rr_qp_to_init(struct ibv_qp *qp, uint8_t port, int remote_read);
int rr_qp_to_rtr(struct ibv_qp *qp, const struct rr_rtr *a);
int rr_qp_to_rts(struct ibv_qp *qp, const struct rr_rts *a);
int rr_qp_to_state(struct ibv_qp *qp, uint32_t state);
int rr_query_qp_state(struct ibv_qp *qp, uint32_t *state);
int rr_destroy_qp(struct ibv_qp *qp);
struct ibv_srq *rr_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t *granted);
int rr_arm_srq(struct ibv_srq *srq, uint32_t limit);
int rr_destroy_srq(struct ibv_srq *srq);

#ifdef RR_HAVE_VERBS

// The data path.

static int rr_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
	return ibv_req_notify_cq(cq, solicited_only);
}

// rr_alloc_mw allocates a type 2 memory window (ibv_alloc_mw is a static
// inline through the provider's ops); *rkey is its key, bound to nothing.
static struct ibv_mw *rr_alloc_mw(struct ibv_pd *pd, uint32_t *rkey) {
	errno = 0;
	struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	if (mw)
		*rkey = mw->rkey;
	else if (errno == 0)
		errno = EOPNOTSUPP;
	return mw;
}

static int rr_dealloc_mw(struct ibv_mw *mw) { return ibv_dealloc_mw(mw); }

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
			if (w->flags & RR_BIND) {
				wr[i].opcode = IBV_WR_BIND_MW;
				wr[i].bind_mw.mw = (struct ibv_mw *)w->mw;
				wr[i].bind_mw.rkey = w->rkey;
				wr[i].bind_mw.bind_info.mr = (struct ibv_mr *)w->bind_mr;
				wr[i].bind_mw.bind_info.addr = w->remote_addr;
				wr[i].bind_mw.bind_info.length = w->bind_len;
				wr[i].bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
			} else if (w->flags & RR_LOCAL_INV) {
				wr[i].opcode = IBV_WR_LOCAL_INV;
				wr[i].invalidate_rkey = w->rkey;
			} else if (w->flags & RR_READ) {
				wr[i].opcode = IBV_WR_RDMA_READ;
				wr[i].wr.rdma.remote_addr = w->remote_addr;
				wr[i].wr.rdma.rkey = w->rkey;
			} else if (w->flags & RR_IMM) {
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
		int posted = rc ? (badwr ? (int)(badwr - wr) : 0) : m;
		// A type 2 window's next bind names it by its current key: the
		// provider (rxe) takes it from mw->rkey and does not update it.
		for (int i = 0; i < posted; i++)
			if (wr[i].opcode == IBV_WR_BIND_MW)
				wr[i].bind_mw.mw->rkey = wr[i].bind_mw.rkey;
		if (rc) {
			*bad = base + posted;
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

#else // !RR_HAVE_VERBS: never reached (no handle exists), but Go calls them.

static int rr_req_notify_cq(struct ibv_cq *cq, int solicited_only) { return ENOSYS; }
static struct ibv_mw *rr_alloc_mw(struct ibv_pd *pd, uint32_t *rkey) {
	errno = ENOSYS;
	return NULL;
}
static int rr_dealloc_mw(struct ibv_mw *mw) { return ENOSYS; }
static int rr_poll_cq(struct ibv_cq *cq, struct rr_wc *out, int n) { return -ENOSYS; }
static int rr_post_send(struct ibv_qp *qp, const struct rr_send_wr *in, int n, int *bad) {
	*bad = 0;
	return ENOSYS;
}
static int rr_post_recv(struct ibv_qp *qp, const struct rr_recv_wr *in, int n, int *bad) {
	*bad = 0;
	return ENOSYS;
}
static int rr_post_srq_recv(struct ibv_srq *srq, const struct rr_recv_wr *in, int n, int *bad) {
	*bad = 0;
	return ENOSYS;
}

#endif // RR_HAVE_VERBS

#endif
