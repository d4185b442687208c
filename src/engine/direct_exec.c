/*
 * The direct executor (direct_exec.h): RC one-sided operations executed by
 * the initiator on the memory of a peer of this host (ARCHITECTURE.md
 * §4.6), with the target's CPU out of the path: the target may be asleep,
 * busy, or stopped.  Why: a NIC needs nothing from the target's CPU, and
 * the target's engine thread would add two hand-offs to each operation.
 *
 * Over a shm connection (same host, same uid, the peer's pid known), the
 * requester asks sv_direct_exec() first for a WQE whose opcode the WR table
 * marks SV_WRF_DIRECT (WRITE, READ, compare-and-swap, fetch-and-add, atomic
 * write).  It takes the peer's export table once per connection (the
 * registry names its descriptor; pidfd_getfd(2) takes it, with the same
 * permission as process_vm_readv), and maps the memfd of an MR's pages the
 * first time it is used.  Then, for each operation, it applies the
 * responder's checks (access_check.h) to what the table says (the target QP
 * executes requests, is connected to this QP, and allows the opcode's
 * remote access; the rkey names an exported MR of the QP's PD, with the
 * access, covering the range) and moves the bytes itself: a memcpy, a CPU
 * atomic (atomic against the target's own CPU as well), or the atomic
 * write's one 8-byte store with release order.
 *
 * Anything else goes by the wire, unchanged: a check that fails (the
 * target's responder then answers with the NAK the IBA requires and moves
 * its QP as it must), memory that is not exported, GPU memory, zero-length
 * operations, fault injection, or a WQE that would pass one still on the
 * wire (RC order: a WQE executes here only when every WQE before it has
 * completed).
 */
#include "engine/direct_exec.h"
#include "engine/engine.h"
#include "engine/access_check.h"
#include "engine/direct_recv.h"
#include "engine/dma.h"
#include "engine/mem_export.h"
#include "engine/objects.h"
#include "common/fault_guard.h"
#include "wire/opcode.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

#define PM_MAPS 64 /* extents of one peer mapped at a time */

struct pm_map {
	uint64_t ino;
	uint8_t *base;
	size_t size;
};

struct sv_peer_mem {
	struct sv_arwlock lock; /* write: maps change; read: a mapping is in use */
	atomic_bool usable;    /* cleared for good when the peer is found dead */
	_Atomic uint64_t alive_at; /* when the peer was last seen alive (ns) */
	int pidfd;
	struct sv_xseg *x;
	uint32_t qpn_base;         /* the table's, read once */
	const _Atomic uint32_t *alive; /* the lock word of its liveness mutex; NULL: unknown */
	struct sv_qpn_perm perm;   /* from its qpn_key: a QPN's slot in x->qp */
	struct pm_map map[PM_MAPS];
	int nmap;
	_Atomic uint32_t epoch; /* moves when a mapping goes: QP caches are stale */
	uint64_t id;            /* never 0, never another view's (QP caches) */
};

static void pm_free(void *p)
{
	struct sv_peer_mem *pm = p;

	for (int i = 0; i < pm->nmap; i++)
		munmap(pm->map[i].base, pm->map[i].size);
	if (pm->x)
		munmap(pm->x, sizeof(*pm->x));
	if (pm->pidfd >= 0)
		close(pm->pidfd);
	sv_arwlock_destroy(&pm->lock);
	free(pm);
}

/* A descriptor of the peer's, as ours; -1 if it is not (still) the memfd
 * with that inode. */
static int take_fd(struct sv_peer_mem *pm, int fd, uint64_t ino, uint64_t min_size)
{
	struct stat st;
	int f = (int)syscall(SYS_pidfd_getfd, pm->pidfd, fd, 0);

	if (f < 0)
		return -1;
	if (fstat(f, &st) || (uint64_t)st.st_ino != ino || (uint64_t)st.st_size < min_size) {
		close(f);
		return -1;
	}
	return f;
}

