/*
 * cm_pd: rdma_cm_id.pd, the protection domain librdmacm gives every id that
 * reaches a device (rdma-core: ucma_get_device), and how long it lives.
 *   - none before the id has a device: a new id, an id bound to the
 *     loopback address, a listener there
 *   - rdma_resolve_addr sets it, on the id's context; so does a bind to the
 *     address of a non-loopback device (when the host has one); the id of a
 *     connection request has it, and ids on one device share one PD
 *   - programs use it as it is: ibv_create_ah and ibv_create_qp on the
 *     active id's PD work, and rdma_create_qp(id, NULL, ...) takes it
 *   - it goes with the device's last id (the next id gets a new PD, with
 *     another handle), not while an rdma_get_devices list holds the device;
 *     an MR left on it keeps it valid
 * Ports 20576-20577.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <rdma/rdma_verbs.h>

#define PORT 20576
#define PORT_BIND 20577

/* A new id on ch, resolved to the listener: its PD must be there. */
static struct rdma_cm_id *resolved_id(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id;

	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	SVT_CHECK(id->pd == NULL);
	cmt_resolve(id, ch, "127.0.0.1", PORT);
	SVT_CHECK_PTR(id->verbs);
	SVT_CHECK_PTR(id->pd);
	SVT_CHECK(id->pd->context == id->verbs);
	return id;
}

/* A bind to a device's own address gives the id that device and its PD. */
static void bind_to_device_address(struct rdma_event_channel *ch)
{
	int n = 0, tried = 0;
	struct ibv_context **list = rdma_get_devices(&n);

	SVT_CHECK_PTR(list);
	for (int i = 0; i < n; i++) {
		union ibv_gid gid;
		struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(PORT_BIND) };
		struct rdma_cm_id *id;

		SVT_CHECK_OK(ibv_query_gid(list[i], 1, 3, &gid)); /* the IPv4-mapped RoCE v2 GID */
		memcpy(&sin.sin_addr, &gid.raw[12], 4);
		if (!sin.sin_addr.s_addr || (ntohl(sin.sin_addr.s_addr) >> 24) == IN_LOOPBACKNET)
			continue;
		SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
		SVT_CHECK_CM(rdma_bind_addr(id, (struct sockaddr *)&sin));
		SVT_CHECK(id->verbs == list[i]);
		SVT_CHECK_PTR(id->pd);
		SVT_CHECK(id->pd->context == list[i]);
		SVT_CHECK_CM(rdma_destroy_id(id));
		tried++;
	}
	rdma_free_devices(list);
	if (!tried)
		svt_log("no device with a non-loopback address: the bind case did not run");
}

