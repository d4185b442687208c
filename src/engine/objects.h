/*
 * The objects of the software HCA, which the verbs create (src/verbs) and
 * the engine works on.  Each embeds the rdma-core struct the application sees
 * (struct verbs_context, ibv_pd, ibv_mr, ibv_cq_ex, ibv_qp_ex, ibv_srq, ibv_ah)
 * and reaches its own state with container_of, the way rdma-core providers do.
 */
#ifndef SV_OBJECTS_H
#define SV_OBJECTS_H

#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/lock_order.h"
#include "common/util.h"
#include "common/ref.h"
#include "common/arwlock.h"
#include "transport/registry.h"
#include "common/cuda.h"
#include "transport/transport.h"
#include "engine/wr_opcode.h"

/* ---- device limits: reported by query_device and enforced ---- */
#define SV_MAX_QP 16384
#define SV_MAX_QP_WR 16384
#define SV_MAX_SGE 32
#define SV_MAX_CQ 16384
#define SV_MAX_CQE ((1 << 22) - 1)
#define SV_MAX_MR 65536
#define SV_MAX_MR_SIZE (1ull << 40)
#define SV_MAX_PD 65536
/* READs and atomics in flight per QP, as rxe (128): an initiator takes its
 * peer's responder resources as its depth (perftest does), and rxe offers 128 */
#define SV_MAX_QP_RD_ATOM 128
#define SV_MAX_SRQ 8192
#define SV_MAX_SRQ_WR 16384
#define SV_MAX_AH 65536
#define SV_MAX_INLINE 1024
#define SV_MAX_MSG_SIZE (1u << 31)
#define SV_PORT_MTU IBV_MTU_4096
#define SV_VENDOR_ID 0x5356 /* "SV": not a registered OUI; honest placeholder */
/* QPN = the context's block of the host's QP numbers (transport/registry.h)
 * + its index in the context's QP table */

struct sv_engine;
struct sv_stat_hdr;
struct sv_async_pending;
struct sv_xseg;
struct sv_extent;

/* affiliated async events of one QP, CQ or SRQ: read and acknowledged (async_event.c) */
struct sv_async_count {
	uint32_t reported, acked; /* under the context's async_lock */
};

struct sv_device {
	struct ibv_device ibdev;
	char ifname[IF_NAMESIZE];
	struct in_addr ip;   /* GIDs 2 and 3, when has_ip4 */
	bool has_ip4;
	struct in6_addr ip6; /* GIDs 4 and 5, when has_ip6 */
	bool has_ip6;
	/* what names the device's endpoints (registry, shm and hand-off names,
	 * the HELLO) and where they listen: the IPv4 address, mapped, or on an
	 * interface with IPv6 only its IPv6 address */
	struct in6_addr addr;
	uint8_t mac[6]; /* all zeros for an interface without one (lo) */
	int ifindex;
	uint64_t guid; /* network order */
	int index;
	bool loopback; /* serves a loopback interface: listed after the others */
};

/*
 * key -> MR or MW lookups for one context (lkey == rkey, as in Soft-RoCE).
 * A key's upper 24 bits are drawn from the kernel's CSPRNG, unique among
 * the live keys, and name the entry (an MW keeps them for life; its low 8
 * bits are the consumer's, ibv_inc_rkey); the low 8 bits of an MR's key
 * are random too.  Nothing in one key tells anything about another, and a
 * freed key comes back only by chance (2^-32 a registration).  The table
 * is open addressing on those random bits, linear probing.
 */
struct sv_mr_table {
	struct sv_arwlock lock; /* read: a key's memory in use (arwlock.h) */
	struct sv_mr **tab;
	uint32_t size; /* a power of two, at least twice count (0: none yet) */
	uint32_t count;
};

/* Multicast attachments of a context (engine/mcast.c) */
#define SV_MCAST_MAX_GRP 64
#define SV_MCAST_MAX_QP_ATTACH 56
#define SV_MCAST_MAX_TOTAL (SV_MCAST_MAX_GRP * SV_MCAST_MAX_QP_ATTACH)
struct sv_mcg {
	union ibv_gid mgid;
	struct sv_conn *conn; /* the group's connection (a reference), joined */
	int nqp;
	uint32_t qpn[SV_MCAST_MAX_QP_ATTACH];
};
struct sv_mcg_table {
	struct sv_mutex lock;
	struct sv_mcg g[SV_MCAST_MAX_GRP]; /* ngroups used, each with a QP */
	int ngroups, total;
};

struct sv_context {
	struct sv_list open_link;      /* in the list of open contexts (device.c) */
	pid_t owner;                   /* the process that opened it (a forked child
					  inherits the list, not the threads) */
	struct verbs_context vctx; /* application sees &vctx.context */
	struct sv_device *dev;
	struct sv_engine *eng;
	union ibv_gid gid; /* this context's endpoint (transport/endpoint.c), said in
			      HELLOs; not a GID of the port (verbs/gid.c) */