static void pm_setup(struct sv_peer_mem *pm, struct sv_conn *conn, uint32_t qpn)
{
	uint64_t ino;
	uint32_t off;
	int fd, f;
	void *x;

	if (!sv_qpn_export_of(&conn->peer.ip, qpn, conn->peer_pid, &fd, &ino))
		return;
	pm->pidfd = (int)syscall(SYS_pidfd_open, conn->peer_pid, 0);
	if (pm->pidfd < 0) {
		sv_dbg("peer memory: no pidfd for pid %d: %s", (int)conn->peer_pid, strerror(errno));
		return;
	}
	f = take_fd(pm, fd, ino, sizeof(struct sv_xseg));
	if (f < 0) {
		sv_dbg("peer memory: cannot take pid %d's export table: %s", (int)conn->peer_pid,
		       strerror(errno));
		return;
	}
	x = mmap(NULL, sizeof(struct sv_xseg), PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	close(f);
	if (x == MAP_FAILED)
		return;
	pm->x = x;
	if (pm->x->magic != SV_XSEG_MAGIC || pm->x->version != SV_XSEG_VERSION ||
	    pm->x->qpn_base != (qpn & ~(SV_QPN_BLOCK - 1)))
		return;
	/* read once: whatever the table says later, a QPN's slot is < SV_QPN_BLOCK */
	pm->qpn_base = qpn & ~(SV_QPN_BLOCK - 1);
	sv_qpn_perm_init(&pm->perm, pm->x->qpn_key);
	off = pm->x->alive_off; /* read once, and checked: it lies inside the mutex */
	if (off >= offsetof(struct sv_xseg, alive) && !(off & 3) &&
	    off + sizeof(uint32_t) <= offsetof(struct sv_xseg, alive) + sizeof(pm->x->alive))
		pm->alive = (const _Atomic uint32_t *)((const uint8_t *)pm->x + off);
	atomic_store(&pm->usable, true);
	atomic_store(&pm->alive_at, sv_now_ns());
	sv_dbg("peer memory: one-sided operations to pid %d run here (liveness: %s)",
	       (int)conn->peer_pid, pm->alive ? "its lock word" : "its pidfd");
}

/*
 * A dead peer's QPs are gone, as the kernel destroys a process's QPs as it
 * exits: its memory must not take a WRITE and report success.  Its
 * connection breaks only once the engine has read the end of its socket, so
 * an operation posted once the peer has been reaped must find it dead and go
 * by the wire, which fails.  Its engine thread's liveness mutex says so at
 * the cost of a load; while that is not held, the process itself is asked
 * (its pidfd turns readable when it exits), at most every SV_PEER_ALIVE_NS.
 */
#define SV_PEER_ALIVE_NS 50000ull

/* The peer's engine thread holds the table's liveness mutex, and has not
 * ended (mem_export.h): one load of a line nobody writes.  The word and its
 * bits are the kernel's robust futex ABI: the owner's TID, and
 * FUTEX_OWNER_DIED once the kernel has found the owner gone. */
static bool owner_holds(const struct sv_peer_mem *pm)
{
	uint32_t w;

	if (!pm->alive)
		return false;
	w = atomic_load_explicit(pm->alive, memory_order_acquire);
	return (w & FUTEX_TID_MASK) && !(w & FUTEX_OWNER_DIED);
}

static bool peer_alive(struct sv_peer_mem *pm)
{
	uint64_t now;
	struct pollfd p = { .fd = pm->pidfd, .events = POLLIN };

	if (owner_holds(pm))
		return true;
	/* not held (yet, or any more: its context is closing): ask the process */
	now = sv_now_ns();
	if (now - atomic_load_explicit(&pm->alive_at, memory_order_relaxed) < SV_PEER_ALIVE_NS)
		return true;
	if (poll(&p, 1, 0) != 0) {
		atomic_store(&pm->usable, false);
		return false;
	}
	atomic_store_explicit(&pm->alive_at, now, memory_order_relaxed);
	return true;
}

static _Atomic uint64_t pm_ids;

/* The connection's view of the peer's memory; NULL when there is none. */
static struct sv_peer_mem *peer_mem(struct sv_conn *conn, uint32_t qpn)
{
	struct sv_peer_mem *pm = atomic_load_explicit(&conn->peer_mem, memory_order_acquire);
	void *cur;

	if (pm)
		return atomic_load_explicit(&pm->usable, memory_order_relaxed) && peer_alive(pm)
			       ? pm
			       : NULL;
	if (!conn->peer_pid || sv_conn_gated(conn) || atomic_load(&conn->state) != SV_CONN_UP)
		return NULL; /* not (yet) a proven peer of this host */
	pm = calloc(1, sizeof(*pm));
	if (!pm)
		return NULL;
	pm->id = atomic_fetch_add(&pm_ids, 1) + 1;
	sv_arwlock_init(&pm->lock, SV_LOCK_PEER_MAP);
	pm->pidfd = -1;
	pm_setup(pm, conn, qpn);
	cur = NULL;
	if (!atomic_compare_exchange_strong(&conn->peer_mem, &cur, pm)) {
		pm_free(pm); /* another thread was first */
		pm = cur;
	} else {
		conn->peer_mem_free = pm_free;
	}
	return atomic_load(&pm->usable) ? pm : NULL;
}

/* Is an extent of this inode still exported by the peer? */
static bool still_exported(const struct sv_xseg *x, uint64_t ino)
{
	uint32_t n = SV_MIN(atomic_load(&x->nmr), (uint32_t)SV_XMR_SLOTS);

	for (uint32_t i = 0; i < n; i++)
		if (atomic_load(&x->mr[i].rkey) && atomic_load(&x->mr[i].ino) == ino)
			return true;
	return false;
}

/* A lock held: the extent's mapping, if it is mapped already. */
static uint8_t *mapped_extent(const struct sv_peer_mem *pm, uint64_t ino, uint64_t size)
{
	for (int i = 0; i < pm->nmap; i++)
		if (pm->map[i].ino == ino && pm->map[i].size >= size)
			return pm->map[i].base;
	return NULL;
}

/* Write lock held: the mapping of the extent; NULL if it cannot be had. */
static uint8_t *map_extent(struct sv_peer_mem *pm, int fd, uint64_t ino, uint64_t size)
{
	struct pm_map *m;
	uint8_t *base;
	int f;

	base = mapped_extent(pm, ino, size);
	if (base)
		return base;
	if (pm->nmap == PM_MAPS) {
		/* make room: the extents the peer no longer exports go first,
		 * else the oldest */
		int kept = 0;

		for (int i = 0; i < pm->nmap; i++) {
			if (still_exported(pm->x, pm->map[i].ino))
				pm->map[kept++] = pm->map[i];
			else
				munmap(pm->map[i].base, pm->map[i].size);
		}
		if (kept == PM_MAPS) {
			munmap(pm->map[0].base, pm->map[0].size);
			memmove(pm->map, pm->map + 1, (PM_MAPS - 1) * sizeof(pm->map[0]));
			kept--;
		}
		pm->nmap = kept;
		atomic_fetch_add(&pm->epoch, 1);
	}
	f = take_fd(pm, fd, ino, size);
	if (f < 0)
		return NULL;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	close(f);
	if (base == (uint8_t *)MAP_FAILED)
		return NULL;
	m = &pm->map[pm->nmap++];
	m->ino = ino;
	m->base = base;
	m->size = size;
	return base;
}

/* An exported MR as the checks see it, and where its bytes are. */
struct xmr_view {
	struct sv_key_view key; /* an MR's: bound, to no QP in particular */
	uint64_t ino, size, off;
	int fd;
};

/* A consistent copy of an MR slot, when it carries rkey. */
static bool read_slot(struct sv_xmr *m, uint32_t rkey, struct xmr_view *out)
{
	uint32_t s = atomic_load_explicit(&m->seq, memory_order_acquire);

	if ((s & 1) || atomic_load(&m->rkey) != rkey)
		return false;
	out->key = (struct sv_key_view){
		.pd = atomic_load(&m->pd),
		.access = atomic_load(&m->access),
		.iova = atomic_load(&m->iova),
		.len = atomic_load(&m->len),
	};
	out->ino = atomic_load(&m->ino);
	out->size = atomic_load(&m->size);
	out->off = atomic_load(&m->off);
	out->fd = atomic_load(&m->fd);
	return atomic_load(&m->seq) == s;
}

/* The slot of key in the peer's table, *ckey and *cslot the caller's
 * cache of the last one found; -1 if it exports no such MR. */
static int key_slot(const struct sv_xseg *x, uint32_t key, uint32_t *ckey, uint32_t *cslot)
{
	uint32_t n = SV_MIN(atomic_load(&x->nmr), (uint32_t)SV_XMR_SLOTS);

	if (*ckey == key && *cslot < n)
		return (int)*cslot;
	for (uint32_t i = 0; i < n; i++)
		if (atomic_load(&x->mr[i].rkey) == key) {
			*ckey = key;
			*cslot = i;
			return (int)i;
		}
	return -1;
}

/* The slot of rkey in the peer's table; -1 if it exports no such MR. */
static int find_slot(struct sv_qp *qp, const struct sv_xseg *x, uint32_t rkey)
{
	bool cached = qp->req.xcache.rkey == rkey &&
		      qp->req.xcache.slot < SV_MIN(atomic_load(&x->nmr), (uint32_t)SV_XMR_SLOTS);
	int slot = key_slot(x, rkey, &qp->req.xcache.rkey, &qp->req.xcache.slot);

	if (!cached && slot >= 0)
		qp->req.xcache.base = NULL; /* found again: its mapping is looked up again */
	return slot;
}

/* Local buffers (the MR read lock held): an error status, or SUCCESS with
 * iov filled.  GPU memory: false (the wire handles it). */
static bool local_iov(struct sv_qp *qp, struct sv_send_wqe *w, uint32_t len, unsigned access,
		      struct iovec *iov, int *n, enum ibv_wc_status *st)
{
	sv_cu_ctx gpu[SV_MAX_SGE];
	enum sv_mem_err err;

	*n = sv_sgl_iov(qp->ctx, qp->pd, w->sge, w->num_sge, 0, len, access, iov, gpu, SV_MAX_SGE,
			&err);
	if (*n < 0) {
		*st = sv_mem_err_to_local_status(err);
		return true;
	}
	for (int i = 0; i < *n; i++)
		if (gpu[i])
			return false;
	*st = IBV_WC_SUCCESS;
	return true;
}

/* Move the bytes: the checks have passed, and `at` is the target's memory
 * (the MR read lock held, for the local SGEs: a WRITE's or READ's are iov,
 * n of them, translated already).  What to do is the opcode's row: its
 * kind, and for an atomic the wire opcode that carries it, as the
 * responder tells them apart. */
static bool execute(struct sv_qp *qp, struct sv_send_wqe *w, uint8_t *at, struct iovec *iov,
		    int n, enum ibv_wc_status *st)
{
	uint32_t kind = w->op->flags;
	uint64_t orig, v;
	size_t off = 0;
	bool ok = true;

	*st = IBV_WC_SUCCESS;
	if (kind & SV_WRF_ATOMIC_WRITE) {
		/* its 8 bytes, copied at the post, stored at once with release
		 * order: every store before it is visible first (the responder's
		 * exec_atomic_write) */
		memcpy(&v, w->inline_buf, sizeof(v));
		__atomic_store_n((uint64_t *)at, v, __ATOMIC_RELEASE);
	} else if ((kind & SV_WRF_WRITE) && w->inline_buf) {
		/* a WRITE lands in order, its last byte last (sv_dma_write) */
		if (!sv_dma_write(at, w->inline_buf, w->length))
			*st = IBV_WC_LOC_PROT_ERR;
	} else if (kind & SV_WRF_WRITE) {
		for (int i = 0; *st == IBV_WC_SUCCESS && i < n; off += iov[i++].iov_len)
			if (!sv_dma_write(at + off, iov[i].iov_base, iov[i].iov_len))
				*st = IBV_WC_LOC_PROT_ERR;
	} else if (kind & SV_WRF_READ) {
		for (int i = 0; *st == IBV_WC_SUCCESS && i < n; off += iov[i++].iov_len)
			if (!sv_dma_copy(iov[i].iov_base, at + off, iov[i].iov_len))
				*st = IBV_WC_LOC_PROT_ERR;
	} else { /* SV_WRF_ATOMIC: 8 bytes, aligned (checked) */
		ok = local_iov(qp, w, 8, IBV_ACCESS_LOCAL_WRITE, iov, &n, st);
		if (!ok || *st != IBV_WC_SUCCESS)
			return ok;
		if (w->op->wire_only == SV_OP_CMP_SWAP) {
			orig = w->wr.wr.atomic.compare_add;
			__atomic_compare_exchange_n((uint64_t *)at, &orig, w->wr.wr.atomic.swap, false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		} else {
			orig = __atomic_fetch_add((uint64_t *)at, w->wr.wr.atomic.compare_add,
						  __ATOMIC_SEQ_CST);
		}
		/* the result goes to the local SGE as the wire's would (host order) */
		for (int i = 0; i < n; off += iov[i++].iov_len)
			if (!sv_copy_guarded(iov[i].iov_base, (uint8_t *)&orig + off, iov[i].iov_len))
				*st = IBV_WC_LOC_PROT_ERR;
	}
	return ok;
}

/* What a WQE asks of the target, from its opcode's row. */
struct direct_target {
	uint32_t rkey;
	uint64_t va, len;
	unsigned int need; /* the remote access */
	bool word;         /* one aligned 8-byte word (atomics, atomic write) */
};

/* False when w cannot run here whatever the target says: its opcode is not
 * a direct one, or it moves no byte. */
static bool direct_target(const struct sv_send_wqe *w, struct direct_target *t)
{
	const struct sv_wr_opcode_info *op = w->op;

	if (!(op->flags & SV_WRF_DIRECT))
		return false;
	t->need = op->remote_access;
	t->word = sv_wr_word(op);
	if (op->flags & SV_WRF_ATOMIC) {
		t->rkey = w->wr.wr.atomic.rkey;
		t->va = w->wr.wr.atomic.remote_addr;
	} else {
		t->rkey = w->wr.wr.rdma.rkey;
		t->va = w->wr.wr.rdma.remote_addr;
	}
	t->len = t->word ? 8 : w->length;
	return t->len != 0;
}

/* The slot of the QP dq (one of pm's) in pm's QP table, cached by view and
 * QPN: the permutation is four rounds of table lookups, and neither
 * changes from one WQE to the next. */
static uint32_t peer_qp_slot(struct sv_qp *qp, const struct sv_peer_mem *pm, uint32_t dq)
{
	if (qp->req.xcache.qslot_pm != pm->id || qp->req.xcache.qslot_qpn != dq) {
		qp->req.xcache.qslot = sv_qpn_unpermute(&pm->perm, dq);
		qp->req.xcache.qslot_qpn = dq;
		qp->req.xcache.qslot_pm = pm->id;
	}
	return qp->req.xcache.qslot;
}

/* The peer's memory, where this QP may act on it itself; NULL: the wire.
 * (XRC: the target's keys are checked against the PD of the SRQ each
 * request names, which only its responder knows: always the wire.) */
static struct sv_peer_mem *direct_peer(struct sv_qp *qp, struct sv_conn *conn)
{
	if (qp->ti->xrc || sv_faults_enabled || atomic_load(&conn->state) != SV_CONN_UP)
		return NULL;
	return peer_mem(conn, qp->attr.dest_qp_num);
}

bool sv_direct_soon(struct sv_qp *qp, struct sv_conn *conn, const struct sv_send_wqe *w)
{
	struct direct_target t;

	if (w->op->flags & SV_WRF_DIRECT_RECV) {
		/* as below, for the receives of the peer's QP */
		if (qp->req.xs && sv_now_ns() - qp->req.xs->miss_ns < SV_DIRECT_RETRY_NS)
			return false;
		return direct_peer(qp, conn);
	}
	if (!direct_target(w, &t))
		return false;
	/* a key the wire served is tried again now and then: what made it
	 * fail (the peer not yet exporting the MR, say) may have passed, and
	 * a queue kept full never drains by itself to let sv_direct_exec see */
	if (t.rkey == qp->req.xcache.miss && sv_now_ns() - qp->req.xcache.miss_ns < SV_DIRECT_RETRY_NS)
		return false;
	return direct_peer(qp, conn);
}

/* The responder's checks (access_check.h) against the target's table, q's
 * busy count raised: the offset of the range in the extent, or false (the
 * wire then, whose responder answers as the IBA requires). */
static bool check_target(struct sv_qp *qp, struct sv_peer_mem *pm, struct sv_xqp *q,
			 const struct direct_target *t, struct xmr_view *m, uint64_t *at_off)
{
	int slot;

	if (!atomic_load(&q->open) || atomic_load(&q->dest_qpn) != qp->ex.qp_base.qp_num ||
	    !sv_qp_allows_remote(atomic_load(&q->access), t->need, t->va, t->word) ||
	    (slot = find_slot(qp, pm->x, t->rkey)) < 0 || !read_slot(&pm->x->mr[slot], t->rkey, m) ||
	    sv_key_allows_remote(&m->key, atomic_load(&q->pd), qp->attr.dest_qp_num, t->need,
				 t->va, t->len) != SV_MEM_OK)
		return false;
	/* and the extent, as mapped, holds the range */
	*at_off = m->off + (t->va - m->key.iova);
	return *at_off <= m->size && t->len <= m->size - *at_off;
}

/* The local buffers, checked as the requester would (the MR read lock
 * held): false with *st set when they fail; a WRITE's or READ's are
 * translated into iov once, for the copy.  GPU memory: false with *st
 * SUCCESS (the wire handles it). */
static bool check_local(struct sv_qp *qp, struct sv_send_wqe *w, struct iovec *iov, int *niov,
			enum ibv_wc_status *st)
{
	enum sv_mem_err e;

	*st = IBV_WC_SUCCESS;
	if (w->op->flags & SV_WRF_ATOMIC) {
		e = sv_sgl_check_locked(qp->ctx, qp->pd, w->sge, w->num_sge, w->op->local_access);
		if (e != SV_MEM_OK)
			*st = sv_mem_err_to_local_status(e);
		return e == SV_MEM_OK;
	}
	return local_iov(qp, w, w->length, w->op->local_access, iov, niov, st) &&
	       *st == IBV_WC_SUCCESS;
}

/* pm->lock held: the mapping of the peer's memfd (an extent, the receive
 * arena).  Mapped already, by another QP or before the epoch moved, it is
 * found under the read lock (a writer costs a membarrier, arwlock.h);
 * else the read lock is traded for the write lock (*wrlocked). */
static uint8_t *peer_map(struct sv_peer_mem *pm, int fd, uint64_t ino, uint64_t size,
			 bool *wrlocked)
{
	uint8_t *base = mapped_extent(pm, ino, size);

	if (base || fd < 0)
		return base;
	if (!*wrlocked) {
		sv_arwlock_rdunlock(&pm->lock);
		sv_arwlock_wrlock(&pm->lock);
		*wrlocked = true;
	}
	return map_extent(pm, fd, ino, size);
}

/* pm->lock held: the mapping of m's extent, the QP's cache first.  May
 * trade the read lock for the write lock (*wrlocked). */
static uint8_t *extent_base(struct sv_qp *qp, struct sv_peer_mem *pm, const struct xmr_view *m,
			    bool *wrlocked)
{
	uint8_t *base = qp->req.xcache.base;

	if (base && qp->req.xcache.pm_id == pm->id && qp->req.xcache.ino == m->ino &&
	    qp->req.xcache.epoch == atomic_load(&pm->epoch))
		return base;
	base = peer_map(pm, m->fd, m->ino, m->size, wrlocked);
	qp->req.xcache.base = base;
	qp->req.xcache.ino = m->ino;
	qp->req.xcache.epoch = atomic_load(&pm->epoch);
	qp->req.xcache.pm_id = pm->id;
	return base;
}

/* A bit of the peer's ready map set (seq_cst), with no write when set. */
static void mark_ready(_Atomic uint64_t *word, uint64_t bit)
{
	if (!(atomic_load_explicit(word, memory_order_seq_cst) & bit))
		atomic_fetch_or(word, bit);
}

/* A piece of a receive buffer of the peer's, as the placement writes it. */
struct recv_piece {
	uint8_t *at;
	uint32_t len;
};

/*
 * The SGEs sge[0..n) of a receive WQE of the peer's, checked as the
 * responder checks the WQE it takes (each SGE's lkey names an MR of pd,
 * the queue's: its QP's or its SRQ's, that allows local writes and covers
 * it): where each of the len
 * bytes goes, in pieces; false if any check fails or the buffers hold less
 * than len (the wire's responder then answers as the IBA requires).
 */
static bool recv_pieces(struct sv_qp *qp, struct sv_peer_mem *pm, uintptr_t pd,
			const struct ibv_sge *sge, uint32_t n, uint32_t len,
			struct recv_piece *out, int *nout, bool *wrlocked)
{
	*nout = 0;
	for (uint32_t i = 0; i < n && len; i++) {
		uint32_t take = SV_MIN(sge[i].length, len);
		struct xmr_view m;
		int slot;
		uint64_t off;
		uint8_t *base;

		if (!take)
			continue;
		/* (the table's MRs: lkey == rkey, and a window never has an lkey) */
		slot = key_slot(pm->x, sge[i].lkey, &qp->req.xs->recv_lkey, &qp->req.xs->recv_slot);
		if (slot < 0 || !read_slot(&pm->x->mr[slot], sge[i].lkey, &m) ||
		    sv_key_allows_range(&m.key, pd, IBV_ACCESS_LOCAL_WRITE, sge[i].addr, take) !=
			    SV_MEM_OK)
			return false;
		off = m.off + (sge[i].addr - m.key.iova);
		if (off > m.size || take > m.size - off)
			return false;
		base = peer_map(pm, m.fd, m.ino, m.size, wrlocked);
		if (!base)
			return false;
		out[(*nout)++] = (struct recv_piece){ base + off, take };
		len -= take;
	}
	return len == 0;
}

/* A WRITE with immediate's target, checked as a WRITE's (check_target):
 * one piece where its bytes go (none for zero bytes, which name no
 * memory); false if the checks fail. */
static bool write_piece(struct sv_qp *qp, struct sv_peer_mem *pm, struct sv_xqp *q,
			const struct sv_send_wqe *w, struct recv_piece *out, int *nout,
			bool *wrlocked)
{
	struct direct_target t;
	struct xmr_view m;
	uint64_t at_off;
	uint8_t *base;

	*nout = 0;
	if (!w->length)
		return true;
	t.rkey = w->wr.wr.rdma.rkey;
	t.va = w->wr.wr.rdma.remote_addr;
	t.len = w->length;
	t.need = w->op->remote_access;
	t.word = false;
	if (!check_target(qp, pm, q, &t, &m, &at_off))
		return false;
	base = extent_base(qp, pm, &m, wrlocked);
	if (!base)
		return false;
	out[(*nout)++] = (struct recv_piece){ base + at_off, w->length };
	return true;
}

/* The bytes of w, from its local buffers (iov) or its inline copy, into
 * the pieces; false if a local buffer faults. */
static bool place_pieces(const struct sv_send_wqe *w, const struct iovec *iov, int niov,
			 const struct recv_piece *to, int nto)
{
	const uint8_t *src = w->inline_buf;
	size_t in_off = 0;
	int ii = 0;

	for (int k = 0; k < nto; k++) {
		uint32_t done = 0;

		while (done < to[k].len) {
			size_t n;
			const uint8_t *from;

			if (src) {
				from = src + in_off;
				n = to[k].len - done;
			} else {
				if (ii >= niov)
					return false;
				from = (const uint8_t *)iov[ii].iov_base + in_off;
				n = SV_MIN(iov[ii].iov_len - in_off, (size_t)(to[k].len - done));
			}
			/* (in address order, the last byte last: a WRITE's
			 * target may be watched, as sv_dma_write says) */
			if (!sv_dma_write(to[k].at + done, from, n))
				return false;
			done += (uint32_t)n;
			in_off += n;
			if (!src && in_off == iov[ii].iov_len) {
				ii++;
				in_off = 0;
			}
		}
	}
	return true;
}

/*
 * A SEND (with immediate), or a WRITE with immediate, placed into the
 * receive WQE at the head of the peer's QP (direct_recv.h): taken by
 * compare-and-swap, the bytes copied, the result written and marked done
 * last, the peer's slot marked ready if its record asks for it
 * (SV_XRQ_NOTIFY: *marked, and its caller wakes the peer if it sleeps).
 * WIRE when any check fails, no receive is posted (RNR, which
 * the wire's responder answers), or the compare-and-swap is lost.  Called
 * with the peer's QP record entered (q, busy raised) and the local
 * buffers checked (iov; the MR read lock held).
 */
static enum sv_direct place_send(struct sv_qp *qp, struct sv_peer_mem *pm, struct sv_xqp *q,
				 uint32_t slot, struct sv_send_wqe *w, const struct iovec *iov,
				 int niov, enum ibv_wc_status *st, bool *marked)
{
	uint32_t off = atomic_load(&q->rq_off), shape = atomic_load(&q->rq_shape),
		 size = shape >> 8, msge = shape & 0xff & ~SV_XRQ_NOTIFY, idx, nsge;
	uint64_t blk, t, gen, arena = pm->x->arena_size;
	struct recv_piece to[SV_MAX_SGE];
	struct ibv_sge sge[SV_MAX_SGE];
	enum sv_direct r = SV_DIRECT_WIRE;
	bool wrlocked = false;
	struct sv_xrecv *e;
	struct sv_xrq *x;
	uint8_t *base;
	int nto;

	if (!off) {
		/* its queue is private: asked for, it moves at the next post */
		if (!atomic_load_explicit(&q->rq_want, memory_order_relaxed))
			atomic_store(&q->rq_want, 1);
		return SV_DIRECT_WIRE;
	}
	if (!size || !msge || msge > SV_MAX_SGE)
		return SV_DIRECT_WIRE;
	blk = sv_xrq_bytes(size, msge);
	if (off % 64 || arena > SV_XRQ_ARENA || off > arena || blk > arena - off)
		return SV_DIRECT_WIRE;
	sv_arwlock_rdlock(&pm->lock);
	base = peer_map(pm, pm->x->arena_fd, pm->x->arena_ino, arena, &wrlocked);
	if (!base)
		goto out;
	x = (struct sv_xrq *)(base + off);
	t = atomic_load_explicit(&x->taken, memory_order_acquire);
	gen = atomic_load_explicit(&x->gen, memory_order_relaxed);
	/* what the queue held when last read, unless it was reset since:
	 * posted is written at every post, and reading it each time is a
	 * line the owner's post took away */
	if (qp->req.xs->rq_pm != pm || qp->req.xs->rq_off != off || qp->req.xs->rq_gen != gen ||
	    t >= qp->req.xs->rq_posted) {
		qp->req.xs->rq_pm = pm;
		qp->req.xs->rq_off = off;
		qp->req.xs->rq_gen = gen;
		qp->req.xs->rq_posted = atomic_load_explicit(&x->posted, memory_order_acquire);
		if (t >= qp->req.xs->rq_posted)
			goto out; /* no receive: RNR, the wire's */
	}
	idx = (uint32_t)(t % size);
	e = sv_xrecv_at(base + off + sizeof(struct sv_xrq), msge, idx);
	/* the owner's post wrote the WQE's line and the result goes into it:
	 * asked for with intent to write, it comes over once, owned, rather
	 * than shared for the reads and then again for the stores */
	sv_prefetch_for_write(e);
	nsge = e->num_sge;
	if (nsge > msge)
		goto out;
	if (w->op->flags & SV_WRF_WRITE) {
		/* a WRITE with immediate: its bytes go where its rkey says, the
		 * receive only completes */
		if (!write_piece(qp, pm, q, w, to, &nto, &wrlocked))
			goto out;
	} else {
		/* (by element: memcpy's rep movs is slow to start here, for
		 * the one SGE most receives have) */
		for (uint32_t i = 0; i < nsge; i++)
			sge[i] = sv_xrecv_sge(e)[i];
		if (!recv_pieces(qp, pm, atomic_load_explicit(&x->pd, memory_order_relaxed), sge,
				 nsge, w->length, to, &nto, &wrlocked))
			goto out;
	}
	/* the WQE is ours once taken: from here on it completes, here */
	if (!atomic_compare_exchange_strong(&x->taken, &t, t + 1))
		goto out;
	/* (an SRQ's completes on that QP's CQ; a WQE left taken by a process
	 * killed inside its copy is let go once it has exited) */
	e->qpn = qp->attr.dest_qp_num;
	atomic_store_explicit(&e->pid, (int32_t)qp->ctx->owner, memory_order_relaxed);
	/* (a local buffer that faults, unmapped under its MR: the send
	 * fails, and so does the receive it took, as aborted) */
	*st = place_pieces(w, iov, niov, to, nto) ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR;
	e->byte_len = *st == IBV_WC_SUCCESS ? w->length : 0;
	e->imm = w->wr.imm_data;
	/* (the owner, its QP gone to ERR meanwhile, may have taken the WQE
	 * back, flushed: then the message goes by the wire, where the
	 * responder in ERR answers nothing, as a NIC's.  The owner has
	 * completed the WQE by then, and what this writes over its mark
	 * completes nothing) */
	if (atomic_exchange(&e->flags,
			    SV_XRECV_DONE | (*st != IBV_WC_SUCCESS ? SV_XRECV_ABORTED : 0) |
				    ((w->op->flags & SV_WRF_IMM) ? SV_XRECV_IMM : 0) |
				    ((w->op->flags & SV_WRF_WRITE) ? SV_XRECV_WRITE : 0) |
				    ((w->wr.send_flags & IBV_SEND_SOLICITED) ? SV_XRECV_SOLICITED : 0)) &
	    SV_XRECV_FLUSHED) {
		*st = IBV_WC_SUCCESS;
		goto out;
	}
	/* the owner's engine finds the slot marked (a poll of its CQ finds
	 * done moved): a bit the engine has not taken yet is not set again,
	 * its taking comes before the load of done (seq_cst), which then sees
	 * this one.  Only if the record asks: else the owner's polls alone
	 * look, and the two lines are not taken from the owner at every
	 * message */
	if (shape & SV_XRQ_NOTIFY) {
		mark_ready(&pm->x->rq_ready[slot / 64], 1ull << (slot % 64));
		mark_ready(&pm->x->rq_ready_sum[slot / 4096], 1ull << ((slot / 64) % 64));
		*marked = true;
	}
	r = SV_DIRECT_DONE;
out:
	if (wrlocked)
		sv_arwlock_wrunlock(&pm->lock);
	else
		sv_arwlock_rdunlock(&pm->lock);
	return r;
}

/* A SEND (with immediate) to a peer of this host (place_send). */
static enum sv_direct direct_send(struct sv_qp *qp, struct sv_conn *conn, struct sv_send_wqe *w,
				  bool may_defer)
{
	uint32_t dq = qp->attr.dest_qp_num, slot;
	struct iovec iov[SV_MAX_SGE];
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	enum sv_direct r = SV_DIRECT_WIRE;
	struct sv_peer_mem *pm;
	struct sv_xqp *q;
	int niov = 0;
	bool local, marked = false;

	if (!(pm = direct_peer(qp, conn)) || (dq & ~(uint32_t)SV_QPN_LOW) != pm->qpn_base)
		return SV_DIRECT_WIRE;
	if (w->length > SV_DIRECT_INLINE_MAX && may_defer)
		return SV_DIRECT_DEFER; /* the engine thread copies it */
	if (!qp->req.xs && !(qp->req.xs = calloc(1, sizeof(*qp->req.xs))))
		return SV_DIRECT_WIRE;
	slot = peer_qp_slot(qp, pm, dq);
	q = &pm->x->qp[slot];
	local = !w->inline_buf && w->length;
	if (local) {
		sv_mr_read_lock(qp->ctx);
		if (!check_local(qp, w, iov, &niov, &st)) {
			sv_mr_read_unlock(qp->ctx);
			if (st == IBV_WC_SUCCESS)
				return SV_DIRECT_WIRE; /* GPU memory */
			w->status = st;
			return SV_DIRECT_DONE;
		}
	}
	sv_xqp_enter(q);
	if (atomic_load(&q->open) && atomic_load(&q->dest_qpn) == qp->ex.qp_base.qp_num)
		r = place_send(qp, pm, q, slot, w, iov, niov, &st, &marked);
	sv_xqp_leave(q);
	if (local)
		sv_mr_read_unlock(qp->ctx);
	if (r == SV_DIRECT_DONE) {
		w->status = st;
		if (marked && conn->ops->wake)
			conn->ops->wake(conn);
	} else {
		qp->req.xs->miss_ns = sv_now_ns();
	}
	return r;
}

enum sv_direct sv_direct_exec(struct sv_qp *qp, struct sv_conn *conn, struct sv_send_wqe *w,
			      bool may_defer)
{
	uint32_t dq = qp->attr.dest_qp_num;
	struct iovec iov[SV_MAX_SGE];
	int niov = 0;
	struct direct_target t;
	struct sv_peer_mem *pm;
	struct sv_xqp *q;
	struct xmr_view m;
	uint64_t at_off;
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	uint8_t *base;
	enum sv_direct r = SV_DIRECT_WIRE;
	bool local, wrlocked = false;

	if ((w->op->flags & SV_WRF_DIRECT_RECV) && qp->ti->reliable)
		return direct_send(qp, conn, w, may_defer);
	if (!direct_target(w, &t) || !(pm = direct_peer(qp, conn)))
		return SV_DIRECT_WIRE;
	if ((t.word && (t.va & 7)) || (dq & ~(uint32_t)SV_QPN_LOW) != pm->qpn_base)
		return SV_DIRECT_WIRE; /* misaligned: the responder's error */
	q = &pm->x->qp[peer_qp_slot(qp, pm, dq)];
	/* the local buffers first, under our MR table's read lock, held until
	 * the copy is over (a deregistration of ours waits for it).  Inline
	 * data (a WRITE's, an atomic write's, copied at the post) reaches no
	 * local MR: then no MR lock at all */
	local = !w->inline_buf;
	if (local) {
		sv_mr_read_lock(qp->ctx);
		if (!check_local(qp, w, iov, &niov, &st)) {
			sv_mr_read_unlock(qp->ctx);
			if (st == IBV_WC_SUCCESS)
				return SV_DIRECT_WIRE; /* GPU memory */
			/* completed without the peer's memory being looked at */
			w->status = st;
			return SV_DIRECT_DONE;
		}
	}
	sv_xqp_enter(q); /* before anything is checked (mem_export.h) */
	if (!check_target(qp, pm, q, &t, &m, &at_off))
		goto out;
	if (t.len > SV_DIRECT_INLINE_MAX && may_defer) {
		r = SV_DIRECT_DEFER;
		goto out;
	}
	sv_arwlock_rdlock(&pm->lock);
	base = extent_base(qp, pm, &m, &wrlocked);
	if (base && execute(qp, w, base + at_off, iov, niov, &st))
		r = SV_DIRECT_DONE;
	if (wrlocked)
		sv_arwlock_wrunlock(&pm->lock);
	else
		sv_arwlock_rdunlock(&pm->lock);
out:
	sv_xqp_leave(q);
	if (local)
		sv_mr_read_unlock(qp->ctx);
	if (r == SV_DIRECT_DONE)
		w->status = st;
	/* what the wire serves, the wire keeps serving: no waiting for it to
	 * drain before the next WQE with that key (sv_direct_soon) */
	qp->req.xcache.miss = r == SV_DIRECT_WIRE ? t.rkey : 0;
	if (r == SV_DIRECT_WIRE)
		qp->req.xcache.miss_ns = sv_now_ns();
	return r;
}

/* The shortcut's WRITE or READ, executed as sv_direct_exec would execute
 * its WQE (*st how); false when a check failed and nothing moved. */
static bool post_rdma(struct sv_qp *qp, struct sv_peer_mem *pm, const struct ibv_send_wr *wr,
		      const struct sv_wr_opcode_info *op, uint32_t len, bool inl,
		      enum ibv_wc_status *st)
{
	bool read = op->flags & SV_WRF_READ, placed = false, wrlocked = false;
	struct sv_xqp *q = &pm->x->qp[peer_qp_slot(qp, pm, qp->attr.dest_qp_num)];
	/* inline data is read now, as sq_post_one would copy it: no lkey */
	uint8_t *local = (uint8_t *)(uintptr_t)wr->sg_list[0].addr, *base;
	struct direct_target t;
	struct xmr_view m;
	sv_cu_ctx gpu = NULL;
	uint64_t at_off;

	if (!len)
		return false; /* (it names no memory: the wire's) */
	/* (field by field: a compound literal is zeroed first, with a rep
	 * stos that alone took 15 % of the shortcut's time) */
	t.rkey = wr->wr.rdma.rkey;
	t.va = wr->wr.rdma.remote_addr;
	t.len = len;
	t.need = op->remote_access;
	t.word = false;
	if (!inl) {
		sv_mr_read_lock(qp->ctx);
		if (sv_mr_translate(qp->ctx, wr->sg_list[0].lkey, qp->pd, wr->sg_list[0].addr, len,
				    op->local_access, &local, &gpu) != SV_MEM_OK ||
		    gpu) {
			sv_mr_read_unlock(qp->ctx);
			return false;
		}
	}
	sv_xqp_enter(q);
	if (check_target(qp, pm, q, &t, &m, &at_off)) {
		sv_arwlock_rdlock(&pm->lock);
		base = extent_base(qp, pm, &m, &wrlocked);
		if (base) {
			placed = true;
			/* as execute() moves them */
			if (read ? !sv_dma_copy(local, base + at_off, len)
				 : !sv_dma_write(base + at_off, local, len))
				*st = IBV_WC_LOC_PROT_ERR;
		}
		if (wrlocked)
			sv_arwlock_wrunlock(&pm->lock);
		else
			sv_arwlock_rdunlock(&pm->lock);
	}
	sv_xqp_leave(q);
	if (!inl)
		sv_mr_read_unlock(qp->ctx);
	if (placed)
		qp->req.xcache.miss = 0;
	return placed;
}

/* The shortcut's SEND (with immediate) or WRITE with immediate, placed by
 * direct_send from a WQE on the stack (*st how); false when it was not
 * placed (a check failed, or no receive is posted: RNR, the wire's).  The
 * WQE has the fields the placement reads and no others: zeroed whole,
 * its 200-odd bytes were a rep stos that cost more than the ring saves. */
static __attribute__((noinline)) bool post_send(struct sv_qp *qp, const struct ibv_send_wr *wr,
		      const struct sv_wr_opcode_info *op, uint32_t len, bool inl,
		      enum ibv_wc_status *st)
{
	struct sv_send_wqe w;

	w.wr.imm_data = wr->imm_data;
	w.wr.send_flags = wr->send_flags;
	w.wr.wr.rdma.remote_addr = wr->wr.rdma.remote_addr;
	w.wr.wr.rdma.rkey = wr->wr.rdma.rkey;
	w.op = op;
	w.sge = (struct ibv_sge *)wr->sg_list;
	w.num_sge = 1;
	w.length = len;
	/* inline data: the caller's buffer itself, read now */
	w.inline_buf = inl ? (uint8_t *)(uintptr_t)wr->sg_list[0].addr : NULL;
	w.status = IBV_WC_SUCCESS;
	if (direct_send(qp, qp->conn, &w, true) != SV_DIRECT_DONE)
		return false;
	*st = w.status;
	return true;
}

bool sv_direct_post(struct sv_qp *qp, const struct ibv_send_wr *wr)
{
	const struct sv_wr_opcode_info *op;
	enum ibv_wc_status st = IBV_WC_SUCCESS;
	struct sv_peer_mem *pm;
	uint32_t len;
	bool inl, done;

	/* the conditions of sq_post_one and post_alone (requester.c) for these
	 * cases; anything else, the usual way */
	if ((wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_READ &&
	     wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM &&
	     wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) ||
	    wr->next || wr->num_sge != 1 || !wr->sg_list || qp->cap.max_send_sge < 1 ||
	    !qp->sq.max_wr || !sv_direct_alone(qp, 0))
		return false;
	op = sv_wr_opcode_info(wr->opcode);
	len = wr->sg_list[0].length;
	/* (a READ's inline flag means nothing, as in sq_post_one) */
	inl = (wr->send_flags & IBV_SEND_INLINE) && (op->flags & SV_WRF_INLINE_OK);
	if (len > SV_DIRECT_INLINE_MAX || (inl && len > qp->cap.max_inline_data))
		return false;
	if (op->flags & SV_WRF_DIRECT_RECV)
		done = post_send(qp, wr, op, len, inl, &st);
	else
		done = (pm = direct_peer(qp, qp->conn)) &&
		       (qp->attr.dest_qp_num & ~(uint32_t)SV_QPN_LOW) == pm->qpn_base &&
		       post_rdma(qp, pm, wr, op, len, inl, &st);
	if (!done)
		return false; /* the usual way finds the same, and sends it by the wire */
	sv_requester_completion(qp, wr->wr_id, wr->send_flags, op, len, st);
	if (st != IBV_WC_SUCCESS)
		sv_qp_enter_error(qp); /* as sv_requester_retire after a failed WQE */
	return true;
}
