/*
 * Completion queues and completion channels.  A CQ is a ring of ibv_wc under
 * a mutex.  A completion channel is a pipe: each event is the CQ pointer
 * written to it, so the channel fd works with poll/select/epoll, blocks or
 * not as the application sets O_NONBLOCK, and events are never lost.
 */
#include "verbs/verbs.h"
#include "engine/engine.h"
#include "engine/stats.h"
#include "engine/direct_recv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct sv_comp_channel *ch = calloc(1, sizeof(*ch));
	int p[2];

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(p, O_CLOEXEC)) {
		free(ch);
		return NULL;
	}
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	ch->ibch.context = context;
	ch->ibch.fd = p[0];
	ch->ibch.refcnt = 0;
	ch->wfd = p[1];
	sv_ref_init(&ch->cqs, 0);
	return &ch->ibch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct sv_comp_channel *ch = SV_CONTAINER_OF(channel, struct sv_comp_channel, ibch);

	if (sv_ref_count(&ch->cqs))
		return EBUSY;
	/* every CQ of this channel is destroyed: what the pipe still holds are
	 * unread events of zombie CQs, and the last one frees its CQ */
	int fl = fcntl(channel->fd, F_GETFL);

	if (fl >= 0)
		fcntl(channel->fd, F_SETFL, fl | O_NONBLOCK);
	for (;;) {
		struct sv_cq *p;

		if (read(channel->fd, &p, sizeof(p)) != (ssize_t)sizeof(p))
			break;
		if (atomic_fetch_sub(&p->events_in_pipe, 1) == 1 && p->zombie)
			free(p);
	}
	close(channel->fd);
	close(ch->wfd);
	free(ch);
	return 0;
}

int sv_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc);
int sv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);
void sv_cq_ex_init(struct sv_cq *cq, uint64_t wc_flags);

/*
 * The CQ a program gets holds at least what it asked for: like hardware
 * (and rxe), round up to a power of two less one, and report that in
 * cq->cqe, as ibv_create_cq(3) allows.  Programs that size a CQ to the
 * exact number of outstanding completions (perftest -e) rely on the slack.
 */
static int cq_round(int cqe)
{
	uint32_t n = 1;

	while (n < (uint32_t)cqe + 1)
		n <<= 1;
	return (int)SV_MIN(n - 1, (uint32_t)SV_MAX_CQE);
}

static struct sv_cq *cq_create(struct ibv_context *context, int cqe, void *cq_context,
			       struct ibv_comp_channel *channel, int comp_vector)
{
	struct sv_context *ctx = to_sv_ctx(context);
	struct sv_cq *cq;

	if (cqe < 1 || cqe > SV_MAX_CQE || comp_vector < 0 ||
	    comp_vector >= context->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	if (!sv_ctx_reserve(ctx, &ctx->ncq, SV_MAX_CQ)) {
		errno = ENOMEM;
		return NULL;
	}
	cqe = cq_round(cqe);
	cq = calloc(1, sizeof(*cq));
	if (cq)
		cq->ring = calloc((size_t)cqe + 1, sizeof(*cq->ring));
	if (!cq || !cq->ring) {
		if (cq)
			free(cq);
		sv_ctx_release(ctx, &ctx->ncq);
		errno = ENOMEM;
		return NULL;
	}
	cq->ctx = ctx;
	sv_ref_init(&cq->users, 0);
	cq->size = (uint32_t)cqe + 1;
	sv_mutex_init(&cq->lock, SV_LOCK_CQ);
	cq->ex.context = context;
	cq->ex.channel = channel;
	cq->ex.cq_context = cq_context;
	cq->ex.cqe = cqe;
	pthread_mutex_init(&cq->ex.mutex, NULL);
	pthread_cond_init(&cq->ex.cond, NULL);
	if (channel)
		sv_ref_get(&SV_CONTAINER_OF(channel, struct sv_comp_channel, ibch)->cqs);
	return cq;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct sv_cq *cq = cq_create(context, cqe, cq_context, channel, comp_vector);

	if (!cq)
		return NULL;
	sv_cq_ex_init(cq, IBV_WC_STANDARD_FLAGS);
	return (struct ibv_cq *)&cq->ex;
}

struct ibv_cq_ex *sv_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr)
{
	struct sv_cq *cq;
	const uint64_t supported = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
				   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

	if (attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) ||
	    (attr->wc_flags & ~supported)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(uint32_t)(IBV_CREATE_CQ_ATTR_SINGLE_THREADED |
				       IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = cq_create(context, (int)attr->cqe, attr->cq_context, attr->channel,
		       (int)attr->comp_vector);
	if (!cq)
		return NULL;
	sv_cq_ex_init(cq, attr->wc_flags);
	return &cq->ex;
}

int ibv_destroy_cq(struct ibv_cq *ibcq)
{
	struct sv_cq *cq = to_sv_cq(ibcq);
	struct sv_context *ctx = cq->ctx;
	bool zombie;

	if (sv_ref_count(&cq->users))
		return EBUSY;
	sv_async_forget(ctx, &cq->async);
	if (cq->ex.channel)
		sv_ref_put(&SV_CONTAINER_OF(cq->ex.channel, struct sv_comp_channel, ibch)->cqs);
	sv_ctx_release(ctx, &ctx->ncq);
	sv_mutex_destroy(&cq->lock);
	free(cq->xrq);
	free(cq->ring);
	cq->ring = NULL;
	/* like rdma-core: wait until every event handed out was acknowledged;
	 * events still unread in the channel are discarded by the reader */
	sv_pmutex_lock(&cq->ex.mutex, SV_LOCK_CQ_EVENTS);
	while (cq->ex.comp_events_completed != cq->events_reported)
		pthread_cond_wait(&cq->ex.cond, &cq->ex.mutex);
	zombie = cq->zombie = atomic_load(&cq->events_in_pipe) > 0;
	sv_pmutex_unlock(&cq->ex.mutex);
	if (!zombie)
		free(cq);
	return 0;
}

int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct sv_cq *cq = to_sv_cq(ibcq);
	struct ibv_wc *ring;

