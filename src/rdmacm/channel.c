/*
 * Event channels: a queue of rdma_cm events and a file descriptor that is
 * readable exactly while the queue is not empty, so that poll/epoll/select on
 * channel->fd work, and blocking or O_NONBLOCK reads behave as with the
 * kernel's rdma_cm character device.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm/cm.h"

struct sv_mutex cm_lock = SV_MUTEX_INITIALIZER(SV_LOCK_CM);

struct cm_channel *cm_channel_create(void)
{
	struct cm_channel *ch = calloc(1, sizeof(*ch));
	int fds[2];

	if (!ch)
		return NULL;
	if (pipe2(fds, O_CLOEXEC)) {
		free(ch);
		return NULL;
	}
	/* the write end never blocks: at most one byte is ever in the pipe */
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	ch->pub.fd = fds[0];
	ch->pipe_w = fds[1];
	sv_list_init(&ch->events);
	return ch;
}

void cm_channel_destroy(struct cm_channel *ch)
{
	while (!sv_list_empty(&ch->events)) {
		struct cm_event *ev = SV_CONTAINER_OF(ch->events.next, struct cm_event, link);

		sv_list_del(&ev->link);
		free(ev);
	}
	close(ch->pub.fd);
	close(ch->pipe_w);
	free(ch);
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct cm_channel *ch = cm_channel_create();

	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	return &ch->pub;
}

/*
 * Channels the application destroyed.  Their memory is kept (empty, and
 * closed when no thread waits on them): a thread of the program may still be
 * on its way into rdma_get_cm_event on one (rping's event thread at exit),
 * and it must find a channel marked destroyed, not freed memory.  They stay
 * reachable from here until the process ends; a program destroys few.
 */
static struct cm_channel *retired_channels;

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	if (!channel)
		return;
	struct cm_channel *ch = cm_channel_of(channel);

	sv_mutex_lock(&cm_lock);
	if (ch->destroyed) {
		sv_mutex_unlock(&cm_lock);
		return;
	}
	ch->destroyed = true;
	while (!sv_list_empty(&ch->events)) {
		struct cm_event *ev = SV_CONTAINER_OF(ch->events.next, struct cm_event, link);

		sv_list_del(&ev->link);
		free(ev);
	}
	/*
	 * A thread still blocked reading this channel stays blocked, as it
	 * would in the kernel's read(): its descriptors stay open for it.
	 */
	if (!ch->waiters) {
		close(ch->pub.fd);
		close(ch->pipe_w);
		ch->pub.fd = ch->pipe_w = -1;
	}
	ch->retired_next = retired_channels;
	retired_channels = ch;
	sv_mutex_unlock(&cm_lock);
}

struct cm_event *cm_event_new(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	struct cm_event *ev = calloc(1, sizeof(*ev));

	if (!ev)
		return NULL;
	sv_list_init(&ev->link);
	ev->owner = id;
	ev->pub.id = &id->pub;
	ev->pub.event = type;
	ev->pub.status = status;
	return ev;
}

/* Keep the pipe byte in step with the queue: present iff events are queued. */
static void channel_arm(struct cm_channel *ch)
{
	bool want = !sv_list_empty(&ch->events);
	char b = 0;

	if (want && !ch->armed) {
		if (write(ch->pipe_w, &b, 1) == 1)
			ch->armed = true;
	} else if (!want && ch->armed) {
		if (read(ch->pub.fd, &b, 1) == 1)
			ch->armed = false;
	}
}

void cm_event_post(struct cm_event *ev)
{
	struct cm_channel *ch = cm_channel_of(ev->owner->pub.channel);

	sv_dbg("cm: event %s status %d for id %p", rdma_event_str(ev->pub.event), ev->pub.status,
	       (void *)ev->owner);
	sv_list_add_tail(&ch->events, &ev->link);
	channel_arm(ch);
}