	struct sv_mutex lock; /* qp table, object counts */
	uint32_t qpn_base;    /* the first QPN of this context's block */
	/* the low bits of its QP and SRQ numbers from their slots, keyed at
	 * random (transport/registry.h; sv_qpn_of_slot, sv_qpn_slot below) */
	uint64_t qpn_key;
	struct sv_qpn_perm qpn_perm, srqn_perm;
	struct sv_qp **qpt;   /* index = slot = sv_qpn_slot(ctx, qpn) */
	uint32_t qpt_size;
	uint32_t qpt_hint;    /* every slot below it is taken: the search for a
				 free QPN starts here, so creating n QPs costs
				 O(n), not O(n^2) (10,000 QPs: tests/scale) */
	uint32_t nqp, ncq, nsrq, npd, nah;
	/* SRQs by number (sv_srqn_slot; SRQ numbers are their own
	 * space, unique on the host as QP numbers are), under srqt_lock, a
	 * leaf (the responder looks XRC SRQs up with a QP's lock held) */
	struct sv_mutex srqt_lock;
	struct sv_srq **srqt;
	uint32_t srqt_size;
	struct sv_list xrcds; /* the XRC domains opened here (sv_xrcd.link), under lock */
	/* what other processes' XRC receive QPs are placing into our XRC SRQs
	 * (engine/xrc_relay.c), under srqt_lock */
	struct sv_list xrc_proxies;
	/* questions asked of other processes about their XRC receive QPs
	 * (sv_xrc_ctrl_call), answered by the engine under xrc_call_lock */
	struct sv_mutex xrc_call_lock;
	pthread_cond_t xrc_call_cond;
	struct sv_list xrc_calls;
	uint32_t xrc_call_next;

	struct sv_mr_table mrs;
	int async_wfd; /* write end of the async event pipe (read end: async_fd) */
	struct sv_mutex async_lock;       /* the pending events and every object's counts */
	pthread_cond_t async_acked;
	struct sv_async_pending *async_head, *async_tail; /* one pipe byte each */
	struct sv_stat_hdr *stats; /* counters segment (verbs/stats.[ch]) */
	struct sv_mcg_table mcast;
	/* what peers of this host see of its QPs and MRs (engine/mem_export.h);
	 * NULL when not exported */
	struct sv_xseg *xseg;
	int xfd;
	/* a bit per QP slot whose QP was destroyed while a peer's access
	 * through its record had not ended in the time given (a peer killed
	 * or stopped inside it: mem_export.c); NULL until one is */
	uint64_t *_Atomic xqp_gone;
	/* a peer of this host has connected (shm): the pages of MRs that peers
	 * may reach are shared from then on (mem_export.c) */
	atomic_bool xshare;
	/* MR slots: the lowest free one is searched from xmr_hint (MR write lock) */
	uint32_t xmr_hint;
	/* the receive arena (direct_recv.c): its mapping and memfd; blocks
	 * from arena_next on were never used, the free ones are listed
	 * (arena_lock, taken with a QP's lock held) */
	struct sv_mutex arena_lock;
	uint8_t *arena;
	/* set once the table and the arena are made (the engine thread, which
	 * starts before them, looks at them only then) */
	atomic_bool arena_on;
	/* what the next queue made or reset is numbered (struct sv_xrq gen) */
	_Atomic uint64_t arena_gen;
	int arena_fd;
	uint32_t arena_next;
	struct sv_arena_free *arena_free;
	uint32_t narena_free, arena_free_cap;
};

/*
 * QP and SRQ numbers and the slots of the context's tables: the only place
 * that maps one to the other.  A number of another block has no slot here
 * (UINT32_MAX).
 */
static inline bool sv_qpn_ours(const struct sv_context *ctx, uint32_t qpn)
{
	return (qpn & ~(uint32_t)SV_QPN_LOW) == ctx->qpn_base;
}

static inline uint32_t sv_qpn_of_slot(const struct sv_context *ctx, uint32_t slot)
{
	return ctx->qpn_base | sv_qpn_permute(&ctx->qpn_perm, slot);
}

static inline uint32_t sv_qpn_slot(const struct sv_context *ctx, uint32_t qpn)
{
	return sv_qpn_ours(ctx, qpn) ? sv_qpn_unpermute(&ctx->qpn_perm, qpn) : UINT32_MAX;
}

static inline uint32_t sv_srqn_of_slot(const struct sv_context *ctx, uint32_t slot)
{
	return ctx->qpn_base | sv_qpn_permute(&ctx->srqn_perm, slot);
}

static inline uint32_t sv_srqn_slot(const struct sv_context *ctx, uint32_t srqn)
{
	return sv_qpn_ours(ctx, srqn) ? sv_qpn_unpermute(&ctx->srqn_perm, srqn) : UINT32_MAX;
}

static inline struct sv_context *to_sv_ctx(struct ibv_context *c)
{
	return SV_CONTAINER_OF(c, struct sv_context, vctx.context);
}

