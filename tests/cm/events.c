/*
 * cm_events: event channels, address and route resolution, and the calls
 * that must fail (rdma_cm(7), rdma_get_cm_event(3), rdma_resolve_addr(3)).
 *   - the channel fd is not readable while the queue is empty, is readable
 *     once an event is queued, and with O_NONBLOCK rdma_get_cm_event says
 *     -1/EAGAIN instead of blocking
 *   - ADDR_RESOLVED then ROUTE_RESOLVED for 127.0.0.1, on sv_lo, with a local
 *     port chosen and the destination port kept (rdma_get_src/dst_port)
 *   - rdma_event_str names, rdma_get_devices lists sv_lo
 *   - a destination no softverbs device reaches gives ADDR_ERROR; binding to
 *     an address that is not local fails with EADDRNOTAVAIL
 *   - NULL ids, calls in the wrong state and oversized private data fail with
 *     EINVAL
 * Ports 20500-20509.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#define PORT_RESOLVE 20500
#define PORT_STATE 20501

static void test_nonblocking_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id;
	struct pollfd pfd;
	int fl;

	SVT_CHECK_PTR(ch);
	SVT_CHECK_GE(ch->fd, 0);
	fl = fcntl(ch->fd, F_GETFL);
	SVT_CHECK_GE(fl, 0);
	SVT_CHECK_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);

	/* empty: not readable, and a read does not block */
	pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	SVT_CHECK_EQ(poll(&pfd, 1, 0), 0);
	SVT_CHECK_CM_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN);
	SVT_CHECK(ev == NULL);

	/* one event: readable; consumed: empty again */
	SVT_CHECK_CM(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP));
	SVT_CHECK(id->channel == ch);
	SVT_CHECK(id->context == (void *)0x1234);
	struct sockaddr_in dst = cmt_sin("127.0.0.1", PORT_RESOLVE);

	SVT_CHECK_CM(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	pfd.revents = 0;
	SVT_CHECK_EQ(poll(&pfd, 1, SVT_TIMEOUT_MS), 1);
	SVT_CHECK(pfd.revents & POLLIN);
	SVT_CHECK_CM(rdma_get_cm_event(ch, &ev));
	SVT_CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	SVT_CHECK_EQ(ev->status, 0);
	SVT_CHECK(ev->id == id);
	SVT_CHECK(ev->listen_id == NULL);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	pfd.revents = 0;
	SVT_CHECK_EQ(poll(&pfd, 1, 0), 0);
	SVT_CHECK_CM_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN);

	/* the id is now bound to a device and a local port of its own */
	SVT_CHECK_PTR(id->verbs);
	SVT_CHECK(strcmp(ibv_get_device_name(id->verbs->device), "sv_lo") == 0);
	SVT_CHECK_EQ(id->port_num, 1);
	SVT_CHECK_NE(rdma_get_src_port(id), 0);
	SVT_CHECK_EQ(rdma_get_dst_port(id), htons(PORT_RESOLVE));
	struct sockaddr_in *src = (struct sockaddr_in *)rdma_get_local_addr(id);
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(id);

	SVT_CHECK_EQ(src->sin_family, AF_INET);
	SVT_CHECK_EQ(src->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	SVT_CHECK_EQ(src->sin_port, rdma_get_src_port(id));
	SVT_CHECK_EQ(peer->sin_family, AF_INET);
	SVT_CHECK_EQ(peer->sin_addr.s_addr, htonl(INADDR_LOOPBACK));

	/* route: one path whose source GID is the device's GID 0 */
	SVT_CHECK_CM(rdma_resolve_route(id, 2000));
	pfd.revents = 0;
	SVT_CHECK_EQ(poll(&pfd, 1, SVT_TIMEOUT_MS), 1);
	SVT_CHECK_CM(rdma_get_cm_event(ch, &ev));
	SVT_CHECK_EQ(ev->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
	SVT_CHECK_EQ(ev->status, 0);
	SVT_CHECK(ev->id == id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	SVT_CHECK_EQ(id->route.num_paths, 1);
	SVT_CHECK_PTR(id->route.path_rec);
	union ibv_gid gid;

	SVT_CHECK_OK(ibv_query_gid(id->verbs, 1, 3, &gid)); /* the IPv4 address's RoCE v2 GID */
	SVT_CHECK_MEM(&id->route.path_rec->sgid, &gid, sizeof(gid));
	SVT_CHECK_CM_ERRNO(rdma_get_cm_event(ch, &ev), EAGAIN);

	/* resolving again from ROUTE_RESOLVED is a state error */
	SVT_CHECK_CM_ERRNO(rdma_resolve_route(id, 2000), EINVAL);

	SVT_CHECK_CM(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

static void test_names_and_devices(void)
{
	SVT_CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ADDR_RESOLVED),
			 "RDMA_CM_EVENT_ADDR_RESOLVED") == 0);
	SVT_CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED),
			 "RDMA_CM_EVENT_ESTABLISHED") == 0);
	SVT_CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT),
			 "RDMA_CM_EVENT_TIMEWAIT_EXIT") == 0);
	/* out of range: a string, never NULL (programs print it unchecked) */
	SVT_CHECK_PTR(rdma_event_str((enum rdma_cm_event_type)1000));

	int n = -1;
	struct ibv_context **list = rdma_get_devices(&n);
	bool found = false;

	SVT_CHECK_PTR(list);
	SVT_CHECK_GE(n, 1);
	for (int i = 0; i < n; i++) {
		SVT_CHECK_PTR(list[i]);
		if (strcmp(ibv_get_device_name(list[i]->device), "sv_lo") == 0)
			found = true;
	}
	SVT_CHECK(list[n] == NULL); /* the list is NULL-terminated */
	SVT_CHECK_MSG(found, "rdma_get_devices does not list sv_lo");
	rdma_free_devices(list);
}

