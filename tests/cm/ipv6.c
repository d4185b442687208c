/*
 * cm_ipv6: rdma_cm over IPv6 on ::1 (device sv_lo, whose GID index 5 is
 * ::1), both sides in this process, as Linux's CM over Soft-RoCE does it.
 *   - bind and listen on ::1: like 127.0.0.1, no device until a request;
 *     the local address reads back as a sockaddr_in6
 *   - resolve ::1: device sv_lo, source and destination sockaddr_in6, the
 *     path's GIDs those of the IPv6 address (sgid: GID index 5, dgid: ::1);
 *     connect and accept: the request's id has sockaddr_in6 addresses (the
 *     peer's port is the active id's), rdma_init_qp_attr's RTR AV uses
 *     sgid_index 5 and the peer's IPv6 GID; SEND both ways, RDMA WRITE and
 *     READ, checked byte for byte
 *   - the wildcard :: listens for both families, as the kernel's CM: an
 *     IPv4 request's id has AF_INET addresses and GID index 3, an IPv6
 *     one's AF_INET6 and index 5; with RDMA_OPTION_ID_AFONLY (set while
 *     bound) an IPv4 request is refused (REJECTED), IPv6 still connects;
 *     AFONLY once listening: EINVAL
 *   - UD (SIDR) over ::1: the ah_attr of ESTABLISHED has sgid_index 5 and
 *     the peer's IPv6 GID, and a datagram sent with it arrives
 *   - multicast: a UD id resolved from ::1 joins an ff0e:: group (the MGID
 *     is the address, sgid_index 5) and receives what it sends there
 *   - rdma_getaddrinfo with AF_INET6 (RAI_NUMERICHOST, RAI_PASSIVE)
 *   - rsockets: an AF_INET6 stream on ::1 (rbind, rlisten, rconnect,
 *     raccept with the peer's sockaddr_in6), bytes both ways; IPV6_V6ONLY
 *   - errors, as Linux's: an IPv6 address of no host: EADDRNOTAVAIL (as an
 *     IPv4 one); link-local without a scope id: EINVAL (bind; resolve with
 *     no link-local source); a destination of the other family than the
 *     bound id: EINVAL, the id unchanged; AF_IB: EAFNOSUPPORT; an IPv6
 *     address shorter than a sockaddr_in6 to rbind/rconnect: EINVAL
 * Ports 20583-20588.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <pthread.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <unistd.h>

#define PORT_RC 20583
#define PORT_DUAL 20584
#define PORT_UD 20585
#define PORT_RS 20586
#define PORT_AFONLY 20587
#define PORT_ERR 20588 /* a destination only: nothing connects to it */

static struct sockaddr_in6 *sin6_of(struct sockaddr *sa)
{
	SVT_CHECK_EQ(sa->sa_family, AF_INET6);
	return (struct sockaddr_in6 *)sa;
}

static union ibv_gid gid_at(struct ibv_context *ctx, int index)
{
	union ibv_gid g;

	SVT_CHECK_OK(ibv_query_gid(ctx, 1, index, &g));
	return g;
}

/* The AV the library gives the id's QP at RTR. */
static struct ibv_ah_attr rtr_av(struct rdma_cm_id *id)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask;

	SVT_CHECK_CM(rdma_init_qp_attr(id, &a, &mask));
	SVT_CHECK(mask & IBV_QP_AV);
	SVT_CHECK_EQ(a.ah_attr.is_global, 1);
	return a.ah_attr;
}