struct sv_pd {
	struct ibv_pd ibpd;
	struct sv_ref users; /* MRs, QPs, SRQs, AHs: dealloc fails with EBUSY */
};
static inline struct sv_pd *to_sv_pd(struct ibv_pd *p)
{
	return SV_CONTAINER_OF(p, struct sv_pd, ibpd);
}

/*
 * An entry of the key table: a memory region, or a memory window, which
 * names a range of an MR it is bound to.  Both are checked by the same
 * code (mr_table.c); an MW key serves remote access only.  Binding state
 * changes under the table's write lock.
 */
enum sv_key_kind { SV_KEY_MR, SV_KEY_MW };

struct sv_mr {
	struct ibv_mr ibmr; /* an MW uses lkey == rkey only: its current rkey */
	struct sv_pd *pd;
	uint64_t iova;  /* the address peers and SGEs use (MW: 0 when zero-based) */
	uint8_t *vaddr; /* where it is in this process */
	uint64_t len;
	unsigned int access;
	uint8_t kind;   /* enum sv_key_kind */
	uint32_t nmw;   /* MR: memory windows bound to it */
	/* GPU memory (CUDA device memory; a window bound to such an MR too):
	 * the context that owns it; NULL for host memory.  The CPU never
	 * touches such memory: every byte moves through the driver (gpu.c) */
	sv_cu_ctx gpu;
	/* MR in GPU memory that other processes may open (CUDA IPC); NULL
	 * otherwise.  A window reaches it through mw_mr */
	struct sv_gpu_export *gx;
	/* exported to peers of this host (engine/mem_export.h): its slot + 1
	 * (0: not exported), and the shared pages it lies in */
	uint32_t xslot;
	struct sv_extent *ext;
	/* MW */
	struct ibv_mw *ibmw;
	struct sv_mr *mw_mr; /* the MR it is bound to; NULL: not bound (no access) */
	uint32_t mw_qpn;     /* type 2: the only QP it may be reached through */
};

/* How a process of this host opens an MR's GPU memory (engine/gpu.h). */
struct sv_gpu_export {
	sv_cu_ipc_handle h; /* of the allocation the MR lies in */
	uint64_t off;	    /* of the MR's first byte in it */
	int ordinal;	    /* the CUDA device */
};

struct sv_mw {
	struct ibv_mw ibmw;
	struct sv_mr key;
};
static inline struct sv_mr *to_sv_mr(struct ibv_mr *m)
{
	return SV_CONTAINER_OF(m, struct sv_mr, ibmr);
}

struct sv_comp_channel {
	struct ibv_comp_channel ibch; /* ibch.fd is the pipe's read end */
	int wfd;
	struct sv_ref cqs; /* CQs attached: destroy fails with EBUSY (ibch.refcnt
			      is rdma-core's own bookkeeping, unused here) */
};

struct sv_cq {
	struct ibv_cq_ex ex; /* ibv_cq is its prefix */
	struct sv_context *ctx;
	struct sv_async_count async;
	struct sv_mutex lock;
	struct ibv_wc *ring;
	uint32_t size; /* slots = cqe + 1 */
	uint32_t head, count;
	/* count, as of the last change (each made under lock): a poll finds
	 * an empty CQ without taking the lock */
	atomic_uint avail;
	bool armed, solicited_only;
	bool overrun; /* reported once via IBV_EVENT_CQ_ERR */
	struct sv_ref users; /* QPs using it: destroy fails with EBUSY */
	uint32_t events_reported; /* comp events handed to the application */
	atomic_uint events_in_pipe; /* written to the channel, not yet read */
	bool zombie; /* destroyed with events still in the pipe: reader frees it */
	/* extended polling state (ibv_start_poll ...) */
	struct ibv_wc cur;
	bool polling;
	/* the QPs whose receives complete here and peers of this host may
	 * place SENDs into (engine/direct_recv.c), under lock; nxrq_any: as
	 * of the last change, read without it */
	struct sv_xrq_watch *xrq;
	uint32_t nxrq, xrq_cap;
	atomic_uint nxrq_any;
	/* under lock: the WQEs the queues completing here may hold (an SRQ
	 * counts as unbounded); xrq_notify: that was once more than cqe, and
	 * peers placing into the listed queues mark the ready map (for good) */
	uint64_t wr_demand;
	bool xrq_notify;
};
/* lock held: cq->count changed */
static inline void sv_cq_count_changed(struct sv_cq *cq)
{
	atomic_store_explicit(&cq->avail, cq->count, memory_order_relaxed);
}
static inline struct sv_cq *to_sv_cq(struct ibv_cq *c)
{
	return SV_CONTAINER_OF((struct ibv_cq_ex *)c, struct sv_cq, ex);
}

struct sv_recv_wqe {
	uint64_t wr_id;
	uint32_t num_sge;
	struct ibv_sge *sge; /* points into the queue's SGE pool */
};