static void test_unreachable(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_cm_event *ev;

	SVT_CHECK_PTR(ch);
	/*
	 * main() limited softverbs to the loopback interface, so 203.0.113.1
	 * (TEST-NET-3) is either not routed at all or routed through an
	 * interface that is no softverbs device: ADDR_ERROR either way, the
	 * call itself succeeding as on real rdma_cm.
	 */
	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	struct sockaddr_in far = cmt_sin("203.0.113.1", PORT_RESOLVE);

	SVT_CHECK_CM(rdma_resolve_addr(id, NULL, (struct sockaddr *)&far, 500));
	ev = cmt_get_event(ch, 0);
	SVT_CHECK_MSG(ev->event == RDMA_CM_EVENT_ADDR_ERROR, "got %s", rdma_event_str(ev->event));
	SVT_CHECK_LT(ev->status, 0);
	SVT_CHECK(ev->id == id);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	/* an id whose resolution failed is not route-resolvable */
	SVT_CHECK_CM_ERRNO(rdma_resolve_route(id, 500), EINVAL);
	SVT_CHECK_CM(rdma_destroy_id(id));

	/* 198.51.100.1 (TEST-NET-2) is no address of this host */
	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	struct sockaddr_in notlocal = cmt_sin("198.51.100.1", PORT_STATE);

	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&notlocal), EADDRNOTAVAIL);
	cmt_expect_none(ch, 50);
	SVT_CHECK_CM(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
}

static void test_invalid_calls(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1 };
	uint8_t pdata[256] = { 0 };
	struct sockaddr_in dst = cmt_sin("127.0.0.1", PORT_STATE);
	struct rdma_cm_event *ev;

	SVT_CHECK_PTR(ch);
	/* NULL ids */
	SVT_CHECK_CM_ERRNO(rdma_connect(NULL, &param), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_accept(NULL, &param), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_reject(NULL, NULL, 0), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_disconnect(NULL), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_listen(NULL, 1), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_resolve_addr(NULL, NULL, (struct sockaddr *)&dst, 100), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_resolve_route(NULL, 100), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_destroy_id(NULL), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_get_cm_event(ch, NULL), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x7777), EINVAL);

	/* a fresh id: nothing to connect, accept, reject or disconnect */
	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	SVT_CHECK_CM_ERRNO(rdma_connect(id, &param), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_accept(id, &param), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_reject(id, NULL, 0), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_disconnect(id), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_resolve_route(id, 100), EINVAL);

	/* address resolved, route not: still too early to connect */
	SVT_CHECK_CM(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	ev = cmt_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	SVT_CHECK_CM_ERRNO(rdma_connect(id, &param), EINVAL);
	/* an id that resolves an address is an active id: no listening on it */
	SVT_CHECK_CM_ERRNO(rdma_listen(id, 1), EINVAL);
	SVT_CHECK_CM_ERRNO(rdma_accept(id, &param), EINVAL);

	/* route resolved: the REQ's private data holds at most 56 bytes */
	SVT_CHECK_CM(rdma_resolve_route(id, 2000));
	ev = cmt_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	param.private_data = pdata;
	param.private_data_len = 57;
	SVT_CHECK_CM_ERRNO(rdma_connect(id, &param), EINVAL);
	/* a length with no data */
	param.private_data = NULL;
	param.private_data_len = 8;
	SVT_CHECK_CM_ERRNO(rdma_connect(id, &param), EINVAL);
	/* nothing was sent: no event */
	cmt_expect_none(ch, 50);
	SVT_CHECK_CM(rdma_destroy_id(id));

	/* a bound id cannot be bound twice */
	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	struct sockaddr_in any = cmt_sin("127.0.0.1", 0);

	SVT_CHECK_CM(rdma_bind_addr(id, (struct sockaddr *)&any));
	SVT_CHECK_NE(rdma_get_src_port(id), 0); /* port 0: one was chosen */
	SVT_CHECK_CM_ERRNO(rdma_bind_addr(id, (struct sockaddr *)&any), EINVAL);
	SVT_CHECK_CM(rdma_destroy_id(id));

	rdma_destroy_event_channel(ch);
}

int main(void)
{
	/*
	 * Only the loopback interface becomes a softverbs device, so that the
	 * ADDR_ERROR check has an address no device reaches on any host (with
	 * or without a default route).
	 */
	setenv("SOFTVERBS_IFACES", "lo", 1);
	svt_watchdog(20);
	test_nonblocking_channel();
	test_names_and_devices();
	test_unreachable();
	test_invalid_calls();
	svt_log("ok");
	return 0;
}
