/*
 * cm_mcast: rdma_join_multicast(_ex) and rdma_leave_multicast on UD ids.
 *
 *   - Two ids (two QPs) join one group; each gets MULTICAST_JOIN with what a
 *     sender needs (AH towards the MGID ::ffff:a.b.c.d, QPN 0xFFFFFF, Q_Key
 *     RDMA_UDP_QKEY) and its join context as private_data; a datagram one
 *     sends to the group reaches both QPs (the sender's own by loopback).
 *   - A send-only join attaches no QP; leaving detaches it; rdma_destroy_qp
 *     of a QP still joined detaches it first.
 *   - Errors as librdmacm and Linux's CM give them: an id with no device
 *     yet, an RC id, a wildcard group, comp_mask and join flags
 *     (rdma_join_multicast_ex), leaving a group never joined.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <rdma/rdma_verbs.h>
#include <unistd.h>

#define LEN 256

struct member {
	struct rdma_cm_id *id;
	struct ibv_mr *mr;
	uint8_t buf[2][LEN + 40];
	struct ibv_ah *ah;
	uint32_t qpn, qkey;
};

static void member_join(struct member *m, struct rdma_event_channel *ch, struct sockaddr *grp,
			void *ctx, bool send_only)
{
	struct rdma_cm_join_mc_attr_ex a = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = send_only ? RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
					: RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = grp,
	};
	struct rdma_cm_event *ev;
	union ibv_gid want = { .raw = { [10] = 0xff, [11] = 0xff } };

	memcpy(want.raw + 12, &((struct sockaddr_in *)grp)->sin_addr, 4);
	SVT_CHECK_CM(rdma_join_multicast_ex(m->id, &a, ctx));
	ev = cmt_expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	SVT_CHECK(ev->id == m->id);
	SVT_CHECK(ev->param.ud.private_data == ctx);
	SVT_CHECK_EQ(ev->param.ud.qp_num, 0xffffff);
	SVT_CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	SVT_CHECK(ev->param.ud.ah_attr.is_global);
	SVT_CHECK_MEM(ev->param.ud.ah_attr.grh.dgid.raw, want.raw, 16);
	m->ah = ibv_create_ah(m->id->pd ? m->id->pd : m->id->qp->pd, &ev->param.ud.ah_attr);
	SVT_CHECK_PTR(m->ah);
	m->qpn = ev->param.ud.qp_num;
	m->qkey = ev->param.ud.qkey;
	rdma_ack_cm_event(ev);
}

static void send_to_group(struct member *from, uint32_t tag)
{
	uint8_t msg[LEN];

	memset(msg, (int)tag, sizeof(msg));
	memcpy(from->buf[1], msg, LEN); /* the second buffer is free while sending */
	SVT_CHECK_CM(rdma_post_ud_send(from->id, (void *)(uintptr_t)tag, from->buf[1], LEN,
				       from->mr, IBV_SEND_SIGNALED, from->ah,
				       from->qpn));
	cmt_send_comp(from->id, IBV_WC_SEND, tag);
}