void cm_post_simple(struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	struct cm_event *ev = cm_event_new(id, type, status);

	if (ev)
		cm_event_post(ev);
	else
		sv_err("cm: out of memory: event %s lost", rdma_event_str(type));
}

/* The id is going away: events not yet handed out must not name it. */
void cm_channel_forget(struct cm_id *id)
{
	struct cm_channel *ch = cm_channel_of(id->pub.channel);
	struct sv_list *pos = ch->events.next;

	while (pos != &ch->events) {
		struct cm_event *ev = SV_CONTAINER_OF(pos, struct cm_event, link);

		pos = pos->next;
		if (ev->owner == id || ev->pub.listen_id == &id->pub) {
			sv_list_del(&ev->link);
			/* a CONNECT_REQUEST whose listener goes away takes its child along */
			if (ev->pub.listen_id == &id->pub && ev->owner != id)
				cm_id_free(ev->owner);
			free(ev);
		}
	}
	channel_arm(ch);
}

/* Move id's queued events to another channel (rdma_migrate_id). */
void cm_channel_move(struct cm_id *id, struct cm_channel *to)
{
	struct cm_channel *from = cm_channel_of(id->pub.channel);
	struct sv_list *pos = from->events.next;

	while (pos != &from->events) {
		struct cm_event *ev = SV_CONTAINER_OF(pos, struct cm_event, link);

		pos = pos->next;
		if (ev->owner == id) {
			sv_list_del(&ev->link);
			sv_list_add_tail(&to->events, &ev->link);
		}
	}
	channel_arm(from);
	channel_arm(to);
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return cm_err(EINVAL);
	struct cm_channel *ch = cm_channel_of(channel);

	/*
	 * cm_lock is held from each look at the queue until this thread counts
	 * itself among the channel's waiters: a destroy in between would free
	 * the channel under it (rping destroys it while its event thread reads).
	 */
	sv_mutex_lock(&cm_lock);
	for (;;) {
		if (ch->destroyed) {
			/* nothing wakes a destroyed channel; wait as the kernel would */
			sv_mutex_unlock(&cm_lock);
			for (;;)
				pause();
		}
		if (!sv_list_empty(&ch->events)) {
			struct cm_event *ev = SV_CONTAINER_OF(ch->events.next, struct cm_event, link);

			sv_list_del(&ev->link);
			channel_arm(ch);
			sv_mutex_unlock(&cm_lock);
			*event = &ev->pub;
			return 0;
		}

		int fl = fcntl(channel->fd, F_GETFL);

		if (fl >= 0 && (fl & O_NONBLOCK)) {
			sv_mutex_unlock(&cm_lock);
			return cm_err(EAGAIN);
		}
		struct pollfd pfd = { .fd = channel->fd, .events = POLLIN };
		int n, e;

		ch->waiters++;
		sv_mutex_unlock(&cm_lock);
		n = poll(&pfd, 1, -1);
		e = errno;
		sv_mutex_lock(&cm_lock);
		ch->waiters--;
		if (n < 0 && e != EINTR && !ch->destroyed) {
			sv_mutex_unlock(&cm_lock);
			return cm_err(e);
		}
	}
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return cm_err(EINVAL);
	free(SV_CONTAINER_OF(event, struct cm_event, pub));
	return 0;
}

/*
 * A synchronous id (created without a channel): wait for the event the call
 * started, keep it in id->event as librdmacm does, and turn a failure into
 * errno the way librdmacm does (REJECTED: ECONNREFUSED; else -status).
 */
int cm_wait_sync(struct cm_id *id, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(id->pub.channel, &ev))
		return -1;
	if (id->pub.event)
		rdma_ack_cm_event(id->pub.event);
	id->pub.event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return cm_err(ECONNREFUSED);
		return cm_err(ev->status < 0 ? -ev->status : ev->status);
	}
	if (ev->event != want)
		return cm_err(ev->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : ECONNABORTED);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned)event < SV_ARRAY_SIZE(names) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}
