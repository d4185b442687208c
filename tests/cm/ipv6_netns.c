/*
 * cm_ipv6_netns: rdma_cm over IPv6 between two devices, link-local
 * addresses with scope ids included, in a network namespace of the test's
 * own (root only: else skipped).  In it: a veth pair sva/svb with
 * 10.212.0.1/.2, fd00:212::1/::2 and the link-local fe80::1 (sva) and
 * fe80::2 (svb), added without duplicate address detection so that they
 * are usable at once; svd, of another veth pair, with 10.212.9.1 and
 * fd00:212:9::1, which SOFTVERBS_IFACES leaves out; no device on lo
 * (SOFTVERBS_LOOPBACK=0).
 *   - link-local: a listener bound to fe80::1%sva (device sv_sva; the
 *     scope id reads back); an id bound to fe80::2%svb resolves fe80::1
 *     without a scope id on svb's link; an unbound id resolves
 *     fe80::1%svb and connects from sv_svb: the request's id has both
 *     link-local addresses with sva's scope, the AVs use GID index 5 (the
 *     interfaces' global IPv6 addresses); data moves both ways
 *   - global addresses: fd00:212::2 to fd00:212::1, sv_svb to sv_sva
 *   - ::1 with no device on lo is served by the first device, as
 *     127.0.0.1 is (and as Linux's CM binds loopback to the first port)
 *   - errors: an address of an interface that is no device: ENODEV from
 *     rdma_bind_addr and ADDR_ERROR -ENODEV from rdma_resolve_addr, the
 *     same for IPv6 as for IPv4; a link-local address with the scope of an
 *     interface that does not have it: EADDRNOTAVAIL
 * Port 20589 (in its own namespace, so nothing else meets it).
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PORT 20589

static const char *const setup[] = {
	"ip link set lo up",
	"ip link add sva type veth peer name svb",
	"ip addr add 10.212.0.1/24 dev sva",
	"ip addr add 10.212.0.2/24 dev svb",
	"ip addr add fd00:212::1/64 dev sva nodad",
	"ip addr add fd00:212::2/64 dev svb nodad",
	"ip addr add fe80::1/64 dev sva nodad",
	"ip addr add fe80::2/64 dev svb nodad",
	"ip link set sva up",
	"ip link set svb up",
	"ip link add svc type veth peer name svd",
	"ip addr add 10.212.9.1/24 dev svd",
	"ip addr add fd00:212:9::1/64 dev svd nodad",
	"ip link set svc up",
	"ip link set svd up",
};

/* A namespace of our own with the interfaces above, or skip. */
static void make_netns(void)
{
	char cmd[256];
	uint64_t deadline;

	if (geteuid() != 0)
		svt_skip("needs root: a network namespace with a veth pair");
	if (unshare(CLONE_NEWNET))
		svt_skip("unshare(CLONE_NEWNET) failed: no network namespace here");
	if (system("command -v ip >/dev/null 2>&1"))
		svt_skip("ip(8) not installed");
	for (size_t i = 0; i < sizeof(setup) / sizeof(setup[0]); i++) {
		snprintf(cmd, sizeof(cmd), "%s 2>&1", setup[i]);
		if (system(cmd))
			svt_skip("could not set up the namespace's interfaces (veth, IPv6)");
	}
	/* both ends of the veth have their carrier */
	deadline = svt_now_ms() + 5000;
	for (;;) {
		struct ifaddrs *ifa, *i;
		int running = 0;

		SVT_CHECK_OK(getifaddrs(&ifa));
		for (i = ifa; i; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
			    (!strcmp(i->ifa_name, "sva") || !strcmp(i->ifa_name, "svb")) &&
			    (i->ifa_flags & IFF_RUNNING))
				running++;
		freeifaddrs(ifa);
		if (running == 2)
			break;
		if (svt_now_ms() > deadline)
			SVT_FAIL("the veth pair did not come up");
		usleep(20000);
	}
	setenv("SOFTVERBS_IFACES", "sva,svb", 1);
	setenv("SOFTVERBS_LOOPBACK", "0", 1);
}