int main(void)
{
	struct rdma_event_channel *ch;
	struct member a = { 0 }, b = { 0 };
	struct rdma_cm_id *rc, *idle;
	struct sockaddr_in grp, any = cmt_sin("0.0.0.0", 0), lo = cmt_sin("127.0.0.1", 0);
	char gs[32];
	int ctx_a, ctx_b;

	svt_watchdog(30);
	snprintf(gs, sizeof(gs), "239.%u.%u.7", 30 + (unsigned)(getpid() % 200),
		 (unsigned)(getpid() / 200) % 256);
	grp = cmt_sin(gs, 0);
	ch = rdma_create_event_channel();
	SVT_CHECK_PTR(ch);

	/* errors */
	SVT_CHECK_CM(rdma_create_id(ch, &idle, NULL, RDMA_PS_UDP));
	SVT_CHECK_CM_ERRNO(rdma_join_multicast(idle, (struct sockaddr *)&grp, NULL), EINVAL);
	SVT_CHECK_CM(rdma_create_id(ch, &rc, NULL, RDMA_PS_TCP));
	cmt_resolve(rc, ch, "127.0.0.1", 20590);
	SVT_CHECK_CM_ERRNO(rdma_join_multicast(rc, (struct sockaddr *)&grp, NULL), EINVAL);
	SVT_CHECK_CM(rdma_destroy_id(rc));

	/* a UD id, its device named by a route to the group from 127.0.0.1 */
	SVT_CHECK_CM(rdma_create_id(ch, &a.id, &a, RDMA_PS_UDP));
	SVT_CHECK_CM(rdma_resolve_addr(a.id, (struct sockaddr *)&lo, (struct sockaddr *)&grp, 2000));
	rdma_ack_cm_event(cmt_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	SVT_CHECK_PTR(a.id->verbs);
	SVT_CHECK_CM_ERRNO(rdma_join_multicast(a.id, (struct sockaddr *)&any, NULL), EINVAL);
	{
		struct rdma_cm_join_mc_attr_ex x = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_RESERVED,
						      .addr = (struct sockaddr *)&grp };

		SVT_CHECK_CM_ERRNO(rdma_join_multicast_ex(a.id, &x, NULL), ENOTSUP);
		x.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
		SVT_CHECK_CM_ERRNO(rdma_join_multicast_ex(a.id, &x, NULL), EINVAL);
		x.comp_mask |= RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
		x.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
		SVT_CHECK_CM_ERRNO(rdma_join_multicast_ex(a.id, &x, NULL), EINVAL);
	}
	SVT_CHECK_CM_ERRNO(rdma_leave_multicast(a.id, (struct sockaddr *)&grp), EADDRNOTAVAIL);
	cmt_expect_none(ch, 50);

	/* two members; each QP gets what either sends */
	cmt_create_qp(a.id, IBV_QPT_UD, 8);
	a.mr = ibv_reg_mr(a.id->qp->pd, a.buf, sizeof(a.buf), IBV_ACCESS_LOCAL_WRITE);
	SVT_CHECK_PTR(a.mr);
	SVT_CHECK_CM(rdma_post_recv(a.id, (void *)1, a.buf[0], LEN + 40, a.mr));
	SVT_CHECK_CM(rdma_create_id(ch, &b.id, &b, RDMA_PS_UDP));
	SVT_CHECK_CM(rdma_resolve_addr(b.id, (struct sockaddr *)&lo, (struct sockaddr *)&grp, 2000));
	rdma_ack_cm_event(cmt_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	cmt_create_qp(b.id, IBV_QPT_UD, 8);
	b.mr = ibv_reg_mr(b.id->qp->pd, b.buf, sizeof(b.buf), IBV_ACCESS_LOCAL_WRITE);
	SVT_CHECK_PTR(b.mr);
	SVT_CHECK_CM(rdma_post_recv(b.id, (void *)1, b.buf[0], LEN + 40, b.mr));
	member_join(&a, ch, (struct sockaddr *)&grp, &ctx_a, false);
	member_join(&b, ch, (struct sockaddr *)&grp, &ctx_b, false);

	send_to_group(&a, 0x5a);
	struct ibv_wc wc = cmt_recv_comp(a.id, 1, LEN + 40); /* loopback */

	SVT_CHECK_EQ(wc.src_qp, a.id->qp->qp_num);
	SVT_CHECK_EQ(a.buf[0][40], 0x5a);
	wc = cmt_recv_comp(b.id, 1, LEN + 40);
	SVT_CHECK_EQ(wc.src_qp, a.id->qp->qp_num);
	SVT_CHECK_EQ(b.buf[0][40 + LEN - 1], 0x5a);

	/* b leaves: a still gets what b sends, b nothing */
	SVT_CHECK_CM(rdma_post_recv(a.id, (void *)2, a.buf[0], LEN + 40, a.mr));
	SVT_CHECK_CM(rdma_post_recv(b.id, (void *)2, b.buf[0], LEN + 40, b.mr));
	SVT_CHECK_CM(rdma_leave_multicast(b.id, (struct sockaddr *)&grp));
	SVT_CHECK_CM_ERRNO(rdma_leave_multicast(b.id, (struct sockaddr *)&grp), EADDRNOTAVAIL);
	send_to_group(&b, 0x33);
	cmt_recv_comp(a.id, 2, LEN + 40);
	SVT_CHECK_EQ(a.buf[0][40], 0x33);
	svt_expect_no_wc(b.id->recv_cq, 200);

	/* joined send-only again: still no QP attached */
	ibv_destroy_ah(b.ah);
	member_join(&b, ch, (struct sockaddr *)&grp, &ctx_b, true);
	SVT_CHECK_CM(rdma_post_recv(a.id, (void *)3, a.buf[0], LEN + 40, a.mr));
	send_to_group(&b, 0x44);
	cmt_recv_comp(a.id, 3, LEN + 40);
	SVT_CHECK_EQ(a.buf[0][40], 0x44);
	svt_expect_no_wc(b.id->recv_cq, 200);

	/* a's QP goes while it is joined: detached first, then destroyed */
	ibv_destroy_ah(a.ah);
	ibv_destroy_ah(b.ah);
	rdma_destroy_qp(a.id);
	SVT_CHECK(a.id->qp == NULL);
	SVT_CHECK_CM(rdma_leave_multicast(a.id, (struct sockaddr *)&grp));
	rdma_destroy_qp(b.id);
	SVT_CHECK_OK(ibv_dereg_mr(a.mr));
	SVT_CHECK_OK(ibv_dereg_mr(b.mr));
	SVT_CHECK_CM(rdma_destroy_id(a.id));
	SVT_CHECK_CM(rdma_destroy_id(b.id)); /* still joined (send-only): left with the id */
	SVT_CHECK_CM(rdma_destroy_id(idle));
	rdma_destroy_event_channel(ch);
	svt_log("joins, leaves and group traffic as librdmacm over RoCE");
	return 0;
}
