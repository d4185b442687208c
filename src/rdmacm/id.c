/*
 * rdma_cm ids: creation and destruction, binding, address and route
 * resolution, options, and moving an id between event channels.
 *
 * The rdma_cm port of an id is a TCP port on the device's address: binding
 * an id binds a TCP socket there, and that socket is later the listener
 * (passive) or the CM connection to the peer (active).  Address resolution
 * asks the kernel's routing table which local address reaches the
 * destination and takes the softverbs device of that address.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdmacm/cm.h"

static struct sv_list all_ids = { &all_ids, &all_ids };
static uint64_t next_serial = 1;

bool cm_ps_is_ud(enum rdma_port_space ps)
{
	return ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB;
}

struct cm_id *cm_id_alloc(struct rdma_event_channel *ch, void *context, enum rdma_port_space ps,
			  enum ibv_qp_type qpt)
{
	struct cm_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	if (!ch) {
		id->own_channel = cm_channel_create();
		if (!id->own_channel) {
			free(id);
			return NULL;
		}
		ch = &id->own_channel->pub;
		id->sync = true;
	}
	id->pub.channel = ch;
	id->pub.context = context;
	id->pub.ps = ps;
	id->pub.qp_type = qpt;
	id->sock = -1;
	id->state = CM_IDLE;
	/*
	 * This side's starting PSN, chosen now as the kernel's CM does for
	 * each id (a request's id included): rdma_init_qp_attr(RTS) gives it
	 * to a QP the program moves itself before rdma_connect/rdma_accept,
	 * and the REQ/REP then carries the same PSN to the peer.
	 */
	id->local_psn = sv_random_u32() & SV_PSN_MASK;
	id->serial = next_serial++;
	sv_list_add_tail(&all_ids, &id->link);
	return id;
}

struct sv_list *cm_all_ids(void)
{
	return &all_ids;
}

struct cm_id *cm_id_by_serial(uint64_t serial)
{
	for (struct sv_list *p = all_ids.next; p != &all_ids; p = p->next) {
		struct cm_id *id = SV_CONTAINER_OF(p, struct cm_id, link);

		if (id->serial == serial)
			return id;
	}
	return NULL;
}

void cm_id_free(struct cm_id *id)
{
	/* children that still wait for a REQ, or whose listener this was */
	for (struct sv_list *p = all_ids.next; p != &all_ids;) {
		struct cm_id *c = SV_CONTAINER_OF(p, struct cm_id, link);

		p = p->next;
		if (c->listener != id)
			continue;
		c->listener = NULL;
		if (c->state == CM_PENDING)
			cm_id_free(c); /* frees nothing but c: a pending child has no events */
	}
	cm_channel_forget(id);
	cm_sock_close(id);
	cm_mcast_free_all(id);
	if (id->dev)
		cm_device_put(id->dev);
	sv_list_del(&id->link);
	if (id->pub.event)
		rdma_ack_cm_event(id->pub.event);
	if (id->own_channel)
		cm_channel_destroy(id->own_channel);
	free(id->ep_qp_attr);
	free(id);
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **out, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qpt;

	switch (ps) {
	case RDMA_PS_TCP:
	case RDMA_PS_IB:
		qpt = IBV_QPT_RC;
		break;
	case RDMA_PS_UDP:
	case RDMA_PS_IPOIB:
		qpt = IBV_QPT_UD;
		break;
	default:
		return cm_err(EINVAL);
	}
	if (!out)
		return cm_err(EINVAL);
	/* a secret that is set but refused fails here, EACCES (transport/auth.h) */
	if (sv_auth_check())
		return cm_err(EACCES);
	pthread_mutex_lock(&cm_lock);
	int err = cm_thread_start();
	struct cm_id *id = err ? NULL : cm_id_alloc(channel, context, ps, qpt);

	pthread_mutex_unlock(&cm_lock);
	if (!id)
		return cm_err(err ? err : ENOMEM);
	*out = &id->pub;
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *pub)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	pthread_mutex_lock(&cm_lock);
	switch (id->state) {
	case CM_REQ_RCVD:
		/* never answered: the peer hears a reject, as from a real CM */
		if (cm_ps_is_ud(id->pub.ps))
			cm_send_sidr_rep(id, CM_SIDR_REJECT, 0, 0, NULL, 0);
		else
			cm_send_simple(id, MSG_REJ, CM_REJ_CONSUMER_DEFINED, NULL, 0);
		break;
	case CM_REQ_SENT:
	case CM_REP_RCVD:
	case CM_REP_SENT:
	case CM_ESTABLISHED:
		cm_send_simple(id, MSG_DREQ, 0, NULL, 0); /* DREQ; closing the socket covers the rest */
		break;
	default:
		break;
	}
	cm_id_free(id);
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