static void test_rc_loopback(void)
{
	struct rdma_event_channel *ch_p = rdma_create_event_channel();
	struct rdma_event_channel *ch_a = rdma_create_event_channel();
	struct cmt_side act = { 0 }, pas = { 0 };
	struct rdma_cm_id *listener;

	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);
	listener = cmt_listen(ch_p, RDMA_PS_TCP, "::1", PORT_RC);
	/* a loopback bind names no device, as on Linux (the request will) */
	SVT_CHECK(listener->verbs == NULL);
	struct sockaddr_in6 *l6 = sin6_of(rdma_get_local_addr(listener));

	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&l6->sin6_addr));
	SVT_CHECK_EQ(rdma_get_src_port(listener), htons(PORT_RC));

	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, NULL, RDMA_PS_TCP));
	cmt_resolve(act.id, ch_a, "::1", PORT_RC);
	SVT_CHECK_PTR(act.id->verbs);
	SVT_CHECK(strcmp(ibv_get_device_name(act.id->verbs->device), "sv_lo") == 0);
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&sin6_of(rdma_get_local_addr(act.id))->sin6_addr));
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&sin6_of(rdma_get_peer_addr(act.id))->sin6_addr));
	SVT_CHECK_EQ(rdma_get_dst_port(act.id), htons(PORT_RC));
	SVT_CHECK_NE(rdma_get_src_port(act.id), 0);
	/* the path's GIDs are the IPv6 address's: GID 5 of sv_lo is ::1 */
	union ibv_gid g5 = gid_at(act.id->verbs, 5), lo6;

	memcpy(lo6.raw, &in6addr_loopback, 16);
	SVT_CHECK_MEM(&g5, &lo6, 16);
	SVT_CHECK_EQ(act.id->route.num_paths, 1);
	SVT_CHECK_MEM(&act.id->route.path_rec->sgid, &g5, 16);
	SVT_CHECK_MEM(&act.id->route.path_rec->dgid, &lo6, 16);

	cmt_connect_pair(&act, ch_a, &pas, ch_p);
	/* the request's id: the IPv6 addresses of the CM connection */
	SVT_CHECK(strcmp(ibv_get_device_name(pas.id->verbs->device), "sv_lo") == 0);
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&sin6_of(rdma_get_local_addr(pas.id))->sin6_addr));
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&sin6_of(rdma_get_peer_addr(pas.id))->sin6_addr));
	SVT_CHECK_EQ(rdma_get_src_port(pas.id), htons(PORT_RC));
	SVT_CHECK_EQ(rdma_get_dst_port(pas.id), rdma_get_src_port(act.id));
	/* each QP's AV: from its IPv6 GID to the peer's */
	struct ibv_ah_attr av = rtr_av(act.id);

	SVT_CHECK_EQ(av.grh.sgid_index, 5);
	SVT_CHECK_MEM(&av.grh.dgid, &g5, 16);
	av = rtr_av(pas.id);
	SVT_CHECK_EQ(av.grh.sgid_index, 5);
	SVT_CHECK_MEM(&av.grh.dgid, &g5, 16);
	SVT_CHECK_MEM(&pas.id->route.path_rec->sgid, &g5, 16);
	SVT_CHECK_MEM(&pas.id->route.path_rec->dgid, &g5, 16);

	cmt_exchange(&act, &pas, 10);
	cmt_exchange(&pas, &act, 20);
	cmt_close_pair(&act, ch_a, &pas, ch_p);
	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
}

/* One connection to a listener of ch_p from `ip`; checks the request's id. */
static void dual_one(struct rdma_event_channel *ch_p, const char *ip, uint16_t port, int family)
{
	struct rdma_event_channel *ch_a = rdma_create_event_channel();
	struct cmt_side act = { 0 }, pas = { 0 };
	int index = family == AF_INET6 ? 5 : 3;

	SVT_CHECK_PTR(ch_a);
	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, NULL, RDMA_PS_TCP));
	cmt_resolve(act.id, ch_a, ip, port);
	cmt_connect_pair(&act, ch_a, &pas, ch_p);
	SVT_CHECK_EQ(rdma_get_local_addr(pas.id)->sa_family, family);
	SVT_CHECK_EQ(rdma_get_peer_addr(pas.id)->sa_family, family);
	SVT_CHECK_EQ(rdma_get_dst_port(pas.id), rdma_get_src_port(act.id));
	union ibv_gid g = gid_at(pas.id->verbs, index);
	struct ibv_ah_attr av = rtr_av(pas.id);

	SVT_CHECK_EQ(av.grh.sgid_index, index);
	SVT_CHECK_MEM(&av.grh.dgid, &g, 16); /* sv_lo on both ends */
	SVT_CHECK_EQ(rtr_av(act.id).grh.sgid_index, index);
	cmt_exchange(&act, &pas, (uint32_t)(30 + index));
	cmt_close_pair(&pas, ch_p, &act, ch_a);
	rdma_destroy_event_channel(ch_a);
}

