/*
 * The ibv_qp_ex "wr_*" posting interface.  Between ibv_wr_start() and
 * ibv_wr_complete() work requests are staged as ordinary ibv_send_wr; the
 * batch is then posted through the same path as ibv_post_send, so both
 * interfaces share every check and the same error behaviour.
 */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);

struct sv_wr_item {
	struct ibv_send_wr wr;
	struct ibv_sge sge[SV_MAX_SGE];
	uint8_t *inline_copy;
};

struct sv_wr_batch {
	struct sv_wr_item *items;
	uint32_t n, cap;
	int error; /* first staging error, reported by wr_complete */
};

static struct sv_qp *qpx(struct ibv_qp_ex *ex)
{
	return SV_CONTAINER_OF(ex, struct sv_qp, ex);
}

static void batch_clear(struct sv_wr_batch *b)
{
	for (uint32_t i = 0; i < b->n; i++)
		free(b->items[i].inline_copy);
	b->n = 0;
	b->error = 0;
}

static void wr_start(struct ibv_qp_ex *ex)
{
	struct sv_qp *qp = qpx(ex);

	if (!qp->batch)
		qp->batch = calloc(1, sizeof(*qp->batch));
	if (qp->batch)
		batch_clear(qp->batch);
}

static struct ibv_send_wr *new_wr(struct ibv_qp_ex *ex, enum ibv_wr_opcode op)
{
	struct sv_wr_batch *b = qpx(ex)->batch;
	struct sv_wr_item *it;

	if (!b)
		return NULL;
	if (b->n == b->cap) {
		uint32_t c = b->cap ? b->cap * 2 : 16;
		struct sv_wr_item *n = realloc(b->items, sizeof(*n) * c);

		if (!n) {
			b->error = ENOMEM;
			return NULL;
		}
		b->items = n;
		b->cap = c;
	}
	it = &b->items[b->n++];
	memset(&it->wr, 0, sizeof(it->wr));
	it->inline_copy = NULL;
	it->wr.wr_id = ex->wr_id;
	it->wr.send_flags = ex->wr_flags;
	it->wr.opcode = op;
	return &it->wr;
}

static struct sv_wr_item *cur(struct ibv_qp_ex *ex)
{
	struct sv_wr_batch *b = qpx(ex)->batch;

	return (b && b->n) ? &b->items[b->n - 1] : NULL;
}

static void wr_send(struct ibv_qp_ex *ex)
{
	new_wr(ex, IBV_WR_SEND);
}

static void wr_send_imm(struct ibv_qp_ex *ex, __be32 imm)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->imm_data = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *ex, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_RDMA_WRITE);

	if (w) {
		w->wr.rdma.rkey = rkey;
		w->wr.rdma.remote_addr = addr;
	}
}

static void wr_rdma_write_imm(struct ibv_qp_ex *ex, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_RDMA_WRITE_WITH_IMM);

	if (w) {
		w->wr.rdma.rkey = rkey;
		w->wr.rdma.remote_addr = addr;
		w->imm_data = imm;
	}
}

static void wr_rdma_read(struct ibv_qp_ex *ex, uint32_t rkey, uint64_t addr)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_RDMA_READ);

	if (w) {
		w->wr.rdma.rkey = rkey;
		w->wr.rdma.remote_addr = addr;
	}
}

static void wr_cmp_swp(struct ibv_qp_ex *ex, uint32_t rkey, uint64_t addr, uint64_t compare,
		       uint64_t swap)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_ATOMIC_CMP_AND_SWP);

	if (w) {
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.remote_addr = addr;
		w->wr.atomic.compare_add = compare;
		w->wr.atomic.swap = swap;
	}
}

static void wr_fetch_add(struct ibv_qp_ex *ex, uint32_t rkey, uint64_t addr, uint64_t add)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_ATOMIC_FETCH_AND_ADD);

	if (w) {
		w->wr.atomic.rkey = rkey;
		w->wr.atomic.remote_addr = addr;
		w->wr.atomic.compare_add = add;
	}
}

static void wr_unsupported(struct ibv_qp_ex *ex)
{
	struct sv_wr_batch *b = qpx(ex)->batch;

	if (b && !b->error)
		b->error = EOPNOTSUPP;
}

/* Type 2 windows (a type 1 one is refused by wr_complete, EINVAL). */
static void wr_bind_mw(struct ibv_qp_ex *ex, struct ibv_mw *mw, uint32_t rkey,
		       const struct ibv_mw_bind_info *info)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_BIND_MW);

	if (!w)
		return;
	if (!info) {
		qpx(ex)->batch->error = EINVAL;
		return;
	}
	w->bind_mw.mw = mw;
	w->bind_mw.rkey = rkey;
	w->bind_mw.bind_info = *info;
}

static void wr_local_inv(struct ibv_qp_ex *ex, uint32_t rkey)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_LOCAL_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_send_inv(struct ibv_qp_ex *ex, uint32_t rkey)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_SEND_WITH_INV);

	if (w)
		w->invalidate_rkey = rkey;
}

static void wr_send_tso(struct ibv_qp_ex *ex, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	(void)hdr;
	(void)hdr_sz;
	(void)mss;
	wr_unsupported(ex);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *ex, size_t n, const struct ibv_data_buf *bufs);