/* A receive queue: the QP's own or an SRQ's. */
struct sv_rq {
	struct sv_recv_wqe *wqe;
	struct ibv_sge *sge_pool;
	uint32_t size, max_sge; /* size is the posted capacity (max_wr) */
	uint32_t head, count;
	/* its part in the receive arena, where peers of this host read it
	 * (direct_recv.h); NULL: private */
	struct sv_xrq_local *xl;
};

/* A QP on a CQ's list of those whose receives peers of this host place
 * (engine/direct_recv.c), and the queue in the arena whose head a poll
 * watches for it: its own (rq.xl) or its SRQ's. */
struct sv_xrq_watch {
	struct sv_qp *qp;
	struct sv_xrq_local *xl;
};

/* A receive queue's part in the receive arena (engine/direct_recv.c). */
struct sv_xrecv;
struct sv_xrq_local {
	struct sv_xrq *x;      /* its counters */
	struct sv_xrecv *xent; /* its first WQE's record */
	struct sv_context *ctx; /* the arena's */
	uint32_t off, len;     /* its block of the arena */
	/* the head WQE's record, as a poll reads it without the owner's lock
	 * (a hint: the poll looks at a QP whose head a peer has marked done;
	 * the arena stays mapped, so a stale one reads harmlessly) */
	struct sv_xrecv *_Atomic watch;
	/* x->gen is set (the owner's copy: the line of taken, which
	 * peers write at every placement, is not read at every post) */
	bool numbered;
};

/*
 * An XRC domain: what ties XRC receive QPs to the XRC SRQs their requests
 * may name.  Opened with a file, it is the one domain of that file (inode)
 * for this process, counted by opens; without one (fd -1), its own.
 */
struct sv_xrcd {
	struct ibv_xrcd ibx;
	struct sv_context *ctx;
	struct sv_list link; /* ctx->xrcds */
	bool by_inode;
	dev_t dev;
	ino_t ino;
	int opens;	     /* ibv_open_xrcd calls not closed yet (ctx->lock) */
	struct sv_ref users; /* XRC QPs and SRQs in it: close fails with EBUSY */
};
static inline struct sv_xrcd *to_sv_xrcd(struct ibv_xrcd *x)
{
	return SV_CONTAINER_OF(x, struct sv_xrcd, ibx);
}

struct sv_srq {
	struct ibv_srq ibsrq;
	struct sv_context *ctx;
	struct sv_async_count async;
	struct sv_pd *pd;
	struct sv_mutex lock;
	struct sv_rq rq;
	uint32_t srq_limit; /* armed when nonzero */
	struct sv_ref users; /* QPs using it: destroy fails with EBUSY */
	uint32_t slot;	     /* in ctx->srqt */
	uint32_t srq_num;    /* qpn_base + slot (ibv_get_srq_num) */
	/* its queue in the receive arena (rq.xl): the QPs whose records name
	 * it, so peers of this host place SENDs to them into it (under lock;
	 * engine/direct_recv.c) */
	struct sv_qp **xqps;
	uint32_t nxqps, xqps_cap;
	/* the record of that part, kept while the queue is back in private
	 * memory (a resize): polls may still watch it */
	struct sv_xrq_local *xl_kept;
	struct sv_xrcd *xrcd; /* XRC SRQs: the domain, and the CQ its receives */
	struct sv_cq *cq;     /* complete on (a basic SRQ's go to each QP's) */
};
static inline struct sv_srq *to_sv_srq(struct ibv_srq *s)
{
	return SV_CONTAINER_OF(s, struct sv_srq, ibsrq);
}

/*
 * An AH lives while the application holds it or a queued UD work request
 * names it (sv_ah_put frees it at the last reference): a NIC copies the
 * address vector into its WQE, so a program may destroy an AH right after
 * posting with it, and rdma-core's providers allow it.
 */
struct sv_ah {
	struct ibv_ah ibah;
	struct sv_ref ref;
	struct ibv_ah_attr attr;
	struct sv_endpoint_addr peer;
	bool mcast;           /* its GID is a multicast group's: sends go there */
	struct sv_pd *pd;
	struct sv_mutex lock;
	struct sv_conn *conn; /* cached connection to the peer endpoint (or group) */
};
static inline struct sv_ah *to_sv_ah(struct ibv_ah *a)
{
	return SV_CONTAINER_OF(a, struct sv_ah, ibah);
}

/* Drop one reference to ah (the last frees it). */
void sv_ah_put(struct sv_ah *ah);

enum sv_wqe_state {
	SV_WQE_PENDING, /* not (fully) sent */
	SV_WQE_SENT,    /* all packets out, waiting for ACK/response */
	SV_WQE_DONE,    /* completed, waiting to be retired in order */
};