static void test_dual_stack(void)
{
	struct rdma_event_channel *ch_p = rdma_create_event_channel();
	struct rdma_cm_id *listener;
	struct rdma_cm_event *ev;
	int one = 1;

	SVT_CHECK_PTR(ch_p);
	listener = cmt_listen(ch_p, RDMA_PS_TCP, "::", PORT_DUAL);
	SVT_CHECK(listener->verbs == NULL);
	SVT_CHECK(IN6_IS_ADDR_UNSPECIFIED(&sin6_of(rdma_get_local_addr(listener))->sin6_addr));
	/* the kernel's CM takes AFONLY only before the listen */
	SVT_CHECK_CM_ERRNO(rdma_set_option(listener, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one,
					   sizeof(one)),
			   EINVAL);
	dual_one(ch_p, "::1", PORT_DUAL, AF_INET6);
	dual_one(ch_p, "127.0.0.1", PORT_DUAL, AF_INET);
	SVT_CHECK_CM(rdma_destroy_id(listener));

	/* AF-only, set once bound: IPv4 requests find no listener */
	struct rdma_cm_id *ls, *v4;
	struct sockaddr_storage any = cmt_sa("::", PORT_AFONLY);
	struct rdma_event_channel *ch_a = rdma_create_event_channel();

	SVT_CHECK_PTR(ch_a);
	SVT_CHECK_CM(rdma_create_id(ch_p, &ls, NULL, RDMA_PS_TCP));
	SVT_CHECK_CM(rdma_bind_addr(ls, (struct sockaddr *)&any));
	SVT_CHECK_CM(rdma_set_option(ls, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)));
	SVT_CHECK_EQ(rdma_get_src_port(ls), htons(PORT_AFONLY));
	SVT_CHECK_CM(rdma_listen(ls, 4));
	SVT_CHECK_CM(rdma_create_id(ch_a, &v4, NULL, RDMA_PS_TCP));
	cmt_resolve(v4, ch_a, "127.0.0.1", PORT_AFONLY);
	/* refused: REJECTED once the CM stops retrying (SOFTVERBS_CM_REFUSED_RETRY_MS, 1 s) */
	SVT_CHECK_CM(rdma_connect(v4, NULL));
	ev = cmt_get_event(ch_a, 0);
	SVT_CHECK_MSG(ev->event == RDMA_CM_EVENT_REJECTED, "IPv4 to an AF-only IPv6 listener: %s",
		      rdma_event_str(ev->event));
	rdma_ack_cm_event(ev);
	SVT_CHECK_CM(rdma_destroy_id(v4));
	cmt_expect_none(ch_p, 50);
	dual_one(ch_p, "::1", PORT_AFONLY, AF_INET6);
	SVT_CHECK_CM(rdma_destroy_id(ls));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
}

/* UD: SIDR over ::1, then a datagram whose GRH carries the IPv6 GIDs. */
static void test_ud(void)
{
	struct rdma_event_channel *ch_p = rdma_create_event_channel();
	struct rdma_event_channel *ch_a = rdma_create_event_channel();
	struct rdma_cm_id *listener, *act, *pas;
	struct rdma_cm_event *ev;
	struct ibv_mr *mr_a, *mr_p;
	char *buf_a = svt_alloc(4096), *buf_p = svt_alloc(4096);

	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);
	listener = cmt_listen(ch_p, RDMA_PS_UDP, "::1", PORT_UD);
	SVT_CHECK_CM(rdma_create_id(ch_a, &act, NULL, RDMA_PS_UDP));
	cmt_resolve(act, ch_a, "::1", PORT_UD);
	SVT_CHECK_EQ(cmt_create_qp(act, IBV_QPT_UD, 4), IBV_QPS_RTS);
	mr_a = rdma_reg_msgs(act, buf_a, 4096);
	SVT_CHECK_PTR(mr_a);
	SVT_CHECK_CM(rdma_connect(act, NULL));
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	pas = ev->id;
	rdma_ack_cm_event(ev);
	SVT_CHECK_EQ(rdma_get_local_addr(pas)->sa_family, AF_INET6);
	SVT_CHECK_EQ(cmt_create_qp(pas, IBV_QPT_UD, 4), IBV_QPS_RTS);
	mr_p = rdma_reg_msgs(pas, buf_p, 4096);
	SVT_CHECK_PTR(mr_p);
	SVT_CHECK_CM(rdma_accept(pas, NULL));
	ev = cmt_expect(ch_a, RDMA_CM_EVENT_ESTABLISHED);
	union ibv_gid g5 = gid_at(act->verbs, 5);

	SVT_CHECK_EQ(ev->param.ud.ah_attr.grh.sgid_index, 5);
	SVT_CHECK_MEM(&ev->param.ud.ah_attr.grh.dgid, &g5, 16);
	struct ibv_ah *ah = ibv_create_ah(act->pd, &ev->param.ud.ah_attr);
	uint32_t qpn = ev->param.ud.qp_num;

	SVT_CHECK_PTR(ah);
	rdma_ack_cm_event(ev);

	svt_fill(buf_a, 300, 5);
	SVT_CHECK_CM(rdma_post_recv(pas, (void *)7, buf_p, 40 + 1024, mr_p));
	SVT_CHECK_CM(rdma_post_ud_send(act, (void *)5, buf_a, 300, mr_a, IBV_SEND_SIGNALED, ah, qpn));
	cmt_send_comp(act, IBV_WC_SEND, 5);
	struct ibv_wc wc = cmt_recv_comp(pas, 7, 40 + 300);

	SVT_CHECK(wc.wc_flags & IBV_WC_GRH);
	SVT_CHECK_EQ(wc.src_qp, act->qp->qp_num);
	SVT_CHECK_FILL(buf_p + 40, 300, 5);
	/*
	 * The GRH names the sender's port: by a GID of its table (between
	 * processes of one host, tcp and shm name endpoints by the IPv4
	 * address, and the GRH then carries GID 3; rocev2 carries GID 5).
	 */
	const struct ibv_grh *grh = (const struct ibv_grh *)buf_p;
	union ibv_gid g3 = gid_at(act->verbs, 3);

	SVT_CHECK(!memcmp(&grh->sgid, &g5, 16) || !memcmp(&grh->sgid, &g3, 16));

	SVT_CHECK_OK(ibv_destroy_ah(ah));
	rdma_dereg_mr(mr_a);
	rdma_dereg_mr(mr_p);
	rdma_destroy_qp(act);
	rdma_destroy_qp(pas);
	SVT_CHECK_CM(rdma_destroy_id(act));
	SVT_CHECK_CM(rdma_destroy_id(pas));
	SVT_CHECK_CM(rdma_destroy_id(listener));
	free(buf_a);
	free(buf_p);
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
}

