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
	sv_mutex_lock(&cm_lock);
	int err = cm_thread_start();
	struct cm_id *id = err ? NULL : cm_id_alloc(channel, context, ps, qpt);

	sv_mutex_unlock(&cm_lock);
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

	sv_mutex_lock(&cm_lock);
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
	sv_mutex_unlock(&cm_lock);
	return 0;
}

int cm_bind_socket(struct cm_id *id, const struct sockaddr *sa)
{
	struct sockaddr_storage got;
	socklen_t len = sizeof(got);
	int one = 1, v6only = id->afonly;
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return errno;
	/*
	 * rdma_cm ports have no TIME_WAIT; without SO_REUSEADDR a server could
	 * not be restarted on its port for a minute.  Two listeners on one port
	 * still fail: listen() says EADDRINUSE.
	 */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/*
	 * The IPv6 wildcard takes IPv4 requests too unless the id is AF-only,
	 * as the kernel's CM decides (RDMA_OPTION_ID_AFONLY, else the
	 * net.ipv6.bindv6only default a new socket already has).
	 */
	if (sa->sa_family == AF_INET6 && id->afonly_set &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only))) {
		int e = errno;

		close(fd);
		return e;
	}
	if (bind(fd, sa, cm_sa_len(sa)) || getsockname(fd, (struct sockaddr *)&got, &len)) {
		int e = errno;

		close(fd);
		return e;
	}
	id->sock = fd;
	memset(&id->pub.route.addr.src_storage, 0, sizeof(id->pub.route.addr.src_storage));
	memcpy(&id->pub.route.addr.src_storage, &got, cm_sa_len((struct sockaddr *)&got));
	return 0;
}

/*
 * A link-local address names an interface only with its scope id: the
 * kernel's CM refuses one without (cma_check_linklocal), as bind(2) does.
 */
static int check_linklocal(const struct sockaddr *sa)
{
	return cm_sa_is_linklocal(sa) && !((const struct sockaddr_in6 *)sa)->sin6_scope_id ? EINVAL
											     : 0;
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
	struct sockaddr_storage ss;
	struct sockaddr *sa = (struct sockaddr *)&ss;
	struct cm_device *d = NULL;
	int err;

	if (id->state != CM_IDLE)
		return EINVAL;
	err = cm_sa_take(addr, &ss);
	if (!err)
		err = check_linklocal(sa);
	if (err)
		return err;
	/*
	 * The kernel's CM takes a loopback address (127.0.0.0/8, ::1) as it
	 * takes the wildcard (cma_any_addr): the bind succeeds and the id gets
	 * no device until a request or a resolve picks one.  libfabric's verbs
	 * provider relies on it: it binds "localhost" and, finding id->verbs
	 * NULL, offers every device with its own address.  The socket stays on
	 * the loopback address, so only this host reaches a listener bound
	 * there.
	 */
	if (!cm_sa_is_any(sa) && !cm_sa_is_loopback(sa)) {
		d = cm_device_for_addr(sa);
		if (!d)
			return cm_addr_is_local(sa) ? ENODEV : EADDRNOTAVAIL;
	}
	err = cm_id_set_device(id, d);
	if (err)
		return err;
	err = cm_bind_socket(id, sa);
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
	sv_mutex_lock(&cm_lock);
	int err = bind_locked(cm_id_of(pub), addr);

	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

/*
 * The destination, as the kernel's CM takes it: a wildcard means the
 * loopback address of its family, and a link-local one without a scope id
 * is on the link of the id's link-local source, if it has one (else the
 * call fails, as connect(2) to it would).  The id, if bound, must be of the
 * destination's family.
 */
static int take_dst(struct cm_id *id, const struct sockaddr *src, const struct sockaddr *dst,
		    struct sockaddr_storage *out)
{
	struct sockaddr *d = (struct sockaddr *)out;
	struct sockaddr_storage s;
	const struct sockaddr *from = NULL;
	int err = cm_sa_take(dst, out);

	if (err)
		return err;
	if (cm_sa_is_any(d))
		cm_sa_set_loopback(d);
	if (id->state == CM_BOUND) {
		from = &id->pub.route.addr.src_addr;
	} else if (src) {
		err = cm_sa_take(src, &s);
		if (err)
			return err;
		from = (struct sockaddr *)&s;
	}
	if (from && from->sa_family != d->sa_family)
		return EINVAL;
	if (cm_sa_is_linklocal(d) && !((struct sockaddr_in6 *)d)->sin6_scope_id) {
		if (!from || !cm_sa_is_linklocal(from))
			return EINVAL;
		((struct sockaddr_in6 *)d)->sin6_scope_id =
			((const struct sockaddr_in6 *)from)->sin6_scope_id;
	}
	return 0;
}

/* 0: resolved (event posted); else an errno for the call itself. */
static int resolve_addr_locked(struct cm_id *id, struct sockaddr *src, struct sockaddr *dst)
{
	struct sockaddr_storage dss, via;
	struct sockaddr *bound = &id->pub.route.addr.src_addr;
	struct cm_device *d;
	int err;

	if (id->state != CM_IDLE && id->state != CM_BOUND)
		return EINVAL;
	err = take_dst(id, src, dst, &dss);
	if (err)
		return err;
	if (id->state == CM_IDLE && src) {
		err = bind_locked(id, src);
		if (err)
			return err;
	}
	memset(&id->pub.route.addr.dst_storage, 0, sizeof(id->pub.route.addr.dst_storage));
	memcpy(&id->pub.route.addr.dst_storage, &dss, cm_sa_len((struct sockaddr *)&dss));

	/* the source: what the id is bound to, else the routing table's choice */
	if (id->state == CM_BOUND && !cm_sa_is_any(bound)) {
		memcpy(&via, bound, cm_sa_len(bound));
	} else {
		err = cm_route_source((struct sockaddr *)&dss, &via);
		if (err) {
			cm_post_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
			return 0;
		}
	}
	d = cm_device_for_addr((struct sockaddr *)&via);
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
		((struct sockaddr_in *)&via)->sin_port = 0; /* same place in both families */
		err = cm_bind_socket(id, (struct sockaddr *)&via);
		if (err) {
			cm_post_simple(id, RDMA_CM_EVENT_ADDR_ERROR, -err);
			return 0;
		}
	}
	if (cm_sa_is_any(bound))
		cm_sa_set_addr(bound, (struct sockaddr *)&via);
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

	sv_mutex_lock(&cm_lock);
	int err = resolve_addr_locked(id, src_addr, dst_addr);

	sv_mutex_unlock(&cm_lock);
	if (err)
		return cm_err(err);
	return id->sync ? cm_wait_sync(id, RDMA_CM_EVENT_ADDR_RESOLVED) : 0;
}

