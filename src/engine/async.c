/*
 * Asynchronous events as the HCA raises and keeps them (the verbs that read
 * them are src/verbs/async_event.c).  The context's async_fd is the read end
 * of a pipe, so it can be polled like the kernel's; the pipe carries one
 * byte per event, and the events themselves wait in a list under
 * ctx->async_lock.
 *
 * Why a list and not the events in the pipe: an affiliated event names its
 * QP, CQ or SRQ, and the program may destroy that object while the event is
 * still unread.  rdma-core (with the kernel) then drops the unread event, and
 * ibv_destroy_* waits until each event already handed out for the object has
 * been acknowledged with ibv_ack_async_event.  The same here: destroying
 * calls sv_async_forget, which takes the object's events out of the list and
 * waits on its counts.
 */
#include "engine/objects.h"

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
	sv_mutex_init(&ctx->async_lock, SV_LOCK_ASYNC);
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
	sv_mutex_destroy(&ctx->async_lock);
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
	sv_mutex_lock(&ctx->async_lock);
	if (write(ctx->async_wfd, &byte, 1) != 1) {
		sv_mutex_unlock(&ctx->async_lock);
		sv_err("async event %d lost: event pipe full", (int)type);
		free(e);
		return;
	}
	at = ctx->async_tail ? &ctx->async_tail->next : &ctx->async_head;
	*at = e;
	ctx->async_tail = e;
	sv_mutex_unlock(&ctx->async_lock);
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
	sv_mutex_lock(&ctx->async_lock);
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
		sv_cond_wait(&ctx->async_acked, &ctx->async_lock);
	sv_mutex_unlock(&ctx->async_lock);
}

bool sv_async_take(struct sv_context *ctx, enum ibv_event_type *type, void **element, int *port)
{
	struct sv_async_pending *e;

	sv_mutex_lock(&ctx->async_lock);
	e = ctx->async_head;
	if (e) {
		ctx->async_head = e->next;
		if (!e->next)
			ctx->async_tail = NULL;
		if (e->obj)
			e->obj->reported++;
	}
	sv_mutex_unlock(&ctx->async_lock);
	if (!e)
		return false;
	*type = e->type;
	*element = e->element;
	*port = e->port;
	free(e);
	return true;
}

void sv_async_acked(struct sv_context *ctx, struct sv_async_count *obj)
{
	sv_mutex_lock(&ctx->async_lock);
	obj->acked++;
	pthread_cond_broadcast(&ctx->async_acked);
	sv_mutex_unlock(&ctx->async_lock);
}