/* Multicast: an ff0e:: group joined by a UD id on ::1. */
static void test_mcast(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;
	char grp_s[64];
	uint8_t *buf = svt_alloc(4096);
	struct ibv_mr *mr;

	SVT_CHECK_PTR(ch);
	/* a group of this process's own: tests running at the same time use others */
	snprintf(grp_s, sizeof(grp_s), "ff0e::5356:%x:%x", (unsigned)getpid() & 0xffff,
		 (unsigned)getpid() >> 16);
	struct sockaddr_storage grp = cmt_sa(grp_s, 0), lo = cmt_sa("::1", 0);

	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP));
	SVT_CHECK_CM(rdma_resolve_addr(id, (struct sockaddr *)&lo, (struct sockaddr *)&grp, 2000));
	rdma_ack_cm_event(cmt_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	SVT_CHECK_PTR(id->verbs);
	cmt_create_qp(id, IBV_QPT_UD, 4);
	mr = rdma_reg_msgs(id, buf, 4096);
	SVT_CHECK_PTR(mr);
	SVT_CHECK_CM(rdma_post_recv(id, (void *)1, buf, 40 + 1024, mr));
	SVT_CHECK_CM(rdma_join_multicast(id, (struct sockaddr *)&grp, NULL));
	ev = cmt_expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	SVT_CHECK_MEM(&ev->param.ud.ah_attr.grh.dgid, &((struct sockaddr_in6 *)&grp)->sin6_addr, 16);
	SVT_CHECK_EQ(ev->param.ud.ah_attr.grh.sgid_index, 5);
	SVT_CHECK_EQ(ev->param.ud.qp_num, 0xffffff);
	struct ibv_ah *ah = ibv_create_ah(id->pd, &ev->param.ud.ah_attr);
	uint32_t qpn = ev->param.ud.qp_num;

	SVT_CHECK_PTR(ah);
	rdma_ack_cm_event(ev);
	svt_fill(buf + 2048, 200, 9);
	SVT_CHECK_CM(rdma_post_ud_send(id, (void *)2, buf + 2048, 200, mr, IBV_SEND_SIGNALED, ah,
				       qpn));
	cmt_send_comp(id, IBV_WC_SEND, 2);
	cmt_recv_comp(id, 1, 40 + 200);
	SVT_CHECK_FILL(buf + 40, 200, 9);
	SVT_CHECK_CM(rdma_leave_multicast(id, (struct sockaddr *)&grp));
	SVT_CHECK_OK(ibv_destroy_ah(ah));
	rdma_dereg_mr(mr);
	rdma_destroy_qp(id);
	SVT_CHECK_CM(rdma_destroy_id(id));
	free(buf);
	rdma_destroy_event_channel(ch);
}

