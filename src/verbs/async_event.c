/*
 * Asynchronous events, as the application reads them: ibv_get_async_event
 * and ibv_ack_async_event.  The events are raised and kept by the engine
 * (src/engine/async.c): the context's async_fd is the read end of a pipe
 * that carries one byte per event, and the events wait in a list.
 * An event of a QP, CQ or SRQ destroyed before it was read is dropped, and
 * destroying waits for the acknowledgement of those read (see there).
 */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

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
	enum ibv_event_type type;
	void *element;
	int port;
	char byte;

	for (;;) {
		/* blocks, or fails with EAGAIN, as the program set the fd */
		if (read(context->async_fd, &byte, 1) != 1)
			return -1;
		if (sv_async_take(ctx, &type, &element, &port))
			break;
		/* the byte of an event dropped by a destroy: read on */
	}
	event->event_type = type;
	switch (element_of(type)) {
	case ELEMENT_CQ:
		event->element.cq = (struct ibv_cq *)&((struct sv_cq *)element)->ex;
		break;
	case ELEMENT_SRQ:
		event->element.srq = &((struct sv_srq *)element)->ibsrq;
		break;
	case ELEMENT_PORT:
		event->element.port_num = port;
		break;
	case ELEMENT_NONE:
		break;
	case ELEMENT_QP:
		event->element.qp = &((struct sv_qp *)element)->ex.qp_base;
		break;
	}
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

	if (obj)
		sv_async_acked(ctx, obj);
}