	if (cqe < 1 || cqe > SV_MAX_CQE)
		return EINVAL;
	cqe = cq_round(cqe);
	sv_mutex_lock(&cq->lock);
	if ((uint32_t)cqe < cq->count) {
		sv_mutex_unlock(&cq->lock);
		return EINVAL; /* would drop completions */
	}
	ring = calloc((size_t)cqe + 1, sizeof(*ring));
	if (!ring) {
		sv_mutex_unlock(&cq->lock);
		return ENOMEM;
	}
	for (uint32_t i = 0; i < cq->count; i++)
		ring[i] = cq->ring[(cq->head + i) % cq->size];
	free(cq->ring);
	cq->ring = ring;
	cq->head = 0;
	cq->size = (uint32_t)cqe + 1;
	ibcq->cqe = cqe;
	sv_xrq_cq_resized(cq); /* smaller: peers' placements may now overrun it */
	sv_mutex_unlock(&cq->lock);
	return 0;
}

static int cq_drain(struct sv_cq *cq, int num, struct ibv_wc *wc)
{
	int n = 0;

	/* one pushed meanwhile is found by the next poll, as it would be had
	 * it come a moment later */
	if (!atomic_load_explicit(&cq->avail, memory_order_relaxed))
		return 0;
	sv_mutex_lock(&cq->lock);
	while (n < num && cq->count) {
		wc[n++] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		cq->count--;
	}
	sv_cq_count_changed(cq);
	sv_mutex_unlock(&cq->lock);
	return n;
}

int sv_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct sv_cq *cq = to_sv_cq(ibcq);
	int n;

	if (num < 0)
		return -EINVAL;
	sv_engine_poll_begins(cq->ctx->eng);
	n = cq_drain(cq, num, wc);
	/* receives peers of this host completed, also when the ring had
	 * some: the engine thread takes them in only where a completion is
	 * owed without a poll (direct_recv.c, own_publish) */
	if (n < num && atomic_load_explicit(&cq->nxrq_any, memory_order_relaxed)) {
		n += sv_xrq_poll_cq(cq, wc + n, num - n);
		if (n < num)
			n += cq_drain(cq, num - n, wc + n); /* (those it pushed) */
	}
	if (!n && num) {
		/* nothing yet: make progress here rather than wait for the engine */
		sv_engine_progress(cq->ctx->eng);
		n = cq_drain(cq, num, wc);
	}
	return n;
}

int sv_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct sv_cq *cq = to_sv_cq(ibcq);

	if (!ibcq->channel)
		return EINVAL;
	sv_mutex_lock(&cq->lock);
	/* "next completion" wins over "solicited only" if both were asked */
	if (!cq->armed || !solicited_only)
		cq->solicited_only = solicited_only;
	cq->armed = true;
	sv_mutex_unlock(&cq->lock);
	/* the caller is about to sleep on the channel: the engine thread must
	 * take in what it waits for, not leave it to a polling thread */
	sv_engine_end_lease(cq->ctx->eng);
	return 0;
}

int sv_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr)
{
	(void)cq;
	if (!attr || attr->attr_mask & ~(uint32_t)IBV_CQ_ATTR_MODERATE)
		return EINVAL;
	return 0; /* moderation is a hint; completions are never delayed */
}

void sv_cq_clean(struct sv_cq *cq, uint32_t qpn)
{
	uint32_t kept = 0;

	sv_mutex_lock(&cq->lock);
	for (uint32_t i = 0; i < cq->count; i++) {
		const struct ibv_wc *wc = &cq->ring[(cq->head + i) % cq->size];

		if (wc->qp_num != qpn)
			cq->ring[(cq->head + kept++) % cq->size] = *wc;
	}
	cq->count = kept;
	sv_cq_count_changed(cq);
	sv_mutex_unlock(&cq->lock);
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	for (;;) {
		struct sv_cq *p;
		ssize_t r = read(channel->fd, &p, sizeof(p));
		bool zombie, last;

		if (r != (ssize_t)sizeof(p))
			return -1; /* errno from read: EAGAIN when the fd is non-blocking */
		sv_pmutex_lock(&p->ex.mutex, SV_LOCK_CQ_EVENTS);
		last = atomic_fetch_sub(&p->events_in_pipe, 1) == 1;
		zombie = p->zombie;
		if (!zombie)
			p->events_reported++;
		sv_pmutex_unlock(&p->ex.mutex);
		if (zombie) {
			/* an event of a CQ destroyed since: dropped, as the kernel does */
			if (last)
				free(p);
			continue;
		}
		*cq = (struct ibv_cq *)&p->ex;
		*cq_context = p->ex.cq_context;
		return 0;
	}
}

void ibv_ack_cq_events(struct ibv_cq *ibcq, unsigned int nevents)
{
	sv_pmutex_lock(&ibcq->mutex, SV_LOCK_CQ_EVENTS);
	ibcq->comp_events_completed += nevents;
	pthread_cond_signal(&ibcq->cond);
	sv_pmutex_unlock(&ibcq->mutex);
}