static void test_addrinfo(void)
{
	struct rdma_addrinfo hints, *res;
	int ret;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET6;
	hints.ai_flags = RAI_NUMERICHOST;
	SVT_CHECK_CM(rdma_getaddrinfo("::1", "20583", &hints, &res));
	SVT_CHECK_EQ(res->ai_family, AF_INET6);
	SVT_CHECK_EQ(res->ai_dst_len, sizeof(struct sockaddr_in6));
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&sin6_of(res->ai_dst_addr)->sin6_addr));
	SVT_CHECK_EQ(sin6_of(res->ai_dst_addr)->sin6_port, htons(20583));
	SVT_CHECK(res->ai_src_addr == NULL);
	rdma_freeaddrinfo(res);
	/* no family asked: the address's own */
	memset(&hints, 0, sizeof(hints));
	SVT_CHECK_CM(rdma_getaddrinfo("::1", "7", &hints, &res));
	SVT_CHECK_EQ(res->ai_family, AF_INET6);
	rdma_freeaddrinfo(res);
	/* passive, IPv6: the wildcard :: to bind to */
	hints.ai_family = AF_INET6;
	hints.ai_flags = RAI_PASSIVE;
	SVT_CHECK_CM(rdma_getaddrinfo(NULL, "20583", &hints, &res));
	SVT_CHECK_EQ(res->ai_family, AF_INET6);
	SVT_CHECK(IN6_IS_ADDR_UNSPECIFIED(&sin6_of(res->ai_src_addr)->sin6_addr));
	rdma_freeaddrinfo(res);
	/* an IPv4 address asked for as IPv6: getaddrinfo's code, as rdma-core returns it */
	hints.ai_flags = RAI_NUMERICHOST;
	res = NULL;
	ret = rdma_getaddrinfo("127.0.0.1", "1", &hints, &res);
	SVT_CHECK_MSG(ret < -1, "IPv4 address with AF_INET6 hints: %d, expected a getaddrinfo code",
		      ret);
	SVT_CHECK(res == NULL);
}

/* ---- rsockets ---- */

