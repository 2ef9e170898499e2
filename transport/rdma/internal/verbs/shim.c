//go:build linux && cgo

// The cold half of the C side (see shim.h): libibverbs loaded at run time,
// and every verb outside the data path, called through the pointers rr_load
// looked up. Each rr_* function here is one verb (or two, for the
// transitions' attribute translation), so a failure's errno is the verb's.

#include "shim.h"

#include <fcntl.h>
#include <stdio.h>

#ifdef RR_HAVE_VERBS

#include <dlfcn.h>
#include <endian.h>

// The exported functions of libibverbs this package calls, each declared
// in rr_lib with the type <infiniband/verbs.h> gives it. Some names are also
// function-like macros there (ibv_reg_mr, ibv_query_port); written without
// a following parenthesis they name the exported function.
#define RR_SYMBOLS(X)                                                                              \
	X(ibv_get_device_list)                                                                     \
	X(ibv_free_device_list)                                                                    \
	X(ibv_get_device_name)                                                                     \
	X(ibv_get_device_guid)                                                                     \
	X(ibv_node_type_str)                                                                       \
	X(ibv_open_device)                                                                         \
	X(ibv_close_device)                                                                        \
	X(ibv_query_device)                                                                        \
	X(ibv_query_port)                                                                          \
	X(ibv_query_gid)                                                                           \
	X(ibv_get_async_event)                                                                     \
	X(ibv_ack_async_event)                                                                     \
	X(ibv_alloc_pd)                                                                            \
	X(ibv_dealloc_pd)                                                                          \
	X(ibv_reg_mr)                                                                              \
	X(ibv_dereg_mr)                                                                            \
	X(ibv_create_comp_channel)                                                                 \
	X(ibv_destroy_comp_channel)                                                                \
	X(ibv_create_cq)                                                                           \
	X(ibv_destroy_cq)                                                                          \
	X(ibv_get_cq_event)                                                                        \
	X(ibv_ack_cq_events)                                                                       \
	X(ibv_create_qp)                                                                           \
	X(ibv_modify_qp)                                                                           \
	X(ibv_query_qp)                                                                            \
	X(ibv_destroy_qp)                                                                          \
	X(ibv_create_srq)                                                                          \
	X(ibv_modify_srq)                                                                          \
	X(ibv_destroy_srq)

#define RR_FIELD(f) __typeof__(f) *p_##f;
static struct {
	RR_SYMBOLS(RR_FIELD)
} rr_lib;

// rr_load opens libibverbs and looks up every function above. Go calls it
// once, before any other rr_* function, and calls nothing else unless it
// returned RR_LOAD_OK. On failure msg says what is missing.
int rr_load(char *msg, int n) {
	void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(msg, n, "%s", e ? e : "dlopen libibverbs.so.1 failed");
		return RR_LOAD_NO_LIBRARY;
	}
#define RR_LOOKUP(f)                                                                               \
	rr_lib.p_##f = (__typeof__(f) *)dlsym(h, #f);                                              \
	if (!rr_lib.p_##f) {                                                                       \
		snprintf(msg, n, "libibverbs.so.1 has no %s", #f);                                 \
		dlclose(h);                                                                        \
		return RR_LOAD_NO_LIBRARY;                                                         \
	}
	RR_SYMBOLS(RR_LOOKUP)
	return RR_LOAD_OK;
}

struct ibv_device **rr_get_device_list(int *n) { return rr_lib.p_ibv_get_device_list(n); }

void rr_free_device_list(struct ibv_device **list) { rr_lib.p_ibv_free_device_list(list); }

const char *rr_device_name(struct ibv_device *dev) { return rr_lib.p_ibv_get_device_name(dev); }

const char *rr_device_node_type(struct ibv_device *dev) {
	return rr_lib.p_ibv_node_type_str(dev->node_type);
}

uint64_t rr_device_guid(struct ibv_device *dev) {
	return be64toh(rr_lib.p_ibv_get_device_guid(dev));
}