struct sv_send_wqe {
	struct ibv_send_wr wr; /* copy; sg_list/next unused */
	const struct sv_wr_opcode_info *op; /* wr.opcode's row, checked at post */
	struct ibv_sge *sge;   /* into the QP's send SGE pool */
	uint8_t *inline_buf;   /* into the QP's inline pool (IBV_SEND_INLINE) */
	struct sv_ah *ah;      /* UD */
	uint32_t num_sge;
	uint32_t length;       /* total payload bytes */
	uint32_t first_psn, last_psn;
	uint32_t npkts;
	/* READ: the next response PSN expected.  Responses are placed only in
	 * order: one after a lost response (a gap) would complete the READ
	 * with a hole in its buffer, so it is dropped and the READ asked again */
	uint32_t resp_psn;
	uint64_t atomic_orig;
	/* BIND_MW: taken at post, as the WR's pointers may be gone by then; the
	 * window is only looked at once the table says it still carries bind_hi */
	struct sv_mr *bind_mw;
	uint32_t bind_hi; /* its key's upper 24 bits, which name it in the table */
	uint32_t bind_lkey; /* the MR's key, 0 when unbinding */
	/* the small fields last, in one word: a ring of these is a QP's
	 * largest allocation (tests/scale counts the bytes per QP) */
	uint8_t state;  /* enum sv_wqe_state */
	uint8_t status; /* enum ibv_wc_status */
	/* a packet of it went on the wire: it is resent there, never executed
	 * on the peer's memory (engine/direct_exec.h), whose responder may have
	 * executed it already and expects the PSNs after it */
	bool wired;
};
_Static_assert(IBV_WC_TM_RNDV_INCOMPLETE < 256, "a WC status fits the WQE's byte");
/* A send WQE leaves the queue (completed, flushed or discarded): what it held goes. */
void sv_wqe_release(struct sv_send_wqe *w);


/*
 * What an RC requester over a datagram transport keeps of the path
 * (congestion.c): its congestion window, its round-trip clock and the
 * retransmission probe.  Unused over a stream transport.
 */
struct sv_flow {
	uint32_t cwnd;	       /* packets it may have unacknowledged, from comp.una */
	uint32_t cwnd_acc;     /* packets acknowledged toward the next increase */
	uint32_t hi_psn;       /* one past the highest PSN sent */
	uint32_t rtt_psn;      /* the packet being timed ... */
	uint64_t rtt_sent_ns;  /* ... sent then (0: none) */
	uint64_t srtt_ns;      /* smoothed round trip (0: no sample yet) */
	uint64_t rttvar_ns;    /* and its variation */
	uint64_t cut_ns;       /* when cwnd last fell: once a round trip */
	uint64_t ib_deadline;  /* the QP's ack timeout, which the probes come before */
	uint8_t probes;        /* since the last progress: each doubles the wait */
	/* messages sent since the last packet that asked for an ACK (a
	 * stream transport's unsignaled ones need not ask: requester.c) */
	uint8_t unasked;
};

/* The send queue of one QP (sq indexes increase forever, mod 2^32): the
 * posting verbs add at tail, the requester sends and retires, the
 * completer marks what is answered; qp->lock. */
struct sv_sq {
	struct sv_send_wqe *wqe;
	struct ibv_sge *sge_pool;
	uint8_t *inline_pool;
	uint32_t size;     /* ring slots (power of two) */
	uint32_t max_wr;   /* posted capacity */
	uint32_t head;     /* oldest not retired */
	uint32_t next;     /* next to (re)transmit */
	uint32_t tail;     /* next free */
	uint32_t seg_off;  /* bytes of wqe[next] already sent */
	uint32_t psn;      /* next PSN to use */
	uint32_t rd_atomic_inflight;
	struct sv_flow flow;
};

/*
 * A QP's state is in three parts, one per role of the engine, as Soft-RoCE
 * has qp->req, qp->resp and qp->comp.  Each is written by its role's file
 * under qp->lock, besides the exceptions its comment lists: the QP verbs
 * (verbs/qp.c) setting what modify_qp's attributes say, and create and
 * destroy (verbs/qp.c), which make and free a part whole.
 */

/*
 * The requester's (requester.c; direct_exec.c, its direct execution on the
 * peer's memory, keeps xcache and xs).  The completer, ERR, RESET and destroy
 * change the timers and retry budgets through requester.c's functions.
 * Exception: modify_qp sets retries_left and rnr_retries_left from
 * IBV_QP_RETRY_CNT and IBV_QP_RNR_RETRY.
 */