int cm_bind_socket(struct cm_id *id, const struct sockaddr_in *sin)
{
	struct sockaddr_in got;
	socklen_t len = sizeof(got);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return errno;
	/*
	 * rdma_cm ports have no TIME_WAIT; without SO_REUSEADDR a server could
	 * not be restarted on its port for a minute.  Two listeners on one port
	 * still fail: listen() says EADDRINUSE.
	 */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)sin, sizeof(*sin)) ||
	    getsockname(fd, (struct sockaddr *)&got, &len)) {
		int e = errno;

		close(fd);
		return e;
	}
	id->sock = fd;
	id->pub.route.addr.src_sin = got;
	return 0;
}

/* Accept AF_INET, and the IPv6 wildcard as the IPv4 wildcard. */
static int to_sin(const struct sockaddr *sa, struct sockaddr_in *out)
{
	memset(out, 0, sizeof(*out));
	out->sin_family = AF_INET;
	if (sa->sa_family == AF_INET) {
		memcpy(out, sa, sizeof(*out));
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			memcpy(&out->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
			out->sin_port = s6->sin6_port;
			return 0;
		}
		if (IN6_IS_ADDR_UNSPECIFIED(&s6->sin6_addr)) {
			out->sin_port = s6->sin6_port;
			return 0;
		}
	}
	return EAFNOSUPPORT;
}

static int local_addr_known(struct in_addr ip)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = ip };
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int ok;

	if (fd < 0)
		return 0;
	ok = bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;
	close(fd);
	return ok;
}

/*
 * The id reaches a device: as with rdma-core, on a bind to its address, on
 * address resolution and for a connection request's id.  id->pd becomes the
 * device's PD then; an id that had a device already keeps its own (it may
 * have made its QP on another PD meanwhile, which rdma_create_qp puts there).
 */
int cm_id_set_device(struct cm_id *id, struct cm_device *d)
{
	if (d == id->dev)
		return 0;
	if (d) {
		int err = cm_device_get(d);

		if (err)
			return err;
	}
	if (id->dev)
		cm_device_put(id->dev);
	id->dev = d;
	id->pub.verbs = d ? d->verbs : NULL;
	id->pub.pd = d ? d->pd : NULL;
	id->pub.port_num = d ? 1 : 0;
	id->mtu = d ? d->mtu : 0;
	return 0;
}