int main(void)
{
	struct rdma_event_channel *ch_p, *ch_a;
	struct rdma_cm_id *listener, *id, *act, *pas;
	struct rdma_cm_event *ev;
	struct sockaddr_in lo = cmt_sin("127.0.0.1", 0);
	struct ibv_pd *pd;
	uint32_t handle;

	svt_watchdog(20);
	ch_p = rdma_create_event_channel();
	ch_a = rdma_create_event_channel();
	SVT_CHECK_PTR(ch_p);
	SVT_CHECK_PTR(ch_a);

	/* no device, no PD */
	SVT_CHECK_CM(rdma_create_id(ch_a, &id, NULL, RDMA_PS_TCP));
	SVT_CHECK(id->pd == NULL);
	SVT_CHECK_CM(rdma_bind_addr(id, (struct sockaddr *)&lo));
	SVT_CHECK(id->verbs == NULL && id->pd == NULL);
	SVT_CHECK_CM(rdma_destroy_id(id));
	listener = cmt_listen(ch_p, RDMA_PS_TCP, "127.0.0.1", PORT);
	SVT_CHECK(listener->pd == NULL);

	bind_to_device_address(ch_a);

	/* the active id's PD, used directly as programs do */
	act = resolved_id(ch_a);
	pd = act->pd;
	handle = pd->handle;
	{
		union ibv_gid gid;
		struct ibv_ah_attr aa;
		struct ibv_ah *ah;
		struct ibv_cq *cq = ibv_create_cq(act->verbs, 8, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = {
			.send_cq = cq,
			.recv_cq = cq,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
				 .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
		};
		struct ibv_qp *qp;

		SVT_CHECK_OK(ibv_query_gid(act->verbs, 1, 3, &gid));
		svt_ah_attr(&aa, &gid, NULL);
		aa.grh.sgid_index = 3;
		ah = ibv_create_ah(act->pd, &aa);
		SVT_CHECK_MSG(ah != NULL, "ibv_create_ah on id->pd: %s", strerror(errno));
		SVT_CHECK(ah->pd == pd);
		SVT_CHECK_OK(ibv_destroy_ah(ah));
		SVT_CHECK_PTR(cq);
		qp = ibv_create_qp(act->pd, &qa);
		SVT_CHECK_MSG(qp != NULL, "ibv_create_qp on id->pd: %s", strerror(errno));
		SVT_CHECK(qp->pd == pd);
		SVT_CHECK_OK(ibv_destroy_qp(qp));
		SVT_CHECK_OK(ibv_destroy_cq(cq));
	}
	/* rdma_create_qp with no PD takes the id's (cmt_create_qp checks it) */
	SVT_CHECK_EQ(cmt_create_qp(act, IBV_QPT_RC, 8), IBV_QPS_INIT);
	SVT_CHECK(act->pd == pd);

	/* the request's id: the same device, the same PD */
	SVT_CHECK_CM(rdma_connect(act, NULL));
	ev = cmt_expect(ch_p, RDMA_CM_EVENT_CONNECT_REQUEST);
	pas = ev->id;
	SVT_CHECK(pas->verbs == act->verbs);
	SVT_CHECK(pas->pd == pd);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	SVT_CHECK_CM(rdma_reject(pas, NULL, 0));
	ev = cmt_get_event(ch_a, 0);
	SVT_CHECK_EQ(ev->event, RDMA_CM_EVENT_REJECTED);
	SVT_CHECK_CM(rdma_ack_cm_event(ev));
	SVT_CHECK_CM(rdma_destroy_id(pas));
	SVT_CHECK(act->pd == pd); /* the device still has a user */
	rdma_destroy_qp(act);
	SVT_CHECK_CM(rdma_destroy_id(act));

	/* the last id went, and the PD with it: the next id gets a new one */
	id = resolved_id(ch_a);
	SVT_CHECK(id->pd->handle != handle);
	handle = id->pd->handle;

	/* a device list holds the device's PD like an id */
	int n;
	struct ibv_context **list = rdma_get_devices(&n);

	SVT_CHECK_PTR(list);
	SVT_CHECK_CM(rdma_destroy_id(id));
	id = resolved_id(ch_a);
	SVT_CHECK_EQ(id->pd->handle, handle);
	rdma_free_devices(list);
	SVT_CHECK_EQ(id->pd->handle, handle); /* the id still holds it */
	SVT_CHECK_CM(rdma_destroy_id(id));
	id = resolved_id(ch_a);
	SVT_CHECK(id->pd->handle != handle);

	/* an MR the program left on the PD keeps it valid after its last id */
	char *buf = svt_alloc(4096);
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, 4096), *mr2;

	SVT_CHECK_PTR(mr);
	pd = id->pd;
	handle = pd->handle;
	SVT_CHECK_CM(rdma_destroy_id(id));
	mr2 = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	SVT_CHECK_PTR(mr2);
	SVT_CHECK_OK(ibv_dereg_mr(mr2));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	/* and once nothing is on it, the device's next last id releases it */
	id = resolved_id(ch_a);
	SVT_CHECK_CM(rdma_destroy_id(id));
	id = resolved_id(ch_a);
	SVT_CHECK(id->pd->handle != handle);
	SVT_CHECK_CM(rdma_destroy_id(id));
	free(buf);

	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch_a);
	rdma_destroy_event_channel(ch_p);
	svt_log("ok");
	return 0;
}