struct ibv_context *rr_open_device(struct ibv_device *dev, int *async_fd) {
	struct ibv_context *ctx = rr_lib.p_ibv_open_device(dev);
	if (ctx)
		*async_fd = ctx->async_fd;
	return ctx;
}

int rr_close_device(struct ibv_context *ctx) { return rr_lib.p_ibv_close_device(ctx); }

int rr_query_device(struct ibv_context *ctx, struct rr_device_attr *out) {
	struct ibv_device_attr a;
	int rc = rr_lib.p_ibv_query_device(ctx, &a);
	if (rc)
		return rc;
	_Static_assert(sizeof(out->fw_ver) == sizeof(a.fw_ver), "fw_ver sizes differ");
	memcpy(out->fw_ver, a.fw_ver, sizeof(out->fw_ver));
	out->fw_ver[sizeof(out->fw_ver) - 1] = 0;
	out->node_guid = be64toh(a.node_guid);
	out->sys_image_guid = be64toh(a.sys_image_guid);
	out->max_mr_size = a.max_mr_size;
	out->page_size_cap = a.page_size_cap;
	out->vendor_id = a.vendor_id;
	out->vendor_part_id = a.vendor_part_id;
	out->hw_ver = a.hw_ver;
	out->device_cap_flags = a.device_cap_flags;
	out->max_qp = a.max_qp;
	out->max_qp_wr = a.max_qp_wr;
	out->max_sge = a.max_sge;
	out->max_cq = a.max_cq;
	out->max_cqe = a.max_cqe;
	out->max_mr = a.max_mr;
	out->max_pd = a.max_pd;
	out->max_qp_rd_atom = a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	out->max_srq = a.max_srq;
	out->max_srq_wr = a.max_srq_wr;
	out->phys_port_cnt = a.phys_port_cnt;
	return 0;
}

// rr_query_port asks the provider's extended query_port when the context
// has one (as the header's inline ibv_query_port does), else the exported
// function, which fills the older, shorter attribute struct: every field
// copied below is in both.
int rr_query_port(struct ibv_context *ctx, uint8_t port, struct rr_port_attr *out) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof(a));
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
	int rc = vctx ? vctx->query_port(ctx, port, &a, sizeof(a))
	              : rr_lib.p_ibv_query_port(ctx, port, (struct _compat_ibv_port_attr *)&a);
	if (rc)
		return rc;
	out->state = a.state;
	out->max_mtu = a.max_mtu;
	out->active_mtu = a.active_mtu;
	out->gid_tbl_len = a.gid_tbl_len;
	out->port_cap_flags = a.port_cap_flags;
	out->max_msg_sz = a.max_msg_sz;
	out->lid = a.lid;
	out->sm_lid = a.sm_lid;
	out->lmc = a.lmc;
	out->active_width = a.active_width;
	out->active_speed = a.active_speed;
	out->phys_state = a.phys_state;
	out->link_layer = a.link_layer;
	return 0;
}

int rr_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *out) {
	union ibv_gid gid;
	int rc = rr_lib.p_ibv_query_gid(ctx, port, index, &gid);
	if (rc == 0)
		memcpy(out, gid.raw, 16);
	return rc;
}

// rr_get_async_event reads and acknowledges one async event, copying what
// Go needs first (an unacknowledged QP event would block ibv_destroy_qp).
int rr_get_async_event(struct ibv_context *ctx, uint32_t *type, uint32_t *qp_num, uint32_t *port) {
	struct ibv_async_event ev;
	if (rr_lib.p_ibv_get_async_event(ctx, &ev))
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
	rr_lib.p_ibv_ack_async_event(&ev);
	return 0;
}

struct ibv_pd *rr_alloc_pd(struct ibv_context *ctx) { return rr_lib.p_ibv_alloc_pd(ctx); }

int rr_dealloc_pd(struct ibv_pd *pd) { return rr_lib.p_ibv_dealloc_pd(pd); }