static int bind_locked(struct cm_id *id, const struct sockaddr *addr)
{
	struct sockaddr_in sin;
	struct cm_device *d = NULL;
	int err;

	if (id->state != CM_IDLE)
		return EINVAL;
	err = to_sin(addr, &sin);
	if (err)
		return err;
	/*
	 * The kernel's CM takes a loopback address as it takes the wildcard
	 * (cma_any_addr): the bind succeeds and the id gets no device until a
	 * request or a resolve picks one.  libfabric's verbs provider relies on
	 * it: it binds "localhost" and, finding id->verbs NULL, offers every
	 * device with its own address.  The socket stays on the loopback
	 * address, so only this host reaches a listener bound there.
	 */
	if (sin.sin_addr.s_addr != htonl(INADDR_ANY) && (ntohl(sin.sin_addr.s_addr) >> 24) != IN_LOOPBACKNET) {
		d = cm_device_for_ip(sin.sin_addr);
		if (!d)
			return local_addr_known(sin.sin_addr) ? ENODEV : EADDRNOTAVAIL;
	}
	err = cm_id_set_device(id, d);
	if (err)
		return err;
	err = cm_bind_socket(id, &sin);
	if (err) {
		cm_id_set_device(id, NULL);
		return err;
	}
	id->state = CM_BOUND;
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *pub, struct sockaddr *addr)
{
	if (!pub || !addr)
		return cm_err(EINVAL);
	pthread_mutex_lock(&cm_lock);
	int err = bind_locked(cm_id_of(pub), addr);

	pthread_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

/* 0: resolved (event posted); else an errno for the call itself. */
static int resolve_addr_locked(struct cm_id *id, struct sockaddr *src, struct sockaddr *dst)
{
	struct sockaddr_in dsin, ssin;
	struct in_addr via;
	struct cm_device *d;
	int err;

	if (id->state != CM_IDLE && id->state != CM_BOUND)
		return EINVAL;
	err = to_sin(dst, &dsin);
	if (err)
		return err;
	if (dsin.sin_addr.s_addr == htonl(INADDR_ANY))
		dsin.sin_addr.s_addr = htonl(INADDR_LOOPBACK); /* as the kernel CM does */
	if (id->state == CM_IDLE && src) {
		err = bind_locked(id, src);
		if (err)
			return err;
	}
	id->pub.route.addr.dst_sin = dsin;

	/* the source: what the id is bound to, else the routing table's choice */
	if (id->state == CM_BOUND && id->pub.route.addr.src_sin.sin_addr.s_addr != htonl(INADDR_ANY)) {
		via = id->pub.route.addr.src_sin.sin_addr;
	} else {
		err = cm_route_source(dsin.sin_addr, &via);
		if (err) {
			cm_post_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
			return 0;
		}
	}
	d = cm_device_for_ip(via);
	if (!d) {
		/* the address is reached through an interface softverbs does not serve */
		cm_post_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -ENODEV);
		return 0;
	}
	err = cm_id_set_device(id, d);
	if (err) {
		cm_post_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
		return 0;
	}
	if (id->state == CM_IDLE) {
		ssin = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr = via };
		err = cm_bind_socket(id, &ssin);
		if (err) {
			cm_post_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
			return 0;
		}
	}
	if (id->pub.route.addr.src_sin.sin_addr.s_addr == htonl(INADDR_ANY))
		id->pub.route.addr.src_sin.sin_addr = via;
	id->state = CM_ADDR_RESOLVED;
	cm_fill_route(id);
	id->pub.route.num_paths = 0; /* no path until the route is resolved */
	cm_post_simple(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *pub, struct sockaddr *src_addr, struct sockaddr *dst_addr,
		      int timeout_ms)
{
	if (!pub || !dst_addr || timeout_ms < 0)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	pthread_mutex_lock(&cm_lock);
	int err = resolve_addr_locked(id, src_addr, dst_addr);

	pthread_mutex_unlock(&cm_lock);
	if (err)
		return cm_err(err);
	return id->sync ? cm_wait_sync(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

int rdma_resolve_route(struct rdma_cm_id *pub, int timeout_ms)
{
	if (!pub || timeout_ms < 0)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	pthread_mutex_lock(&cm_lock);
	if (id->state != CM_ADDR_RESOLVED) {
		pthread_mutex_unlock(&cm_lock);
		return cm_err(EINVAL);
	}
	id->state = CM_ROUTE_RESOLVED;
	cm_fill_route(id);
	cm_post_simple(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	pthread_mutex_unlock(&cm_lock);
	return id->sync ? cm_wait_sync(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

int rdma_set_option(struct rdma_cm_id *pub, int level, int optname, void *optval, size_t optlen)
{
	if (!pub || !optval)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	int err = 0;

	pthread_mutex_lock(&cm_lock);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				err = EINVAL;
			else
				id->tos = *(uint8_t *)optval;
			break;
		case RDMA_OPTION_ID_REUSEADDR:
			if (optlen != sizeof(int))
				err = EINVAL;
			else if (id->state != CM_IDLE)
				err = EINVAL; /* must come before the bind, as with the kernel CM */
			else
				id->reuseaddr = *(int *)optval != 0;
			break;
		case RDMA_OPTION_ID_AFONLY:
			if (optlen != sizeof(int))
				err = EINVAL; /* IPv4 only: nothing to restrict */
			break;
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			if (optlen != sizeof(uint8_t) || *(uint8_t *)optval > 31) {
				err = EINVAL;
			} else {
				id->ack_timeout = *(uint8_t *)optval;
				id->ack_timeout_set = true;
			}
			break;
		default:
			err = ENOSYS;
		}
	} else if (level == RDMA_OPTION_IB && optname == RDMA_OPTION_IB_PATH) {
		err = EOPNOTSUPP; /* paths are not set by hand on softverbs devices */
	} else {
		err = ENOSYS;
	}
	pthread_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

int rdma_migrate_id(struct rdma_cm_id *pub, struct rdma_event_channel *channel)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	struct cm_channel *old_own = id->own_channel, *to;

	pthread_mutex_lock(&cm_lock);
	if (channel) {
		to = cm_channel_of(channel);
	} else {
		to = cm_channel_create();
		if (!to) {
			pthread_mutex_unlock(&cm_lock);
			return cm_err(ENOMEM);
		}
	}
	if (&to->pub == id->pub.channel) {
		pthread_mutex_unlock(&cm_lock);
		return 0;
	}
	cm_channel_move(id, to);
	id->pub.channel = &to->pub;
	id->own_channel = channel ? NULL : to;
	id->sync = !channel;
	if (old_own)
		cm_channel_destroy(old_own);
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return id ? id->route.addr.src_sin.sin_port : 0;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return id ? id->route.addr.dst_sin.sin_port : 0;
}

/* Enhanced connection establishment: carried in REQ/REP, options opaque to softverbs. */
int rdma_set_local_ece(struct rdma_cm_id *pub, struct ibv_ece *ece)
{
	if (!pub || !ece || pub->qp || !ece->vendor_id || ece->comp_mask)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	pthread_mutex_lock(&cm_lock);
	id->local_ece_vendor = ece->vendor_id;
	id->local_ece_options = ece->options;
	pthread_mutex_unlock(&cm_lock);
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *pub, struct ibv_ece *ece)
{
	if (!pub || !ece)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	pthread_mutex_lock(&cm_lock);
	ece->vendor_id = id->remote_ece_vendor;
	ece->options = id->remote_ece_options;
	ece->comp_mask = 0;
	pthread_mutex_unlock(&cm_lock);
	return 0;
}