/* The 8 bytes are copied now (the caller's buffer may be reused at return). */
static void wr_atomic_write(struct ibv_qp_ex *ex, uint32_t rkey, uint64_t addr, const void *data)
{
	struct ibv_send_wr *w = new_wr(ex, IBV_WR_ATOMIC_WRITE);
	struct ibv_data_buf b = { .addr = (void *)data, .length = 8 };

	if (!w)
		return;
	w->wr.rdma.rkey = rkey;
	w->wr.rdma.remote_addr = addr;
	if (!data) {
		qpx(ex)->batch->error = EINVAL;
		return;
	}
	wr_set_inline_data_list(ex, 1, &b);
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *ex, uint32_t srqn)
{
	struct sv_wr_item *it = cur(ex);

	if (it)
		it->wr.qp_type.xrc.remote_srqn = srqn;
}

static void wr_set_ud_addr(struct ibv_qp_ex *ex, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct sv_wr_item *it = cur(ex);

	if (it) {
		it->wr.wr.ud.ah = ah;
		it->wr.wr.ud.remote_qpn = qpn;
		it->wr.wr.ud.remote_qkey = qkey;
	}
}

static void wr_set_sge_list(struct ibv_qp_ex *ex, size_t n, const struct ibv_sge *sg)
{
	struct sv_wr_item *it = cur(ex);

	if (!it)
		return;
	if (n > SV_MAX_SGE) {
		qpx(ex)->batch->error = EINVAL;
		return;
	}
	memcpy(it->sge, sg, sizeof(*sg) * n);
	it->wr.num_sge = (int)n;
}

static void wr_set_sge(struct ibv_qp_ex *ex, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = { .addr = addr, .length = length, .lkey = lkey };

	wr_set_sge_list(ex, 1, &s);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *ex, size_t n, const struct ibv_data_buf *bufs)
{
	struct sv_wr_item *it = cur(ex);
	size_t total = 0, off = 0;

	if (!it)
		return;
	for (size_t i = 0; i < n; i++)
		total += bufs[i].length;
	free(it->inline_copy);
	it->inline_copy = malloc(total ? total : 1);
	if (!it->inline_copy) {
		qpx(ex)->batch->error = ENOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(it->inline_copy + off, bufs[i].addr, bufs[i].length);
		off += bufs[i].length;
	}
	it->sge[0].addr = (uintptr_t)it->inline_copy;
	it->sge[0].length = (uint32_t)total;
	it->sge[0].lkey = 0;
	it->wr.num_sge = 1;
	it->wr.send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *ex, void *addr, size_t length)
{
	struct ibv_data_buf b = { .addr = addr, .length = length };

	wr_set_inline_data_list(ex, 1, &b);
}

static int wr_complete(struct ibv_qp_ex *ex)
{
	struct sv_qp *qp = qpx(ex);
	struct sv_wr_batch *b = qp->batch;
	struct ibv_send_wr *bad;
	int err;

	if (!b)
		return ENOMEM;
	if (b->error || !b->n) {
		err = b->error;
		batch_clear(b);
		return err;
	}
	/* link only now: growing the batch may have moved the items */
	for (uint32_t i = 0; i < b->n; i++) {
		b->items[i].wr.sg_list = b->items[i].sge;
		b->items[i].wr.next = i + 1 < b->n ? &b->items[i + 1].wr : NULL;
	}
	err = sv_post_send(&qp->ex.qp_base, &b->items[0].wr, &bad);
	batch_clear(b);
	return err;
}

static void wr_abort(struct ibv_qp_ex *ex)
{
	if (qpx(ex)->batch)
		batch_clear(qpx(ex)->batch);
}

void sv_qp_ex_init(struct sv_qp *qp, uint64_t send_ops_flags)
{
	struct ibv_qp_ex *ex = &qp->ex;

	ex->comp_mask = 0;
	(void)send_ops_flags; /* every supported op is always available */
	ex->wr_atomic_cmp_swp = wr_cmp_swp;
	ex->wr_atomic_fetch_add = wr_fetch_add;
	ex->wr_bind_mw = wr_bind_mw;
	ex->wr_local_inv = wr_local_inv;
	ex->wr_rdma_read = wr_rdma_read;
	ex->wr_rdma_write = wr_rdma_write;
	ex->wr_rdma_write_imm = wr_rdma_write_imm;
	ex->wr_send = wr_send;
	ex->wr_send_imm = wr_send_imm;
	ex->wr_send_inv = wr_send_inv;
	ex->wr_send_tso = wr_send_tso;
	ex->wr_set_ud_addr = wr_set_ud_addr;
	ex->wr_set_xrc_srqn = wr_set_xrc_srqn;
	ex->wr_set_inline_data = wr_set_inline_data;
	ex->wr_set_inline_data_list = wr_set_inline_data_list;
	ex->wr_set_sge = wr_set_sge;
	ex->wr_set_sge_list = wr_set_sge_list;
	ex->wr_start = wr_start;
	ex->wr_complete = wr_complete;
	ex->wr_abort = wr_abort;
	ex->wr_atomic_write = wr_atomic_write;
}

void sv_qp_ex_free(struct sv_qp *qp)
{
	if (qp->batch) {
		batch_clear(qp->batch);
		free(qp->batch->items);
		free(qp->batch);
	}
}