static const char *dev_name(struct rdma_cm_id *id)
{
	SVT_CHECK_PTR(id->verbs);
	return ibv_get_device_name(id->verbs->device);
}

static struct sockaddr_in6 *sin6_of(struct sockaddr *sa)
{
	SVT_CHECK_EQ(sa->sa_family, AF_INET6);
	return (struct sockaddr_in6 *)sa;
}

static void check_sin6(struct sockaddr *sa, const char *ip, const char *ifname)
{
	struct sockaddr_in6 *s6 = sin6_of(sa);
	struct in6_addr want;
	char got[INET6_ADDRSTRLEN];

	SVT_CHECK_EQ(inet_pton(AF_INET6, ip, &want), 1);
	SVT_CHECK_MSG(!memcmp(&s6->sin6_addr, &want, 16), "address %s, expected %s",
		      inet_ntop(AF_INET6, &s6->sin6_addr, got, sizeof(got)), ip);
	if (ifname)
		SVT_CHECK_EQ(s6->sin6_scope_id, if_nametoindex(ifname));
}

/* The RTR AV of the id's QP: from its GID index 5 to the peer's GID 5. */
static void check_av(struct rdma_cm_id *id, struct rdma_cm_id *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	union ibv_gid g;
	int mask;

	SVT_CHECK_CM(rdma_init_qp_attr(id, &a, &mask));
	SVT_CHECK_EQ(a.ah_attr.grh.sgid_index, 5);
	SVT_CHECK_OK(ibv_query_gid(peer->verbs, 1, 5, &g));
	SVT_CHECK_MEM(&a.ah_attr.grh.dgid, &g, 16);
}

/* A connection from `from` (NULL: the route's source) to `to`, then data. */
static void connect_and_use(struct rdma_event_channel *ch_p, const char *from, const char *to,
			    const char *want_act, const char *want_pas, uint32_t seed)
{
	struct rdma_event_channel *ch_a = rdma_create_event_channel();
	struct cmt_side act = { 0 }, pas = { 0 };

	SVT_CHECK_PTR(ch_a);
	SVT_CHECK_CM(rdma_create_id(ch_a, &act.id, NULL, RDMA_PS_TCP));
	if (from) {
		struct sockaddr_storage src = cmt_sa(from, 0);

		SVT_CHECK_CM(rdma_bind_addr(act.id, (struct sockaddr *)&src));
	}
	cmt_resolve(act.id, ch_a, to, PORT);
	SVT_CHECK_MSG(!strcmp(dev_name(act.id), want_act), "active id on %s, expected %s",
		      dev_name(act.id), want_act);
	cmt_connect_pair(&act, ch_a, &pas, ch_p);
	SVT_CHECK_MSG(!strcmp(dev_name(pas.id), want_pas), "request's id on %s, expected %s",
		      dev_name(pas.id), want_pas);
	check_av(act.id, pas.id);
	check_av(pas.id, act.id);
	cmt_exchange(&act, &pas, seed);
	cmt_exchange(&pas, &act, seed + 10);
	cmt_close_pair(&act, ch_a, &pas, ch_p);
	rdma_destroy_event_channel(ch_a);
}