struct sv_qp_req {
	/* the engine's timers, deadlines in ns, 0 = not armed; read without
	 * the lock by the engine (sv_engine_timer_update, run_timers) */
	_Atomic uint64_t rnr_until;    /* paused after an RNR NAK */
	/* (in ERR the requester has no timer: there the two words are an
	 * owed IBV_EVENT_QP_LAST_WQE_REACHED's, qp_ctx.c; no memory more) */
	union {
		_Atomic uint64_t ack_deadline; /* oldest unacked WQE times out */
		_Atomic uint64_t last_wqe_look; /* ERR: the owed event looks again */
	};
	/* when the requester began waiting for an answer: the ack timer armed
	 * with none armed, or progress (sv_requester_timeout's patience) */
	union {
		uint64_t ack_wait_since;
		uint64_t last_wqe_owed_since; /* ERR: when the event became owed */
	};
	uint32_t retries_left, rnr_retries_left;
	/* a host window onto GPU memory being sent: a send WQE's payload
	 * (engine/gpu.h); NULL until first used */
	struct sv_gpu_stage *gpu_tx;
	/* the peer's MR this QP reached last by itself (engine/direct_exec.c),
	 * in the peer view numbered pm_id (a view freed and another made at
	 * the same address is another number) */
	struct {
		uint32_t rkey, slot, epoch;
		uint32_t miss; /* the rkey whose last operation went by the wire */
		uint64_t miss_ns; /* when (the wire keeps it until SV_DIRECT_RETRY_NS) */
		uint64_t ino;
		uint8_t *base;
		uint64_t pm_id;
		/* the slot of dest_qp_num in that view's QP table: its
		 * permutation undone once, not at every WQE */
		uint64_t qslot_pm;
		uint32_t qslot_qpn, qslot;
	} xcache;
	/* what its SENDs placed on a peer of this host know (direct_exec.c);
	 * NULL until one is tried */
	struct sv_xsend *xs;
	/* set when a WQE tried on the peer's memory executed there (or was
	 * left to the engine thread to execute), cleared when one tried from
	 * the post went by the wire: while set, a WQE posted to an empty
	 * queue is tried first, outside a pass (requester.c, post_alone) */
	bool direct_went;
};

/* A requester's SENDs placed by itself (engine/direct_exec.c). */
struct sv_xsend {
	/* the peer's MR they were placed into last (a slot of its export
	 * table), and when one last went by the wire instead */
	uint32_t recv_lkey, recv_slot;
	uint64_t miss_ns;
	/* the peer's receive queue as last read: its place in the arena,
	 * its number (resets) and what was posted to it */
	const void *rq_pm;
	uint32_t rq_off;
	uint64_t rq_gen, rq_posted;
};

/*
 * The responder's (responder.c; its receive WQE's SGL is sv_qp.rwqe_sge).
 * ERR, RESET, destroy, an XRC SRQ that goes and the XRC relay's proxies
 * change it through responder.c's functions.  Exceptions: modify_qp sets
 * epsn (and clears seq_nak_sent) from IBV_QP_RQ_PSN; congestion.c's
 * sv_flow_marked, which the responder calls for a request marked CE,
 * keeps cnp_sent_ns.
 */
struct sv_qp_resp {
	uint32_t epsn;        /* expected PSN */
	uint32_t msn;
	uint32_t msg_first_psn;
	uint32_t rwqe_off;
	bool seq_nak_sent;    /* RC: the gap before epsn was NAKed once already */
	bool in_msg;          /* inside a multi-packet SEND/WRITE */
	bool in_write;        /* ... and it is a WRITE */
	bool drop_msg;        /* UC: drop until next FIRST/ONLY */
	bool have_rwqe;
	bool comm_est_sent;
	/* rwqe was taken from an SRQ's queue in the receive arena and is not
	 * completed yet: the SRQ's WQEs peers placed for this QP after it wait
	 * (engine/direct_recv.c; read under the SRQ's lock, not this QP's) */
	atomic_bool srq_open;
	uint64_t cnp_sent_ns; /* the last CNP to our requester peer (congestion.c) */
	struct sv_recv_wqe rwqe; /* receive WQE being filled; its SGL in rwqe_sge */
	uint64_t wr_va;       /* RDMA WRITE in progress */
	uint32_t wr_rkey, wr_left, wr_total;
	uint32_t atomic_cache_next;
	/* a READ whose responses are made as its connection drains: conn
	 * (with a reference) is where they go, NULL when none waits; next is
	 * the first response packet not made yet.  The QP's other requests
	 * wait behind it. */
	struct {
		struct sv_conn *conn;
		uint64_t va;
		uint32_t rkey, dma_len, psn, next;
	} rd_left;
	/* atomic replay cache, SV_MAX_QP_RD_ATOM entries: duplicate atomics
	 * return the first result; allocated by the first atomic the QP
	 * executes (most QPs never take one), freed with the QP */
	struct sv_atomic_replay {
		uint32_t psn;
		uint64_t orig;
		bool valid;
	} *atomic_cache;
	/* GPU memory (engine/gpu.h), NULL until first used: a host window onto
	 * what a READ answers from, and the fences of incoming requests' bytes */
	struct sv_gpu_stage *gpu_rd;
	struct sv_gpu_sink *gpu_in;
};

/*
 * The completer's (completer.c; RESET through sv_completer_reset).
 * Exception: modify_qp sets una from IBV_QP_SQ_PSN.
 */
struct sv_qp_comp {
	/* RC: every PSN before this one is acknowledged (or answered); what
	 * a datagram transport may have on the wire is counted from here */
	uint32_t una;
	/* the fences of READ responses' and atomic results' bytes bound for
	 * GPU memory (engine/gpu.h); NULL until first used */
	struct sv_gpu_sink *gpu_rd_in;
};

