/*
 * A stream transport's listener as an interface (tcp.c, shm.c): watched in
 * its owner's loop; each peer waiting there is accepted into a connection
 * the owner then takes, within its admission caps (struct sv_iface_host).
 */
#include "transport/transport.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

struct stream_iface {
	struct sv_iface_at at;
	const struct sv_transport_ops *ops; /* its connections' (the accept may change them) */
	int (*accept)(int lfd, struct sv_conn *conn);
	int fd;
};

/* The listener is readable: accept every peer waiting there. */
static void stream_ready(void *arg)
{
	struct stream_iface *s = arg;

	while (s->fd >= 0) {
		struct sv_conn *c = s->at.host->conn_new(s->at.eng, s->ops);
		int err;

		if (!c)
			return;
		err = s->accept(s->fd, c);
		if (err) {
			sv_conn_put(c);
			if (err == -EMFILE)
				s->at.host->rest(s->at.eng);
			if (err == -EAGAIN || err == -EMFILE)
				return;
			continue; /* a refused peer: look for the next */
		}
		s->at.host->accepted(c);
	}
}

int sv_iface_stream(const struct sv_iface_at *at, int fd, const struct sv_transport_ops *ops,
		    int (*accept)(int lfd, struct sv_conn *conn), void **iface)
{
	struct stream_iface *s;
	int err;

	if (fd < 0)
		return fd;
	s = malloc(sizeof(*s));
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	*s = (struct stream_iface){ .at = *at, .ops = ops, .accept = accept, .fd = fd };
	err = at->host->watch(at->eng, fd, false, stream_ready, s);
	if (err) {
		close(fd);
		free(s);
		return err;
	}
	*iface = s;
	return 0;
}

void sv_iface_stream_leave(void *iface, bool pass_on)
{
	struct stream_iface *s = iface;

	(void)pass_on; /* what waits is connections: they go with the listener */
	if (s->fd < 0)
		return;
	s->at.host->unwatch(s->at.eng, s->fd);
	close(s->fd);
	s->fd = -1;
}

void sv_iface_stream_close(void *iface)
{
	sv_iface_stream_leave(iface, false);
	free(iface);
}
