/*
 * unit_ah: address handles.
 *   - create_ah/destroy_ah; a GRH is required on an Ethernet link layer;
 *     invalid port or sgid_index fail
 *   - ibv_init_ah_from_wc / ibv_create_ah_from_wc on a UD receive give an
 *     AH that reaches the sender (reply arrives, src_qp and GRH right)
 */
#include "sv_test.h"

#define GRH 40

static void test_create(struct svt_pair *p)
{
	struct ibv_ah_attr aa;
	struct ibv_port_attr pa;

	svt_ah_attr(&aa, &p->b.gid, NULL);
	struct ibv_ah *ah = ibv_create_ah(p->a.pd, &aa);

	SVT_CHECK_PTR(ah);
	SVT_CHECK(ah->context == p->a.ctx);
	SVT_CHECK(ah->pd == p->a.pd);
	SVT_CHECK_OK(ibv_destroy_ah(ah));

	/* RoCE-like: no GRH, no route. */
	aa.is_global = 0;
	aa.dlid = 1;
	SVT_CHECK_NULL(ibv_create_ah(p->a.pd, &aa));

	svt_ah_attr(&aa, &p->b.gid, NULL);
	aa.port_num = 2;
	SVT_CHECK_NULL(ibv_create_ah(p->a.pd, &aa));

	SVT_CHECK_OK(ibv_query_port(p->a.ctx, 1, &pa));
	svt_ah_attr(&aa, &p->b.gid, NULL);
	aa.grh.sgid_index = (uint8_t)(pa.gid_tbl_len > 255 ? 255
							   : pa.gid_tbl_len);
	SVT_CHECK_NULL(ibv_create_ah(p->a.pd, &aa));

	/* Many at once. */
	struct ibv_ah *many[100];

	svt_ah_attr(&aa, &p->b.gid, NULL);
	for (int i = 0; i < 100; i++) {
		many[i] = ibv_create_ah(p->a.pd, &aa);
		SVT_CHECK_PTR(many[i]);
	}
	for (int i = 0; i < 100; i++)
		SVT_CHECK_OK(ibv_destroy_ah(many[i]));
}

static void test_from_wc(struct svt_pair *p)
{
	struct svt_side *a = &p->a, *b = &p->b;
	uint32_t qkey = p->opts.conn.qkey;
	struct ibv_wc wc, rwc;

	/* a -> b, using the pair's AH. */
	SVT_CHECK_OK(svt_post_recv(b->qp, 1, b->buf, GRH + 1024, b->mr->lkey));
	svt_fill(a->buf, 100, 1);
	SVT_CHECK_OK(svt_post_ud_send(a->qp, 1, IBV_SEND_SIGNALED, a->buf, 100,
				      a->mr->lkey, a->ah, b->qp->qp_num,
				      qkey));
	svt_poll_ok(a->send_cq, 1, &wc, 0);
	rwc = svt_poll_one(b->recv_cq);
	SVT_CHECK_WC_OK(rwc);
	SVT_CHECK(rwc.wc_flags & IBV_WC_GRH);
	struct ibv_grh *grh = (struct ibv_grh *)b->buf;

	/* ibv_init_ah_from_wc: points back at a. */
	struct ibv_ah_attr aa;

	memset(&aa, 0, sizeof(aa));
	SVT_CHECK_OK(ibv_init_ah_from_wc(b->ctx, 1, &rwc, grh, &aa));
	SVT_CHECK_EQ(aa.is_global, 1);
	SVT_CHECK_EQ(aa.port_num, 1);
	SVT_CHECK_MEM(&aa.grh.dgid, &a->gid, sizeof(a->gid));
	/* our GID the packet was sent to: the IPv4-mapped one, its RoCE v2 entry */
	SVT_CHECK_EQ(aa.grh.sgid_index, 3);

	struct ibv_ah *ah1 = ibv_create_ah(b->pd, &aa);

	SVT_CHECK_PTR(ah1);

	/* ibv_create_ah_from_wc: same, in one call. */
	struct ibv_ah *ah2 = ibv_create_ah_from_wc(b->pd, &rwc, grh, 1);

	SVT_CHECK_PTR(ah2);

	/* Replies through both AHs reach a, from b's QP. */
	struct ibv_ah *ahs[2] = { ah1, ah2 };

	for (int i = 0; i < 2; i++) {
		SVT_CHECK_OK(svt_post_recv(a->qp, 10 + (uint64_t)i,
					   (char *)a->buf + 4096, GRH + 1024,
					   a->mr->lkey));
		svt_fill((char *)b->buf + 8192, 64, 20 + (uint32_t)i);
		SVT_CHECK_OK(svt_post_ud_send(b->qp, 10 + (uint64_t)i,
					      IBV_SEND_SIGNALED,
					      (char *)b->buf + 8192, 64,
					      b->mr->lkey, ahs[i], rwc.src_qp,
					      qkey));
		svt_poll_ok(b->send_cq, 1, &wc, 0);
		wc = svt_poll_one(a->recv_cq);
		SVT_CHECK_WC_OK(wc);
		SVT_CHECK_EQ(wc.wr_id, 10 + i);
		SVT_CHECK_EQ(wc.src_qp, b->qp->qp_num);
		SVT_CHECK_EQ(wc.byte_len, GRH + 64);
		SVT_CHECK_FILL((char *)a->buf + 4096 + GRH, 64, 20 + (uint32_t)i);
		struct ibv_grh *g = (struct ibv_grh *)((char *)a->buf + 4096);

		SVT_CHECK_MEM(&g->sgid, &b->gid, sizeof(b->gid));
	}
	SVT_CHECK_OK(ibv_destroy_ah(ah1));
	SVT_CHECK_OK(ibv_destroy_ah(ah2));
}

int main(void)
{
	struct svt_pair_opts o;
	struct svt_pair p;

	svt_watchdog(50);
	svt_pair_opts_default(&o, IBV_QPT_UD);
	o.separate_cqs = true;
	svt_pair_create(&p, IBV_QPT_UD, &o);
	test_create(&p);
	test_from_wc(&p);
	svt_pair_destroy(&p);
	return 0;
}