// rr_reg_mr registers memory for local writes; with RR_MR_REMOTE_READ,
// peers holding its rkey may also RDMA Read it (a rendezvous region), never
// write it (see the package doc); with RR_MR_BIND, memory windows may be
// bound to it (each grants remote read of its own range, under its own
// key), and its rkey grants nothing.
struct ibv_mr *rr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int how, uint32_t *lkey,
                         uint32_t *rkey) {
	int access = IBV_ACCESS_LOCAL_WRITE;
	if (how == RR_MR_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	else if (how == RR_MR_BIND)
		access |= IBV_ACCESS_MW_BIND;
	struct ibv_mr *mr = rr_lib.p_ibv_reg_mr(pd, addr, len, access);
	if (mr) {
		*lkey = mr->lkey;
		*rkey = mr->rkey;
	}
	return mr;
}

int rr_dereg_mr(struct ibv_mr *mr) { return rr_lib.p_ibv_dereg_mr(mr); }

struct ibv_comp_channel *rr_create_comp_channel(struct ibv_context *ctx, int *fd) {
	struct ibv_comp_channel *ch = rr_lib.p_ibv_create_comp_channel(ctx);
	if (ch)
		*fd = ch->fd;
	return ch;
}

int rr_destroy_comp_channel(struct ibv_comp_channel *ch) {
	return rr_lib.p_ibv_destroy_comp_channel(ch);
}

// rr_create_cq stores handle (a runtime/cgo.Handle of the Go *CQ) as the
// CQ's context, so a completion event can be mapped back to the Go object.
struct ibv_cq *rr_create_cq(struct ibv_context *ctx, int cqe, uintptr_t handle,
                            struct ibv_comp_channel *ch, int *size) {
	struct ibv_cq *cq = rr_lib.p_ibv_create_cq(ctx, cqe, (void *)handle, ch, 0);
	if (cq)
		*size = cq->cqe;
	return cq;
}

int rr_destroy_cq(struct ibv_cq *cq) { return rr_lib.p_ibv_destroy_cq(cq); }

// rr_get_cq_event reads one completion event; -1 with errno EAGAIN when
// there is none yet (the channel fd is non-blocking).
int rr_get_cq_event(struct ibv_comp_channel *ch, uintptr_t *handle) {
	struct ibv_cq *cq;
	void *ctx;
	if (rr_lib.p_ibv_get_cq_event(ch, &cq, &ctx))
		return -1;
	*handle = (uintptr_t)ctx;
	return 0;
}

void rr_ack_cq_events(struct ibv_cq *cq, unsigned int n) { rr_lib.p_ibv_ack_cq_events(cq, n); }

// rr_create_qp creates an RC QP; caps holds the sizes asked for and, on
// success, what the device granted (ibv_create_qp writes them back).
struct ibv_qp *rr_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                            struct ibv_srq *srq, struct rr_qp_caps *caps, uint32_t *qp_num) {
	struct ibv_qp_init_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.send_cq = send_cq;
	attr.recv_cq = recv_cq;
	attr.srq = srq;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 0;
	attr.cap.max_send_wr = caps->max_send_wr;
	attr.cap.max_recv_wr = caps->max_recv_wr;
	attr.cap.max_send_sge = caps->max_send_sge;
	attr.cap.max_recv_sge = caps->max_recv_sge;
	attr.cap.max_inline_data = caps->max_inline_data;
	struct ibv_qp *qp = rr_lib.p_ibv_create_qp(pd, &attr);
	if (!qp)
		return NULL;
	caps->max_send_wr = attr.cap.max_send_wr;
	caps->max_recv_wr = attr.cap.max_recv_wr;
	caps->max_send_sge = attr.cap.max_send_sge;
	caps->max_recv_sge = attr.cap.max_recv_sge;
	caps->max_inline_data = attr.cap.max_inline_data;
	*qp_num = qp->qp_num;
	return qp;
}

