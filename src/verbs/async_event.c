/*
 * Asynchronous events travel through a pipe whose read end is the
 * context's async_fd, so it can be polled like the kernel's.
 */
#include "verbs/objects.h"

#include <errno.h>
#include <unistd.h>

struct sv_async_msg {
	uint32_t type;
	uint32_t port;
	void *element;
};

void sv_async_event(struct sv_context *ctx, enum ibv_event_type type, void *element, int port)
{
	struct sv_async_msg m = { .type = type, .port = (uint32_t)port, .element = element };
	ssize_t r = write(ctx->async_wfd, &m, sizeof(m));

	if (r != (ssize_t)sizeof(m))
		sv_err("async event %d lost: event pipe full", (int)type);
}

int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
	struct sv_async_msg m;
	ssize_t r = read(context->async_fd, &m, sizeof(m));

	if (r != (ssize_t)sizeof(m))
		return -1;
	event->event_type = (enum ibv_event_type)m.type;
	switch (event->event_type) {
	case IBV_EVENT_CQ_ERR:
		event->element.cq = (struct ibv_cq *)&((struct sv_cq *)m.element)->ex;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		event->element.srq = &((struct sv_srq *)m.element)->ibsrq;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		event->element.port_num = (int)m.port;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	default:
		event->element.qp = &((struct sv_qp *)m.element)->ex.qp_base;
		break;
	}
	return 0;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	/* events carry no reference that needs releasing */
	(void)event;
}