struct sv_qp {
	struct ibv_qp_ex ex; /* ibv_qp is its prefix */
	struct sv_context *ctx;
	const struct sv_qp_type_info *ti; /* what its QP type means to the roles */
	struct sv_async_count async;
	/* an XRC receive QP has none of these of its own: pd, rcq and srq are
	 * those of the XRC SRQ its current request names (responder.c) */
	struct sv_pd *pd;
	struct sv_cq *scq, *rcq;
	struct sv_srq *srq;
	struct sv_xrcd *xrcd; /* XRC receive QPs */
	/* XRC receive QPs: requests relayed to another process's SRQ
	 * (engine/xrc_relay.h), and the handles ibv_open_qp made of it
	 * (verbs/xrcd.c); NULL until either is first needed */
	struct sv_xrc_qp *xrc;
	struct sv_ref ref;    /* the owner's, and the engine's while it holds it */
	int mcast_attached;   /* ctx->mcast.lock: groups it is attached to */
	bool destroyed;
	bool mcast_no_self;   /* IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: not its own datagrams */

	struct sv_mutex lock; /* everything below */
	enum ibv_qp_state state;
	uint32_t mtu; /* bytes */
	struct ibv_qp_attr attr; /* current attributes, as query_qp reports */
	struct ibv_qp_cap cap;
	bool sq_sig_all;
	/* (the engine's scheduling, below) linked on engine->timer_qps: read
	 * without eng->lock by sv_engine_timer_update, which has nothing to
	 * do for a QP with no deadline that is not linked */
	atomic_bool timer_linked;
	/* a QP of an SRQ that entered ERR by itself while a peer of this host
	 * was placing a SEND for it: IBV_EVENT_QP_LAST_WQE_REACHED waits for
	 * that placement to end (qp_ctx.c, sv_qp_last_wqe_look) */
	bool last_wqe_owed;

	struct sv_sq sq;
	struct sv_rq rq;

	struct sv_endpoint_addr peer; /* RC/UC: from ah_attr at RTR */
	struct sv_conn *conn;         /* RC/UC */

	struct sv_qp_req req;
	struct sv_qp_resp resp;
	struct sv_qp_comp comp;

	/* the engine's scheduling (engine/timers.c) */
	struct sv_list timer_link;  /* engine->timer_qps */
	struct sv_list run_link;    /* engine->run_qps: requester has work */
	struct sv_list txwait_link; /* sv_conn_waiters(conn) */
	/* the connection whose tx_waiters holds txwait_link, with a reference;
	 * whoever exchanges it for NULL owns that reference (timers.c) */
	struct sv_conn *_Atomic txwait_conn;

	struct sv_wr_batch *batch; /* ibv_wr_start() .. ibv_wr_complete() */
	/* the responder's: the SGL of resp.rwqe, as many SGEs as a receive WQE
	 * of this QP's queue (or SRQ) may hold, allocated with the QP
	 * (sv_qp_size; a flexible array, so not inside struct sv_qp_resp) */
	struct ibv_sge rwqe_sge[];
};
/* The allocation of a QP whose receive WQEs hold up to max_sge SGEs. */
static inline size_t sv_qp_size(uint32_t max_sge)
{
	return sizeof(struct sv_qp) + (size_t)SV_MAX(max_sge, 1u) * sizeof(struct ibv_sge);
}
static inline struct sv_qp *to_sv_qp(struct ibv_qp *q)
{
	return SV_CONTAINER_OF((struct ibv_qp_ex *)q, struct sv_qp, ex);
}
/* The packets of qp's path MTU that bytes of payload make, one for none: a
 * message's PSNs, or a stream frame's run of packets (sv_conn_run). */
static inline uint32_t sv_qp_npkts(const struct sv_qp *qp, uint32_t bytes)
{
	return bytes > qp->mtu ? (bytes + qp->mtu - 1) / qp->mtu : 1;
}

/* ---- the HCA's services (src/engine): the roles use them, the verbs too ---- */

/* Look up a QP by number and take a reference (NULL if none). */
struct sv_qp *sv_qp_lookup(struct sv_context *ctx, uint32_t qpn);
/* verbs/srq.c: the XRC SRQ numbered srq_num in xrcd, or NULL */
struct sv_srq *sv_xrc_srq_lookup(struct sv_context *ctx, struct sv_xrcd *xrcd, uint32_t srq_num);
static inline void sv_qp_get(struct sv_qp *qp)
{
	sv_ref_get(&qp->ref);
}
/* the QP is freed by ibv_destroy_qp, which waits for the last put */
static inline void sv_qp_put(struct sv_qp *qp)
{
	sv_ref_put(&qp->ref);
}
/* The states in which a QP's responder executes what arrives. */
static inline bool sv_qp_state_receives(enum ibv_qp_state s)
{
	return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD || s == IBV_QPS_SQE;
}

