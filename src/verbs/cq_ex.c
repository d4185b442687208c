/*
 * The extended CQ polling interface (ibv_start_poll / ibv_next_poll /
 * ibv_end_poll and the ibv_wc_read_* accessors) over the same ring as
 * ibv_poll_cq: the CQ lock is held from start_poll to end_poll.
 */
#include "verbs/verbs.h"
#include "engine/direct_recv.h"
#include "engine/engine.h"

#include <errno.h>
#include <time.h>

static struct sv_cq *from_ex(struct ibv_cq_ex *ex)
{
	return SV_CONTAINER_OF(ex, struct sv_cq, ex);
}

static int pop_current(struct sv_cq *cq)
{
	if (!cq->count)
		return ENOENT;
	cq->cur = cq->ring[cq->head];
	cq->head = (cq->head + 1) % cq->size;
	cq->count--;
	sv_cq_count_changed(cq);
	cq->ex.wr_id = cq->cur.wr_id;
	cq->ex.status = cq->cur.status;
	return 0;
}

static int start_poll(struct ibv_cq_ex *ex, struct ibv_poll_cq_attr *attr)
{
	struct sv_cq *cq = from_ex(ex);
	int ret;

	if (attr && attr->comp_mask)
		return EINVAL;
	sv_engine_poll_begins(cq->ctx->eng);
	sv_mutex_lock(&cq->lock);
	ret = pop_current(cq);
	if (ret) {
		/* nothing yet: as ibv_poll_cq, what peers of this host placed,
		 * then progress here (neither under the CQ's lock) */
		sv_mutex_unlock(&cq->lock);
		sv_xrq_poll_cq(cq, NULL, 0);
		sv_engine_progress(cq->ctx->eng);
		sv_mutex_lock(&cq->lock);
		ret = pop_current(cq);
	}
	if (ret)
		sv_mutex_unlock(&cq->lock); /* ENOENT: end_poll must not be called */
	return ret;
}

static int next_poll(struct ibv_cq_ex *ex)
{
	return pop_current(from_ex(ex));
}

static void end_poll(struct ibv_cq_ex *ex)
{
	sv_mutex_unlock(&from_ex(ex)->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.opcode;
}
static uint32_t read_vendor_err(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.vendor_err;
}
static uint32_t read_byte_len(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.byte_len;
}
static __be32 read_imm_data(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.imm_data;
}
static uint32_t read_qp_num(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.qp_num;
}
static uint32_t read_src_qp(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.src_qp;
}
static unsigned int read_wc_flags(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.wc_flags;
}
static uint32_t read_slid(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.slid;
}
static uint8_t read_sl(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.sl;
}
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *ex)
{
	return from_ex(ex)->cur.dlid_path_bits;
}
static uint64_t read_completion_ts(struct ibv_cq_ex *ex)
{
	struct timespec ts;

	(void)ex; /* the time of reading; softverbs keeps no per-CQE stamp */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *ex)
{
	struct timespec ts;

	(void)ex;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sv_cq_ex_init(struct sv_cq *cq, uint64_t wc_flags)
{
	struct ibv_cq_ex *ex = &cq->ex;

	ex->start_poll = start_poll;
	ex->next_poll = next_poll;
	ex->end_poll = end_poll;
	ex->read_opcode = read_opcode;
	ex->read_vendor_err = read_vendor_err;
	ex->read_byte_len = read_byte_len;
	ex->read_imm_data = read_imm_data;
	ex->read_qp_num = read_qp_num;
	ex->read_src_qp = read_src_qp;
	ex->read_wc_flags = read_wc_flags;
	ex->read_slid = read_slid;
	ex->read_sl = read_sl;
	ex->read_dlid_path_bits = read_dlid_path_bits;
	if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP)
		ex->read_completion_ts = read_completion_ts;
	if (wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
		ex->read_completion_wallclock_ns = read_completion_wallclock_ns;
}