static void *rs_server(void *arg)
{
	int ls = *(int *)arg, s;
	struct sockaddr_in6 peer;
	socklen_t pl = sizeof(peer);
	char buf[3000];
	size_t got = 0;

	s = raccept(ls, (struct sockaddr *)&peer, &pl);
	SVT_CHECK_MSG(s >= 0, "raccept: %s", strerror(errno));
	SVT_CHECK_EQ(pl, sizeof(peer));
	SVT_CHECK_EQ(peer.sin6_family, AF_INET6);
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&peer.sin6_addr));
	while (got < sizeof(buf)) {
		ssize_t n = rrecv(s, buf + got, sizeof(buf) - got, 0);

		SVT_CHECK_MSG(n > 0, "rrecv: %zd (%s)", n, strerror(errno));
		got += (size_t)n;
	}
	SVT_CHECK_FILL(buf, sizeof(buf), 61);
	svt_fill(buf, sizeof(buf), 62);
	SVT_CHECK_EQ(rsend(s, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	SVT_CHECK_EQ(rclose(s), 0);
	return NULL;
}

static void test_rsocket(void)
{
	struct sockaddr_storage at = cmt_sa("::1", PORT_RS);
	struct sockaddr_in6 name;
	socklen_t nl = sizeof(name);
	char buf[3000];
	size_t got = 0;
	pthread_t t;
	int ls = rsocket(AF_INET6, SOCK_STREAM, 0), s, v = 1;
	socklen_t vl = sizeof(v);

	SVT_CHECK(ls >= 0);
	/* an AF_INET6 address needs its whole sockaddr_in6 */
	SVT_CHECK_CM_ERRNO(rbind(ls, (struct sockaddr *)&at, sizeof(struct sockaddr_in)), EINVAL);
	SVT_CHECK_CM(rsetsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &v, sizeof(v)));
	v = 0;
	SVT_CHECK_CM(rgetsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &v, &vl));
	SVT_CHECK_EQ(v, 1);
	SVT_CHECK_CM(rbind(ls, (struct sockaddr *)&at, sizeof(struct sockaddr_in6)));
	SVT_CHECK_CM(rlisten(ls, 4));
	SVT_CHECK_CM(rgetsockname(ls, (struct sockaddr *)&name, &nl));
	SVT_CHECK_EQ(nl, sizeof(name));
	SVT_CHECK_EQ(name.sin6_family, AF_INET6);
	SVT_CHECK_EQ(name.sin6_port, htons(PORT_RS));
	SVT_CHECK_EQ(pthread_create(&t, NULL, rs_server, &ls), 0);

	s = rsocket(AF_INET6, SOCK_STREAM, 0);
	SVT_CHECK(s >= 0);
	SVT_CHECK_CM_ERRNO(rconnect(s, (struct sockaddr *)&at, sizeof(struct sockaddr_in)), EINVAL);
	SVT_CHECK_CM(rconnect(s, (struct sockaddr *)&at, sizeof(struct sockaddr_in6)));
	nl = sizeof(name);
	SVT_CHECK_CM(rgetpeername(s, (struct sockaddr *)&name, &nl));
	SVT_CHECK_EQ(name.sin6_family, AF_INET6);
	SVT_CHECK(IN6_IS_ADDR_LOOPBACK(&name.sin6_addr));
	SVT_CHECK_EQ(name.sin6_port, htons(PORT_RS));
	svt_fill(buf, sizeof(buf), 61);
	SVT_CHECK_EQ(rsend(s, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
	while (got < sizeof(buf)) {
		ssize_t n = rrecv(s, buf + got, sizeof(buf) - got, 0);

		SVT_CHECK_MSG(n > 0, "rrecv: %zd (%s)", n, strerror(errno));
		got += (size_t)n;
	}
	SVT_CHECK_FILL(buf, sizeof(buf), 62);
	SVT_CHECK_EQ(pthread_join(t, NULL), 0);
	SVT_CHECK_EQ(rclose(s), 0);
	SVT_CHECK_EQ(rclose(ls), 0);
}

static void test_errors(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_storage nowhere6 = cmt_sa("fd00:5356:dead::1", 0);
	struct sockaddr_storage nowhere4 = cmt_sa("192.0.2.254", 0);
	struct sockaddr_storage ll = cmt_sa("fe80::1", PORT_ERR);
	struct sockaddr_storage lo4 = cmt_sa("127.0.0.1", 0), lo6 = cmt_sa("::1", PORT_ERR);
	struct sockaddr_storage ib = { .ss_family = AF_IB };

	SVT_CHECK_PTR(ch);
	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	/* an address no interface of this host has: the same errno for both families */
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&nowhere4), EADDRNOTAVAIL);
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&nowhere6), EADDRNOTAVAIL);
	/* link-local with no scope id */
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&ll), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ll, 2000), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&ib), EAFNOSUPPORT);
	SVT_CHECK_CM_ERRNO(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ib, 2000), EAFNOSUPPORT);
	/* a source of the other family than the destination */
	SVT_CHECK_CM_ERRNO(rdma_resolve_addr(id, (struct sockaddr *)&lo4, (struct sockaddr *)&lo6,
					     2000),
			   EINVAL);
	cmt_expect_none(ch, 20);
	/* none of it changed the id: it is still idle */
	SVT_CHECK(id->verbs == NULL);
	SVT_CHECK_EQ(rdma_get_local_addr(id)->sa_family, 0);
	SVT_CHECK_CM(rdma_bind_addr(id, (struct sockaddr *)&lo4));
	/* bound to IPv4: an IPv6 destination is refused, the id stays bound */
	SVT_CHECK_CM_ERRNO(rdma_resolve_addr(id, NULL, (struct sockaddr *)&lo6, 2000), EINVAL);
	cmt_expect_none(ch, 20);
	SVT_CHECK_EQ(rdma_get_local_addr(id)->sa_family, AF_INET);
	cmt_resolve(id, ch, "127.0.0.1", PORT_ERR);
	SVT_CHECK_CM(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

/* ::1 is there (a host or container may have IPv6 turned off). */
static bool have_ipv6_loopback(void)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	int fd = socket(AF_INET6, SOCK_DGRAM, 0);
	bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;

	if (fd >= 0)
		close(fd);
	return ok;
}

int main(void)
{
	svt_watchdog(40);
	if (!have_ipv6_loopback())
		svt_skip("no IPv6 loopback address (::1) on this host");
	test_errors();
	test_addrinfo();
	test_rc_loopback();
	test_dual_stack();
	test_ud();
	test_mcast();
	test_rsocket();
	svt_log("ok");
	return 0;
}