int rr_qp_to_init(struct ibv_qp *qp, uint8_t port, int remote_read) {
	struct ibv_qp_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = port;
	// No remote access, or RDMA Read only: what a peer may read is still
	// limited to the MRs registered for it, by their rkeys.
	attr.qp_access_flags = remote_read ? IBV_ACCESS_REMOTE_READ : 0;
	return rr_lib.p_ibv_modify_qp(qp, &attr,
	                              IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int rr_qp_to_rtr(struct ibv_qp *qp, const struct rr_rtr *a) {
	struct ibv_qp_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = (enum ibv_mtu)a->path_mtu;
	attr.dest_qp_num = a->dest_qpn;
	attr.rq_psn = a->rq_psn;
	attr.max_dest_rd_atomic = a->max_dest_rd_atomic; // 0: no RDMA Read or atomics are accepted
	attr.min_rnr_timer = a->min_rnr_timer;
	attr.ah_attr.dlid = a->dlid;
	attr.ah_attr.port_num = a->port;
	if (a->global) {
		attr.ah_attr.is_global = 1;
		attr.ah_attr.grh.hop_limit = 64;
		attr.ah_attr.grh.sgid_index = a->sgid_index;
		memcpy(attr.ah_attr.grh.dgid.raw, a->dgid, 16);
	}
	return rr_lib.p_ibv_modify_qp(qp, &attr,
	                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
	                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
	                                  IBV_QP_MIN_RNR_TIMER);
}

int rr_qp_to_rts(struct ibv_qp *qp, const struct rr_rts *a) {
	struct ibv_qp_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	attr.sq_psn = a->sq_psn;
	attr.timeout = a->timeout;
	attr.retry_cnt = a->retry_cnt;
	attr.rnr_retry = 0; // an RNR NAK fails the send at once: RNR is a bug here
	attr.max_rd_atomic = a->max_rd_atomic;
	return rr_lib.p_ibv_modify_qp(qp, &attr,
	                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
	                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

// rr_qp_to_state moves the QP to a state that takes no attributes (RESET,
// ERR).
int rr_qp_to_state(struct ibv_qp *qp, uint32_t state) {
	struct ibv_qp_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = (enum ibv_qp_state)state;
	return rr_lib.p_ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}

int rr_query_qp_state(struct ibv_qp *qp, uint32_t *state) {
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int rc = rr_lib.p_ibv_query_qp(qp, &attr, IBV_QP_STATE, &init);
	if (rc == 0)
		*state = attr.qp_state;
	return rc;
}

int rr_destroy_qp(struct ibv_qp *qp) { return rr_lib.p_ibv_destroy_qp(qp); }

// rr_create_srq creates a shared receive queue of single-entry receives;
// granted is what the device gave.
struct ibv_srq *rr_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t *granted) {
	struct ibv_srq_init_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.attr.max_wr = max_wr;
	attr.attr.max_sge = 1;
	struct ibv_srq *srq = rr_lib.p_ibv_create_srq(pd, &attr);
	if (srq)
		*granted = attr.attr.max_wr;
	return srq;
}

// rr_arm_srq sets the SRQ's limit: when fewer receives than limit are
// posted, the device raises IBV_EVENT_SRQ_LIMIT_REACHED once (and disarms).
int rr_arm_srq(struct ibv_srq *srq, uint32_t limit) {
	struct ibv_srq_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.srq_limit = limit;
	return rr_lib.p_ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
}

int rr_destroy_srq(struct ibv_srq *srq) { return rr_lib.p_ibv_destroy_srq(srq); }

#else // !RR_HAVE_VERBS: a build without <infiniband/verbs.h>.

int rr_load(char *msg, int n) {
	snprintf(msg, n, "built without <infiniband/verbs.h>");
	return RR_LOAD_NO_HEADERS;
}

// Never called: rr_load failed, so Go calls nothing else. They fail anyway.
struct ibv_device **rr_get_device_list(int *n) {
	errno = ENOSYS;
	return NULL;
}
void rr_free_device_list(struct ibv_device **list) {}
const char *rr_device_name(struct ibv_device *dev) { return ""; }
const char *rr_device_node_type(struct ibv_device *dev) { return ""; }
uint64_t rr_device_guid(struct ibv_device *dev) { return 0; }
struct ibv_context *rr_open_device(struct ibv_device *dev, int *async_fd) {
	errno = ENOSYS;
	return NULL;
}
int rr_close_device(struct ibv_context *ctx) { return ENOSYS; }
int rr_query_device(struct ibv_context *ctx, struct rr_device_attr *out) { return ENOSYS; }
int rr_query_port(struct ibv_context *ctx, uint8_t port, struct rr_port_attr *out) { return ENOSYS; }
int rr_query_gid(struct ibv_context *ctx, uint8_t port, int index, uint8_t *out) { return ENOSYS; }
int rr_get_async_event(struct ibv_context *ctx, uint32_t *type, uint32_t *qp_num, uint32_t *port) {
	errno = ENOSYS;
	return -1;
}
struct ibv_pd *rr_alloc_pd(struct ibv_context *ctx) {
	errno = ENOSYS;
	return NULL;
}
int rr_dealloc_pd(struct ibv_pd *pd) { return ENOSYS; }
struct ibv_mr *rr_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int remote_read, uint32_t *lkey,
                         uint32_t *rkey) {
	errno = ENOSYS;
	return NULL;
}
int rr_dereg_mr(struct ibv_mr *mr) { return ENOSYS; }
struct ibv_comp_channel *rr_create_comp_channel(struct ibv_context *ctx, int *fd) {
	errno = ENOSYS;
	return NULL;
}
int rr_destroy_comp_channel(struct ibv_comp_channel *ch) { return ENOSYS; }
struct ibv_cq *rr_create_cq(struct ibv_context *ctx, int cqe, uintptr_t handle,
                            struct ibv_comp_channel *ch, int *size) {
	errno = ENOSYS;
	return NULL;
}
int rr_destroy_cq(struct ibv_cq *cq) { return ENOSYS; }
int rr_get_cq_event(struct ibv_comp_channel *ch, uintptr_t *handle) {
	errno = ENOSYS;
	return -1;
}
void rr_ack_cq_events(struct ibv_cq *cq, unsigned int n) {}
struct ibv_qp *rr_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq, struct ibv_cq *recv_cq,
                            struct ibv_srq *srq, struct rr_qp_caps *caps, uint32_t *qp_num) {
	errno = ENOSYS;
	return NULL;
}
int rr_qp_to_init(struct ibv_qp *qp, uint8_t port, int remote_read) { return ENOSYS; }
int rr_qp_to_rtr(struct ibv_qp *qp, const struct rr_rtr *a) { return ENOSYS; }
int rr_qp_to_rts(struct ibv_qp *qp, const struct rr_rts *a) { return ENOSYS; }
int rr_qp_to_state(struct ibv_qp *qp, uint32_t state) { return ENOSYS; }
int rr_query_qp_state(struct ibv_qp *qp, uint32_t *state) { return ENOSYS; }
int rr_destroy_qp(struct ibv_qp *qp) { return ENOSYS; }
struct ibv_srq *rr_create_srq(struct ibv_pd *pd, uint32_t max_wr, uint32_t *granted) {
	errno = ENOSYS;
	return NULL;
}
int rr_arm_srq(struct ibv_srq *srq, uint32_t limit) { return ENOSYS; }
int rr_destroy_srq(struct ibv_srq *srq) { return ENOSYS; }

#endif // RR_HAVE_VERBS

// rr_nonblock_dup makes fd non-blocking so that ibv_get_cq_event and
// ibv_get_async_event return EAGAIN instead of blocking an OS thread; Go
// waits for readability through its netpoller instead. Returns a dup of fd
// (close-on-exec) for Go to own, or -1 with errno set.
int rr_nonblock_dup(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}