int rdma_resolve_route(struct rdma_cm_id *pub, int timeout_ms)
{
	if (!pub || timeout_ms < 0)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	sv_mutex_lock(&cm_lock);
	if (id->state != CM_ADDR_RESOLVED) {
		sv_mutex_unlock(&cm_lock);
		return cm_err(EINVAL);
	}
	id->state = CM_ROUTE_RESOLVED;
	cm_fill_route(id);
	cm_post_simple(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	sv_mutex_unlock(&cm_lock);
	return id->sync ? cm_wait_sync(id, RDMA_CM_EVENT_ROUTE_RESOLVED) : 0;
}

/*
 * Whether an IPv6 wildcard id takes IPv4 requests too: before the listen,
 * as the kernel's CM allows it (rdma_set_afonly).  A wildcard socket bound
 * already is bound again with the option (nothing listens on it yet).
 */
static int set_afonly(struct cm_id *id, bool afonly)
{
	struct sockaddr_storage at;
	int old = id->sock, err;
	bool was_set = id->afonly_set, was = id->afonly;

	if (id->state != CM_IDLE && id->state != CM_BOUND)
		return EINVAL;
	id->afonly_set = true;
	id->afonly = afonly;
	if (id->state != CM_BOUND || id->pub.route.addr.src_addr.sa_family != AF_INET6 ||
	    !cm_sa_is_any(&id->pub.route.addr.src_addr))
		return 0;
	/* both sockets have SO_REUSEADDR and neither listens: the port is shared meanwhile */
	memcpy(&at, &id->pub.route.addr.src_storage, sizeof(at));
	err = cm_bind_socket(id, (struct sockaddr *)&at);
	if (err) {
		id->afonly_set = was_set;
		id->afonly = was;
		return err;
	}
	close(old);
	return 0;
}

int rdma_set_option(struct rdma_cm_id *pub, int level, int optname, void *optval, size_t optlen)
{
	if (!pub || !optval)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	int err = 0;

	sv_mutex_lock(&cm_lock);
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
				err = EINVAL;
			else
				err = set_afonly(id, *(int *)optval != 0);
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
	sv_mutex_unlock(&cm_lock);
	return err ? cm_err(err) : 0;
}

int rdma_migrate_id(struct rdma_cm_id *pub, struct rdma_event_channel *channel)
{
	if (!pub)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	struct cm_channel *old_own = id->own_channel, *to;

	sv_mutex_lock(&cm_lock);
	if (channel) {
		to = cm_channel_of(channel);
	} else {
		to = cm_channel_create();
		if (!to) {
			sv_mutex_unlock(&cm_lock);
			return cm_err(ENOMEM);
		}
	}
	if (&to->pub == id->pub.channel) {
		sv_mutex_unlock(&cm_lock);
		return 0;
	}
	cm_channel_move(id, to);
	id->pub.channel = &to->pub;
	id->own_channel = channel ? NULL : to;
	id->sync = !channel;
	if (old_own)
		cm_channel_destroy(old_own);
	sv_mutex_unlock(&cm_lock);
	return 0;
}

/* sin_port and sin6_port are at the same place */
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

	sv_mutex_lock(&cm_lock);
	id->local_ece_vendor = ece->vendor_id;
	id->local_ece_options = ece->options;
	sv_mutex_unlock(&cm_lock);
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *pub, struct ibv_ece *ece)
{
	if (!pub || !ece)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);

	sv_mutex_lock(&cm_lock);
	ece->vendor_id = id->remote_ece_vendor;
	ece->options = id->remote_ece_options;
	ece->comp_mask = 0;
	sv_mutex_unlock(&cm_lock);
	return 0;
}
