/*
 * Which transport carries what: the one place that names transports.
 * An endpoint listens with every transport the mode allows; a connection to
 * a peer takes shm when the peer is on this host and in this network
 * namespace (its abstract unix name answers), tcp otherwise.
 * SOFTVERBS_TRANSPORT=tcp or shm forces one; rocev2 sends RoCEv2
 * datagrams to every peer (rocev2.c).  Adding a transport is a file in
 * this folder, its ops declared here and their place in the choices
 * below: nothing else, the engine included, names one.
 */
#include "transport/transport.h"
#include "transport/roce_wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

/* The transports, each defined in its own file of this folder. */
extern const struct sv_transport_ops sv_tcp_ops;
/* Listeners only (their connections are tcp ones): the host's shared port
 * (SOFTVERBS_PORT, every process with SO_REUSEPORT), and the abstract
 * socket over which a connection that arrived there is handed to the
 * process it is for (tcp.c). */
extern const struct sv_transport_ops sv_tcp_shared_ops;
extern const struct sv_transport_ops sv_tcp_handoff_ops;
/* The same two TCP listeners at the interface's IPv6 address (none where it
 * has none): peers that name the device by its IPv6 GID connect there. */
extern const struct sv_transport_ops sv_tcp6_ops;
extern const struct sv_transport_ops sv_tcp_shared6_ops;
/* ... and at its link-local IPv6 address (GIDs 0 and 1, which a peer that
 * finds no IPv4 neighbour for them reaches there). */
extern const struct sv_transport_ops sv_tcp6ll_ops;
extern const struct sv_transport_ops sv_tcp_shared6ll_ops;
extern const struct sv_transport_ops sv_shm_ops;
/* RoCEv2 (rocev2.c): a peer address's datagrams, and the listeners: the
 * host's UDP port 4791, and the socket other contexts pass on what arrived
 * there for this one. */
extern const struct sv_transport_ops sv_rocev2_ops;
extern const struct sv_transport_ops sv_rocev2_listen_ops;
extern const struct sv_transport_ops sv_rocev2_listen6_ops;
extern const struct sv_transport_ops sv_rocev2_listen6ll_ops;
extern const struct sv_transport_ops sv_rocev2_fwd_ops;
/* ... and the context's own port, where the host's other contexts send
 * what is for it. */
extern const struct sv_transport_ops sv_rocev2_own_ops;
/* Multicast (mcast.c): a group's connection. */
extern const struct sv_transport_ops sv_mcast_ops;
int sv_mcast_open(struct sv_conn *c, const union ibv_gid *mgid, struct in_addr ifip);

enum sv_transport_mode sv_transport_mode(void)
{
	const char *m = sv_env_str("SOFTVERBS_TRANSPORT", "auto");

	if (!strcmp(m, "tcp"))
		return SV_TRANSPORT_TCP;
	if (!strcmp(m, "shm"))
		return SV_TRANSPORT_SHM;
	if (!strcmp(m, "rocev2"))
		return SV_TRANSPORT_ROCEV2;
	if (strcmp(m, "auto"))
		sv_warn("SOFTVERBS_TRANSPORT=%s: expected auto, tcp, shm or rocev2; using auto", m);
	return SV_TRANSPORT_AUTO;
}

int sv_transports_listening(enum sv_transport_mode mode,
			    const struct sv_transport_ops *out[SV_MAX_TRANSPORTS])
{
	int n = 0;

	/* tcp first: the endpoint is its port (the block's, registry.h), which
	 * shm's name carries */
	out[n++] = &sv_tcp_ops;
	if (mode == SV_TRANSPORT_ROCEV2) {
		/* tcp holds the block's port still (registry.h), which names
		 * the forwarding socket; nothing connects to it */
		out[n++] = &sv_rocev2_listen_ops;
		/* none where the interface has no such IPv6 address */
		out[n++] = &sv_rocev2_listen6_ops;
		out[n++] = &sv_rocev2_listen6ll_ops;
		out[n++] = &sv_rocev2_fwd_ops;
		out[n++] = &sv_rocev2_own_ops;
		return n;
	}
	if (mode != SV_TRANSPORT_TCP)
		out[n++] = &sv_shm_ops;
	/* none where the interface has no such IPv6 address */
	out[n++] = &sv_tcp6_ops;
	out[n++] = &sv_tcp6ll_ops;
	if (sv_tcp_shared_port()) {
		out[n++] = &sv_tcp_handoff_ops;
		out[n++] = &sv_tcp_shared_ops;
		out[n++] = &sv_tcp_shared6_ops;
		out[n++] = &sv_tcp_shared6ll_ops;
	}
	return n;
}

bool sv_transport_by_address(enum sv_transport_mode mode)
{
	return mode == SV_TRANSPORT_ROCEV2;
}

uint16_t sv_transport_peer_port(enum sv_transport_mode mode, uint16_t port)
{
	return mode == SV_TRANSPORT_ROCEV2 ? SV_ROCE_UDP_PORT : port;
}

int sv_transport_connect(struct sv_conn *c, enum sv_transport_mode mode)
{
	if (mode == SV_TRANSPORT_ROCEV2) {
		c->ops = &sv_rocev2_ops;
		return c->ops->connect(c);
	}
	/* shm names an endpoint by its address (gid.c gives a GID of this
	 * host as that address): only a peer of this host answers there */
	if (mode != SV_TRANSPORT_TCP) {
		c->ops = &sv_shm_ops;
		if (!c->ops->connect(c) && c->fd >= 0)
			return 0;
		sv_dbg("no shm path to %s:%u", SV_IP_STR(&c->peer.ip), c->peer.port);
		if (mode == SV_TRANSPORT_SHM)
			return -EHOSTUNREACH;
	}
	/* another host or namespace, or a peer with tcp forced: no shm name */
	c->ops = &sv_tcp_ops;
	return c->ops->connect(c);
}

int sv_transport_group(struct sv_conn *c, const union ibv_gid *mgid, struct in_addr ifip)
{
	c->ops = &sv_mcast_ops; /* set before anything can fail: sv_conn_put closes */
	return sv_mcast_open(c, mgid, ifip);
}