static void test_linklocal(void)
{
	struct rdma_event_channel *ch_p = rdma_create_event_channel();
	struct rdma_event_channel *ch_a = rdma_create_event_channel();
	struct rdma_cm_id *ls, *id;
	struct sockaddr_storage src = cmt_sa("fe80::2%svb", 0), dst = cmt_sa("fe80::1", PORT);
	struct rdma_cm_event *ev;

	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);
	ls = cmt_listen(ch_p, RDMA_PS_TCP, "fe80::1%sva", PORT);
	SVT_CHECK(!strcmp(dev_name(ls), "sv_sva"));
	check_sin6(rdma_get_local_addr(ls), "fe80::1", "sva");

	/* the destination's link is the bound source's */
	SVT_CHECK_CM(rdma_create_id(ch_a, &id, NULL, RDMA_PS_TCP));
	SVT_CHECK_CM(rdma_bind_addr(id, (struct sockaddr *)&src));
	SVT_CHECK(!strcmp(dev_name(id), "sv_svb"));
	SVT_CHECK_CM(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	ev = cmt_expect(ch_a, RDMA_CM_EVENT_ADDR_RESOLVED);
	rdma_ack_cm_event(ev);
	check_sin6(rdma_get_peer_addr(id), "fe80::1", "svb");
	check_sin6(rdma_get_local_addr(id), "fe80::2", "svb");
	SVT_CHECK_CM(rdma_destroy_id(id));

	/* an unbound id, the scope given: connected, data both ways */
	connect_and_use(ch_p, NULL, "fe80::1%svb", "sv_svb", "sv_sva", 100);
	SVT_CHECK_CM(rdma_destroy_id(ls));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
}

static void test_global_and_loopback(void)
{
	struct rdma_event_channel *ch_p = rdma_create_event_channel();
	struct rdma_cm_id *ls;

	SVT_CHECK_PTR(ch_p);
	ls = cmt_listen(ch_p, RDMA_PS_TCP, "fd00:212::1", PORT);
	SVT_CHECK(!strcmp(dev_name(ls), "sv_sva"));
	connect_and_use(ch_p, "fd00:212::2", "fd00:212::1", "sv_svb", "sv_sva", 200);
	SVT_CHECK_CM(rdma_destroy_id(ls));

	/* no sv_lo: ::1 is the first device's */
	struct ibv_device **list = ibv_get_device_list(NULL);
	char first[IBV_SYSFS_NAME_MAX];

	SVT_CHECK(list && list[0]);
	snprintf(first, sizeof(first), "%s", ibv_get_device_name(list[0]));
	ibv_free_device_list(list);
	ls = cmt_listen(ch_p, RDMA_PS_TCP, "::1", PORT);
	SVT_CHECK(ls->verbs == NULL);
	connect_and_use(ch_p, NULL, "::1", first, first, 300);
	SVT_CHECK_CM(rdma_destroy_id(ls));
	rdma_destroy_event_channel(ch_p);
}

/* resolve dst from an unbound id: ADDR_ERROR with status -ENODEV */
static void expect_addr_error(struct rdma_event_channel *ch, const char *dst)
{
	struct rdma_cm_id *id;
	struct sockaddr_storage d = cmt_sa(dst, PORT);
	struct rdma_cm_event *ev;

	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	SVT_CHECK_CM(rdma_resolve_addr(id, NULL, (struct sockaddr *)&d, 2000));
	ev = cmt_get_event(ch, 0);
	SVT_CHECK_MSG(ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status == -ENODEV,
		      "resolve %s: %s status %d, expected ADDR_ERROR -ENODEV", dst,
		      rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	SVT_CHECK_CM(rdma_destroy_id(id));
}

static void test_errors(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_storage v4 = cmt_sa("10.212.9.1", 0), v6 = cmt_sa("fd00:212:9::1", 0);
	struct sockaddr_storage wrong_link = cmt_sa("fe80::1%svb", 0);
	struct sockaddr_storage no_ll = cmt_sa("fe80::1%svd", 0);

	SVT_CHECK_PTR(ch);
	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	/* addresses of this host on an interface that is no device */
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&v4), ENODEV);
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&v6), ENODEV);
	/* fe80::1 is sva's, not svb's nor svd's */
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&wrong_link), EADDRNOTAVAIL);
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&no_ll), EADDRNOTAVAIL);
	SVT_CHECK(id->verbs == NULL);
	SVT_CHECK_CM(rdma_destroy_id(id));
	expect_addr_error(ch, "10.212.9.1");
	expect_addr_error(ch, "fd00:212:9::1");
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	svt_watchdog(40);
	make_netns();
	test_errors();
	test_linklocal();
	test_global_and_loopback();
	svt_log("ok");
	return 0;
}