/* qp->lock held: move to ERR, flush everything outstanding */
void sv_qp_enter_error(struct sv_qp *qp);
/* qp->lock held, qp->last_wqe_owed: the QP's IBV_EVENT_QP_LAST_WQE_REACHED
 * comes once no peer of this host is placing for it any more (at most
 * 1 s), else it is looked at again later (its timer, re-armed). */
void sv_qp_last_wqe_look(struct sv_qp *qp, uint64_t now);
/* qp->lock held: complete every outstanding send / receive WQE with WR_FLUSH_ERR */
void sv_qp_flush_send(struct sv_qp *qp);
void sv_qp_flush_recv(struct sv_qp *qp);

/* Add a completion of qp's; returns false on CQ overrun (reported
 * asynchronously). */
bool sv_cq_push(struct sv_cq *cq, struct sv_qp *qp, const struct ibv_wc *wc, bool solicited);

/*
 * Affiliated asynchronous events (async_event.c).  As with rdma-core, an
 * event not yet read when its object is destroyed is dropped, and destroying
 * an object waits until every event read for it has been acknowledged, so an
 * event never names freed memory.  Each QP, CQ and SRQ counts its events.
 */
/* Post an event: element is the QP, CQ or SRQ (counted by obj), or NULL for port events. */
void sv_async_event(struct sv_context *ctx, enum ibv_event_type type, void *element,
		    struct sv_async_count *obj, int port);
/* The SRQ's armed limit was crossed (it was disarmed under its lock, which
 * is let go now): IBV_EVENT_SRQ_LIMIT_REACHED. */
static inline void sv_srq_limit_event(struct sv_srq *srq)
{
	sv_async_event(srq->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, srq, &srq->async, 0);
}
/* Destroying obj: drop its unread events, wait for the read ones to be acknowledged. */
void sv_async_forget(struct sv_context *ctx, struct sv_async_count *obj);
/* The reader: the oldest event, counted as read for its object; false when
 * none is left (the pipe byte was an event dropped by a destroy). */
bool sv_async_take(struct sv_context *ctx, enum ibv_event_type *type, void **element, int *port);
/* One read event of obj was acknowledged. */
void sv_async_acked(struct sv_context *ctx, struct sv_async_count *obj);
void sv_async_init(struct sv_context *ctx);
void sv_async_fini(struct sv_context *ctx);

/*
 * Memory access: translate [iova, iova+len) under key into a local pointer
 * after checking key, PD, bounds and access.  Returns 0 or an
 * IBV_WC_* status-compatible error kind (see enum below).  Hold the table's
 * read lock (sv_mr_read_lock) across the use of the pointer.
 */
enum sv_mem_err {
	SV_MEM_OK = 0,
	SV_MEM_BAD_KEY,
	SV_MEM_BAD_PD,
	SV_MEM_BOUNDS,
	SV_MEM_ACCESS,
	SV_MEM_FAULT, /* the memory could not be reached (a GPU copy failed) */
};
/* *gpu (when not NULL): the CUDA context of GPU memory, NULL for host memory. */
enum sv_mem_err sv_mr_translate(struct sv_context *ctx, uint32_t key, struct sv_pd *pd,
				uint64_t iova, uint64_t len, unsigned int need_access,
				uint8_t **ptr, sv_cu_ctx *gpu);
/* The MR or window that carries exactly this key, or NULL (read lock held). */
struct sv_mr *sv_key_entry(struct sv_context *ctx, uint32_t key);
/* The entry whose key has these upper 24 bits, or NULL (a lock held). */
struct sv_mr *sv_key_find_hi(struct sv_context *ctx, uint32_t hi);
/* Write lock held: enter e under a fresh key (e->ibmr.lkey/rkey); 0, or -1
 * when the table is full (SV_MAX_MR) or memory ran out. */
int sv_key_insert(struct sv_mr_table *t, struct sv_mr *e);
/* Write lock held: e's key names nothing any more. */
void sv_key_remove(struct sv_mr_table *t, struct sv_mr *e);
/* The same as sv_mr_translate for a key a peer presents (rkey): an MR's, or a bound MW's
 * reached through the QP qpn. */
enum sv_mem_err sv_key_translate_remote(struct sv_context *ctx, uint32_t key, struct sv_pd *pd,
					uint32_t qpn, uint64_t iova, uint64_t len,
					unsigned int need_access, uint8_t **ptr, sv_cu_ctx *gpu);
/* Local operations of a send queue (qp->lock held, MR read lock not held):
 * BIND_MW and LOCAL_INV take effect; the completion status. */
enum ibv_wc_status sv_mw_bind(struct sv_qp *qp, struct sv_send_wqe *w);
enum ibv_wc_status sv_mw_local_inv(struct sv_qp *qp, uint32_t rkey);

static inline void sv_mr_read_lock(struct sv_context *ctx)
{
	sv_arwlock_rdlock(&ctx->mrs.lock);
}

static inline void sv_mr_read_unlock(struct sv_context *ctx)
{
	sv_arwlock_rdunlock(&ctx->mrs.lock);
}



/* GID <-> endpoint address (format documented in docs/ARCHITECTURE.md) */


#endif
