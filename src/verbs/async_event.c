/*
 * Asynchronous events.  The context's async_fd is the read end of a pipe, so
 * it can be polled like the kernel's; the pipe carries one byte per event,
 * and the events themselves wait in a list under ctx->async_lock.
 *
 * Why a list and not the events in the pipe: an affiliated event names its
 * QP, CQ or SRQ, and the program may destroy that object while the event is
 * still unread.  rdma-core (with the kernel) then drops the unread event, and
 * ibv_destroy_* waits until each event already handed out for the object has
 * been acknowledged with ibv_ack_async_event.  The same here: destroying
 * calls sv_async_forget, which takes the object's events out of the list and
 * waits on its counts.  Middleware that reads events on a thread of its own
 * (UCX) would otherwise be handed a pointer to freed memory.
 */
#include "verbs/objects.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct sv_async_pending {
	struct sv_async_pending *next;
	enum ibv_event_type type;
	int port;
	void *element;
	struct sv_async_count *obj;
};

void sv_async_init(struct sv_context *ctx)
{
	pthread_mutex_init(&ctx->async_lock, NULL);
	pthread_cond_init(&ctx->async_acked, NULL);
	ctx->async_head = ctx->async_tail = NULL;
}

void sv_async_fini(struct sv_context *ctx)
{
	while (ctx->async_head) {
		struct sv_async_pending *e = ctx->async_head;

		ctx->async_head = e->next;
		free(e);
	}
	pthread_cond_destroy(&ctx->async_acked);
	pthread_mutex_destroy(&ctx->async_lock);
}

void sv_async_event(struct sv_context *ctx, enum ibv_event_type type, void *element,
		    struct sv_async_count *obj, int port)
{
	struct sv_async_pending *e = malloc(sizeof(*e)), **at;
	const char byte = 0;

	if (!e) {
		sv_err("async event %d lost: out of memory", (int)type);
		return;
	}
	*e = (struct sv_async_pending){ NULL, type, port, element, obj };
	pthread_mutex_lock(&ctx->async_lock);
	if (write(ctx->async_wfd, &byte, 1) != 1) {
		pthread_mutex_unlock(&ctx->async_lock);
		sv_err("async event %d lost: event pipe full", (int)type);
		free(e);
		return;
	}
	at = ctx->async_tail ? &ctx->async_tail->next : &ctx->async_head;
	*at = e;
	ctx->async_tail = e;
	pthread_mutex_unlock(&ctx->async_lock);
}

/* The list lost e's predecessor links: recompute the tail. */
static void fix_tail(struct sv_context *ctx)
{
	ctx->async_tail = NULL;
	for (struct sv_async_pending *e = ctx->async_head; e; e = e->next)
		ctx->async_tail = e;
}

void sv_async_forget(struct sv_context *ctx, struct sv_async_count *obj)
{
	pthread_mutex_lock(&ctx->async_lock);
	for (struct sv_async_pending **p = &ctx->async_head; *p;) {
		struct sv_async_pending *e = *p;

		if (e->obj == obj) {
			*p = e->next; /* its pipe byte stays: the reader skips it */
			free(e);
		} else {
			p = &e->next;
		}
	}
	fix_tail(ctx);
	while (obj->acked != obj->reported)
		pthread_cond_wait(&ctx->async_acked, &ctx->async_lock);
	pthread_mutex_unlock(&ctx->async_lock);
}

/* What an event's element names, by event type (ibv_get_async_event(3)). */
enum element_kind { ELEMENT_QP, ELEMENT_CQ, ELEMENT_SRQ, ELEMENT_PORT, ELEMENT_NONE };

static enum element_kind element_of(enum ibv_event_type type)
{
	switch (type) {
	case IBV_EVENT_CQ_ERR:
		return ELEMENT_CQ;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return ELEMENT_SRQ;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		return ELEMENT_PORT;
	case IBV_EVENT_DEVICE_FATAL:
		return ELEMENT_NONE;
	default:
		return ELEMENT_QP;
	}
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct sv_context *ctx = to_sv_ctx(context);
	struct sv_async_pending *e;
	char byte;

	for (;;) {
		/* blocks, or fails with EAGAIN, as the program set the fd */
		if (read(context->async_fd, &byte, 1) != 1)
			return -1;
		pthread_mutex_lock(&ctx->async_lock);
		e = ctx->async_head;
		if (e) {
			ctx->async_head = e->next;
			if (!e->next)
				ctx->async_tail = NULL;
			if (e->obj)
				e->obj->reported++;
		}
		pthread_mutex_unlock(&ctx->async_lock);
		if (e)
			break;
		/* the byte of an event dropped by a destroy: read on */
	}
	event->event_type = e->type;
	switch (element_of(e->type)) {
	case ELEMENT_CQ:
		event->element.cq = (struct ibv_cq *)&((struct sv_cq *)e->element)->ex;
		break;
	case ELEMENT_SRQ:
		event->element.srq = &((struct sv_srq *)e->element)->ibsrq;
		break;
	case ELEMENT_PORT:
		event->element.port_num = e->port;
		break;
	case ELEMENT_NONE:
		break;
	case ELEMENT_QP:
		event->element.qp = &((struct sv_qp *)e->element)->ex.qp_base;
		break;
	}
	free(e);
	return 0;
}

/*
 * The count of the object an event names, and its context; NULL for port
 * and device events.
 */
static struct sv_async_count *event_object(struct ibv_async_event *event,
					   struct sv_context **ctx)
{
	switch (element_of(event->event_type)) {
	case ELEMENT_CQ:
		*ctx = to_sv_ctx(event->element.cq->context);
		return &to_sv_cq(event->element.cq)->async;
	case ELEMENT_SRQ:
		*ctx = to_sv_ctx(event->element.srq->context);
		return &to_sv_srq(event->element.srq)->async;
	case ELEMENT_QP:
		*ctx = to_sv_ctx(event->element.qp->context);
		return &to_sv_qp(event->element.qp)->async;
	case ELEMENT_PORT:
	case ELEMENT_NONE:
		break;
	}
	return NULL;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	struct sv_context *ctx;
	struct sv_async_count *obj = event ? event_object(event, &ctx) : NULL;

	if (!obj)
		return;
	pthread_mutex_lock(&ctx->async_lock);
	obj->acked++;
	pthread_cond_broadcast(&ctx->async_acked);
	pthread_mutex_unlock(&ctx->async_lock);
}
