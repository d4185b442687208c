/*
 * unit_qp_state: QP creation limits and the state machine of ibv_modify_qp(3).
 *   - caps beyond the device's limits fail; init_attr.cap reports actuals
 *   - RESET->INIT->RTR->RTS with the required masks for RC, UC, UD;
 *     each missing required attribute: EINVAL and state unchanged;
 *     attributes not allowed in a transition: EINVAL
 *   - illegal transitions (RESET->RTS, RESET->RTR, ERR->RTS): EINVAL
 *   - ERR and back to RESET, then reconnect; SQD and back
 *   - ibv_query_qp returns what was set
 *   - posting to a RESET QP fails; receives may be posted from INIT
 *   - DAPL's QP setup (dtest over its scm and cma providers): INIT with
 *     IBV_ACCESS_MW_BIND among the QP's access flags is accepted
 */
#include "sv_test.h"

static struct svt_dev dev;
static struct ibv_cq *cq;

static struct ibv_qp *make_qp(enum ibv_qp_type t)
{
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, t);
	return svt_create_qp(dev.pd, cq, cq, &qi);
}

static const char *type_name(enum ibv_qp_type t)
{
	return t == IBV_QPT_RC ? "RC" : t == IBV_QPT_UC ? "UC" : "UD";
}

static void test_create_caps(void)
{
	struct ibv_qp_init_attr ia;
	const struct ibv_device_attr *da = &dev.dev_attr;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 10;
	ia.cap.max_recv_wr = 11;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 3;
	ia.cap.max_inline_data = 32;
	ia.sq_sig_all = 1;

	struct ibv_qp *qp = ibv_create_qp(dev.pd, &ia);

	SVT_CHECK_PTR(qp);
	/* The actual capabilities are written back, at least as requested. */
	SVT_CHECK_GE(ia.cap.max_send_wr, 10);
	SVT_CHECK_GE(ia.cap.max_recv_wr, 11);
	SVT_CHECK_GE(ia.cap.max_send_sge, 2);
	SVT_CHECK_GE(ia.cap.max_recv_sge, 3);
	SVT_CHECK_GE(ia.cap.max_inline_data, 32);
	SVT_CHECK_GT(qp->qp_num, 1); /* 0 and 1 are the special QPs */
	SVT_CHECK_EQ(qp->qp_type, IBV_QPT_RC);
	SVT_CHECK(qp->pd == dev.pd);
	SVT_CHECK(qp->send_cq == cq && qp->recv_cq == cq);
	SVT_CHECK(qp->context == dev.ctx);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);

	struct ibv_qp_attr a;
	struct ibv_qp_init_attr qia;

	memset(&qia, 0, sizeof(qia));
	SVT_CHECK_OK(ibv_query_qp(qp, &a, IBV_QP_CAP, &qia));
	SVT_CHECK_GE(qia.cap.max_send_wr, 10);
	SVT_CHECK_GE(qia.cap.max_recv_sge, 3);
	SVT_CHECK_EQ(qia.sq_sig_all, 1);
	SVT_CHECK_EQ(qia.qp_type, IBV_QPT_RC);

	struct ibv_qp *qp2 = make_qp(IBV_QPT_RC);

	SVT_CHECK_NE(qp->qp_num, qp2->qp_num);
	SVT_CHECK_OK(ibv_destroy_qp(qp2));
	SVT_CHECK_OK(ibv_destroy_qp(qp));

	/* Beyond the device's limits. */
	struct ibv_qp_init_attr bad;

	bad = ia;
	bad.cap.max_send_sge = (uint32_t)da->max_sge + 1;
	SVT_CHECK_NULL(ibv_create_qp(dev.pd, &bad));
	bad = ia;
	bad.cap.max_recv_sge = (uint32_t)da->max_sge + 1;
	SVT_CHECK_NULL(ibv_create_qp(dev.pd, &bad));
	bad = ia;
	bad.cap.max_send_wr = (uint32_t)da->max_qp_wr + 1;
	SVT_CHECK_NULL(ibv_create_qp(dev.pd, &bad));
	bad = ia;
	bad.cap.max_recv_wr = (uint32_t)da->max_qp_wr + 1;
	SVT_CHECK_NULL(ibv_create_qp(dev.pd, &bad));
	bad = ia;
	bad.cap.max_inline_data = 1u << 24;
	SVT_CHECK_NULL(ibv_create_qp(dev.pd, &bad));
	bad = ia;
	bad.send_cq = NULL;
	SVT_CHECK_NULL(ibv_create_qp(dev.pd, &bad));

	/* Exactly the limits are fine. */
	bad = ia;
	bad.cap.max_send_sge = (uint32_t)da->max_sge;
	bad.cap.max_recv_sge = (uint32_t)da->max_sge;
	qp = ibv_create_qp(dev.pd, &bad);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
}

/* Try mask without each bit of `required` (except STATE): all EINVAL, and the
 * QP stays in `from`. */
static void check_each_required(struct ibv_qp *qp, struct ibv_qp_attr *a,
				int mask, enum ibv_qp_state from)
{
	for (int bit = 1; bit < 31; bit++) {
		int m = 1 << bit;

		if (!(mask & m))
			continue;
		struct ibv_qp_attr copy = *a;
		int rc = ibv_modify_qp(qp, &copy, mask & ~m);

		SVT_CHECK_MSG(rc == EINVAL,
			      "%s QP: %d -> %d without mask bit 0x%x returned "
			      "%d, expected EINVAL",
			      type_name(qp->qp_type), from, a->qp_state, m, rc);
		SVT_CHECK_EQ(svt_qp_state(qp), from);
	}
}

static void test_transitions(enum ibv_qp_type t)
{
	struct ibv_qp *qp = make_qp(t);
	struct ibv_qp *peer = make_qp(t);
	struct ibv_qp_attr a;
	struct svt_conn c;
	int mask;

	svt_conn_default(&c, t);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);

	/* Illegal from RESET. */
	mask = svt_rts_attr(t, &c, &a);
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	mask = svt_rtr_attr(t, &c, &dev.gid, peer->qp_num, &a);
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	SVT_CHECK_RC(svt_qp_to_state(qp, IBV_QPS_SQD), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);
	/* RESET -> RESET is allowed. */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RESET));

	/* RESET -> INIT */
	mask = svt_init_attr(t, &c, &a);
	check_each_required(qp, &a, mask, IBV_QPS_RESET);
	/* SQ_PSN is not an attribute of RESET->INIT. */
	a.sq_psn = 5;
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask | IBV_QP_SQ_PSN), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);
	/* Invalid values: port 2 does not exist. */
	a.port_num = 2;
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);
	SVT_CHECK_OK(svt_qp_to_init(qp, &c));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_INIT);
	/* INIT -> INIT */
	SVT_CHECK_OK(svt_qp_to_init(qp, &c));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_INIT);
	/* INIT -> RTS is illegal. */
	mask = svt_rts_attr(t, &c, &a);
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);

	/* INIT -> RTR */
	mask = svt_rtr_attr(t, &c, &dev.gid, peer->qp_num, &a);
	if (t != IBV_QPT_UD) {
		check_each_required(qp, &a, mask, IBV_QPS_INIT);
		/* Path MTU larger than the port's active MTU. */
		struct ibv_qp_attr big = a;
		big.path_mtu = (enum ibv_mtu)(IBV_MTU_4096 + 1);
		SVT_CHECK_RC(ibv_modify_qp(qp, &big, mask), EINVAL);
		SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_INIT);
	}
	if (t == IBV_QPT_UC) {
		/* MIN_RNR_TIMER / MAX_DEST_RD_ATOMIC are RC-only. */
		a.min_rnr_timer = 12;
		SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask | IBV_QP_MIN_RNR_TIMER),
			     EINVAL);
		SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_INIT);
	}
	SVT_CHECK_OK(svt_qp_to_rtr(qp, &c, &dev.gid, peer->qp_num));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTR);

	/* RTR -> RTS */
	mask = svt_rts_attr(t, &c, &a);
	check_each_required(qp, &a, mask, IBV_QPS_RTR);
	SVT_CHECK_OK(svt_qp_to_rts(qp, &c));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTS);

	/* RTS -> RTS with an optional attribute. */
	if (t == IBV_QPT_UD) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.qkey = 0x2222;
		SVT_CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_QKEY));
	} else {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		SVT_CHECK_OK(ibv_modify_qp(qp, &a,
					   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS));
	}
	/* RTS -> RTR is illegal. */
	SVT_CHECK_RC(svt_qp_to_state(qp, IBV_QPS_RTR), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTS);

	/* RTS -> SQD -> RTS */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_SQD));
	enum ibv_qp_state s = svt_qp_state(qp);
	SVT_CHECK_MSG(s == IBV_QPS_SQD, "state %d after ->SQD", s);
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RTS));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTS);

	/* Any state -> ERR; ERR -> RTS illegal; ERR -> RESET; reconnect. */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_ERR));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_ERR);
	SVT_CHECK_RC(svt_qp_to_state(qp, IBV_QPS_RTS), EINVAL);
	SVT_CHECK_RC(svt_qp_to_init(qp, &c), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_ERR);
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RESET));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);
	svt_qp_connect(qp, &c, &dev.gid, peer->qp_num);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTS);

	/* RESET from RTS directly, and INIT -> ERR. */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RESET));
	SVT_CHECK_OK(svt_qp_to_init(qp, &c));
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_ERR));
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_ERR);

	/* IBV_QP_CUR_STATE naming the real state is accepted. */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RESET));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_ERR;
	a.cur_qp_state = IBV_QPS_RESET;
	SVT_CHECK_OK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE));

	SVT_CHECK_OK(ibv_destroy_qp(peer));
	SVT_CHECK_OK(ibv_destroy_qp(qp));
}

/* Attribute values outside the device's limits: EINVAL, state unchanged. */
static void test_bad_values(void)
{
	struct ibv_qp *qp = make_qp(IBV_QPT_RC);
	struct ibv_qp *peer = make_qp(IBV_QPT_RC);
	struct ibv_qp_attr a;
	struct svt_conn c;
	int mask;

	svt_conn_default(&c, IBV_QPT_RC);
	mask = svt_init_attr(IBV_QPT_RC, &c, &a);
	a.pkey_index = (uint16_t)dev.port_attr.pkey_tbl_len;
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RESET);
	SVT_CHECK_OK(svt_qp_to_init(qp, &c));

	mask = svt_rtr_attr(IBV_QPT_RC, &c, &dev.gid, peer->qp_num, &a);
	a.ah_attr.grh.sgid_index = (uint8_t)(dev.port_attr.gid_tbl_len > 255
						     ? 255
						     : dev.port_attr.gid_tbl_len);
	SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	mask = svt_rtr_attr(IBV_QPT_RC, &c, &dev.gid, peer->qp_num, &a);
	a.max_dest_rd_atomic = (uint8_t)(dev.dev_attr.max_qp_rd_atom + 1);
	if (dev.dev_attr.max_qp_rd_atom < 255)
		SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_INIT);
	SVT_CHECK_OK(svt_qp_to_rtr(qp, &c, &dev.gid, peer->qp_num));

	mask = svt_rts_attr(IBV_QPT_RC, &c, &a);
	a.max_rd_atomic = (uint8_t)(dev.dev_attr.max_qp_init_rd_atom + 1);
	if (dev.dev_attr.max_qp_init_rd_atom < 255)
		SVT_CHECK_RC(ibv_modify_qp(qp, &a, mask), EINVAL);
	SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTR);
	SVT_CHECK_OK(svt_qp_to_rts(qp, &c));

	/* RTS -> RTS changes are visible to ibv_query_qp. */
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	a.min_rnr_timer = 3;
	SVT_CHECK_OK(ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
					   IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(qp, &a,
				  IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER,
				  &ia));
	SVT_CHECK_EQ(a.qp_access_flags, IBV_ACCESS_REMOTE_READ);
	SVT_CHECK_EQ(a.min_rnr_timer, 3);

	SVT_CHECK_OK(ibv_destroy_qp(peer));
	SVT_CHECK_OK(ibv_destroy_qp(qp));
}

static void test_query(enum ibv_qp_type t)
{
	struct ibv_qp *qp = make_qp(t);
	struct ibv_qp *peer = make_qp(t);
	struct svt_conn c;

	svt_conn_default(&c, t);
	/* Distinctive values, within the device's limits. */
	c.sq_psn = 0x123456;
	c.rq_psn = 0xabcdef;
	c.timeout = 17;
	c.retry_cnt = 5;
	c.rnr_retry = 3;
	c.min_rnr_timer = 9;
	c.max_rd_atomic = 2;
	c.max_dest_rd_atomic = 3;
	c.qkey = 0x1234567;
	c.path_mtu = IBV_MTU_2048;
	svt_qp_connect(qp, &c, &dev.gid, peer->qp_num);

	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int all = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PKEY_INDEX |
		  IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU |
		  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		  IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		  IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
		  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP | IBV_QP_DEST_QPN |
		  IBV_QP_ACCESS_FLAGS;

	memset(&a, 0, sizeof(a));
	memset(&ia, 0, sizeof(ia));
	SVT_CHECK_OK(ibv_query_qp(qp, &a, all, &ia));
	SVT_CHECK_EQ(a.qp_state, IBV_QPS_RTS);
	SVT_CHECK_EQ(a.port_num, 1);
	SVT_CHECK_EQ(a.pkey_index, 0);
	SVT_CHECK_EQ(a.sq_psn, 0x123456);
	SVT_CHECK_EQ(ia.qp_type, t);
	SVT_CHECK(ia.send_cq == cq && ia.recv_cq == cq);
	SVT_CHECK_GE(ia.cap.max_send_wr, 64);
	SVT_CHECK_GE(ia.cap.max_recv_sge, 4);
	SVT_CHECK_GE(a.cap.max_send_wr, 64);
	if (t == IBV_QPT_UD) {
		SVT_CHECK_EQ(a.qkey, 0x1234567);
	} else {
		SVT_CHECK_EQ(a.rq_psn, 0xabcdef);
		SVT_CHECK_EQ(a.dest_qp_num, peer->qp_num);
		SVT_CHECK_EQ(a.path_mtu, IBV_MTU_2048);
		SVT_CHECK_EQ(a.qp_access_flags, c.access);
		SVT_CHECK_EQ(a.ah_attr.is_global, 1);
		SVT_CHECK_MEM(&a.ah_attr.grh.dgid, &dev.gid, sizeof(dev.gid));
		SVT_CHECK_EQ(a.ah_attr.grh.sgid_index, c.sgid_index);
		SVT_CHECK_EQ(a.ah_attr.port_num, 1);
	}
	if (t == IBV_QPT_RC) {
		SVT_CHECK_EQ(a.timeout, 17);
		SVT_CHECK_EQ(a.retry_cnt, 5);
		SVT_CHECK_EQ(a.rnr_retry, 3);
		SVT_CHECK_EQ(a.min_rnr_timer, 9);
		SVT_CHECK_EQ(a.max_rd_atomic, 2);
		SVT_CHECK_EQ(a.max_dest_rd_atomic, 3);
	}
	SVT_CHECK_OK(ibv_destroy_qp(peer));
	SVT_CHECK_OK(ibv_destroy_qp(qp));
}

static void test_post_by_state(void)
{
	struct ibv_qp *qp = make_qp(IBV_QPT_RC);
	struct ibv_qp *peer = make_qp(IBV_QPT_RC);
	char *buf = svt_alloc(4096);
	struct ibv_mr *mr = svt_reg_mr(dev.pd, buf, 4096, SVT_ACCESS_ALL);
	struct ibv_send_wr swr, *sbad = NULL;
	struct ibv_recv_wr rwr, *rbad = NULL;
	struct ibv_sge sge = { (uintptr_t)buf, 64, mr->lkey };

	memset(&swr, 0, sizeof(swr));
	swr.wr_id = 1;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	memset(&rwr, 0, sizeof(rwr));
	rwr.wr_id = 2;
	rwr.sg_list = &sge;
	rwr.num_sge = 1;

	/* RESET: both fail and report the WR. */
	SVT_CHECK_FAILS(ibv_post_send(qp, &swr, &sbad));
	SVT_CHECK(sbad == &swr);
	SVT_CHECK_FAILS(ibv_post_recv(qp, &rwr, &rbad));
	SVT_CHECK(rbad == &rwr);

	/* INIT: receives may be posted. */
	SVT_CHECK_OK(svt_qp_to_init(qp, NULL));
	SVT_CHECK_OK(ibv_post_recv(qp, &rwr, &rbad));

	/* Back to RESET: the posted receive is gone (no completion either). */
	SVT_CHECK_OK(svt_qp_to_state(qp, IBV_QPS_RESET));
	svt_expect_no_wc(cq, 20);

	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	SVT_CHECK_OK(ibv_destroy_qp(peer));
	SVT_CHECK_OK(ibv_destroy_qp(qp));
}

static void test_many_qps(void)
{
	struct ibv_qp *qps[64];

	for (int i = 0; i < 64; i++)
		qps[i] = make_qp(i % 3 == 0 ? IBV_QPT_UD : IBV_QPT_RC);
	for (int i = 0; i < 64; i++)
		for (int j = 0; j < i; j++)
			SVT_CHECK_NE(qps[i]->qp_num, qps[j]->qp_num);
	for (int i = 0; i < 64; i++)
		SVT_CHECK_OK(ibv_destroy_qp(qps[i]));
}

/*
 * DAPL's RC QP, set up with the calls of its providers (openib_common qp.c,
 * dapls_modify_qp_state), values as Debian's dtest over libdaploscm makes
 * them: INIT with the QP access flags LOCAL_WRITE | REMOTE_WRITE |
 * REMOTE_READ | REMOTE_ATOMIC | MW_BIND (the kernel takes MW_BIND for a QP;
 * rxe keeps it and reports it back), RTR with rq_psn 1 and hop limit 255, RTS
 * with sq_psn 1 and timeout 20, and ERR twice when the endpoint goes (issue
 * 34: the INIT failed with EINVAL and dtest could not create an endpoint).
 * The QPs carry a WRITE, a READ and a SEND; MW_BIND grants no remote access.
 */
static void dapl_qp(struct ibv_qp **qp, struct ibv_cq **scq, struct ibv_cq **rcq)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	*scq = svt_create_cq(dev.ctx, 34, NULL);
	*rcq = svt_create_cq(dev.ctx, 13, NULL);
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = *scq;
	ia.recv_cq = *rcq;
	ia.cap.max_send_wr = 107;
	ia.cap.max_recv_wr = 103;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 200;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	*qp = ibv_create_qp(dev.pd, &ia);
	SVT_CHECK_PTR(*qp);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
			    IBV_ACCESS_MW_BIND;
	a.pkey_index = 0;
	a.port_num = 1;
	SVT_CHECK_OK(ibv_modify_qp(*qp, &a,
				   IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

static void dapl_rtu(struct ibv_qp *qp, uint32_t dest_qpn)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 1;
	a.path_mtu = IBV_MTU_4096;
	a.min_rnr_timer = 12;
	a.max_dest_rd_atomic = 4;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = dev.gid;
	a.ah_attr.grh.hop_limit = 255;
	a.ah_attr.port_num = 1;
	SVT_CHECK_OK(ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_MIN_RNR_TIMER));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 1;
	a.timeout = 20;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	SVT_CHECK_OK(ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
					   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					   IBV_QP_MAX_QP_RD_ATOMIC));
}

static void test_dapl_setup(void)
{
	const unsigned int dapl_access =
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		IBV_ACCESS_MW_BIND;
	struct ibv_qp *qa, *qb;
	struct ibv_cq *sa, *ra, *sb, *rb;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct ibv_wc wc;
	enum { LEN = 8192 };
	char *ba = svt_alloc(LEN), *bb = svt_alloc(LEN);
	/* DAT_MEM_PRIV_ALL_FLAG: what dtest registers its buffers with */
	struct ibv_mr *ma = svt_reg_mr(dev.pd, ba, LEN, IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *mb = svt_reg_mr(dev.pd, bb, LEN, IBV_ACCESS_LOCAL_WRITE |
					IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);

	dapl_qp(&qa, &sa, &ra);
	dapl_qp(&qb, &sb, &rb);
	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(qa, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS, &ia));
	SVT_CHECK_EQ(a.qp_state, IBV_QPS_INIT);
	SVT_CHECK_EQ(a.qp_access_flags, dapl_access);
	dapl_rtu(qa, qb->qp_num);
	dapl_rtu(qb, qa->qp_num);
	SVT_CHECK_EQ(svt_qp_state(qa), IBV_QPS_RTS);
	SVT_CHECK_EQ(svt_qp_state(qb), IBV_QPS_RTS);

	/* WRITE a -> b, READ it back into a's second half, SEND a -> b */
	svt_fill(ba, 4096, 34);
	memset(bb, 0, LEN);
	SVT_CHECK_OK(svt_post_send(qa, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, ba,
				   4096, ma->lkey, (uintptr_t)bb, mb->rkey, 0));
	wc = svt_poll_one(sa);
	SVT_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(bb, 4096, 34);
	SVT_CHECK_OK(svt_post_send(qa, 2, IBV_WR_RDMA_READ, IBV_SEND_SIGNALED,
				   ba + 4096, 4096, ma->lkey, (uintptr_t)bb, mb->rkey, 0));
	wc = svt_poll_one(sa);
	SVT_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	SVT_CHECK_FILL(ba + 4096, 4096, 34);
	SVT_CHECK_OK(svt_post_recv(qb, 3, bb + 4096, 4096, mb->lkey));
	svt_fill(ba, 100, 35);
	SVT_CHECK_OK(svt_post_send(qa, 4, IBV_WR_SEND, IBV_SEND_SIGNALED, ba, 100,
				   ma->lkey, 0, 0, 0));
	wc = svt_poll_one(sa);
	SVT_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	wc = svt_poll_one(rb);
	SVT_CHECK_EQ(wc.status, IBV_WC_SUCCESS);
	SVT_CHECK_EQ(wc.byte_len, 100);
	SVT_CHECK_FILL(bb + 4096, 100, 35);

	/* MW_BIND alone, on b's QP, lets no WRITE in (RTS -> RTS) */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
	SVT_CHECK_OK(ibv_modify_qp(qb, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS));
	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(qb, &a, IBV_QP_ACCESS_FLAGS, &ia));
	SVT_CHECK_EQ(a.qp_access_flags, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	svt_fill(ba, 64, 36);
	SVT_CHECK_OK(svt_post_send(qa, 5, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, ba,
				   64, ma->lkey, (uintptr_t)bb, mb->rkey, 0));
	wc = svt_poll_one(sa);
	SVT_CHECK_MSG(wc.status == IBV_WC_REM_ACCESS_ERR ||
			      wc.status == IBV_WC_REM_INV_REQ_ERR,
		      "WRITE to a QP with only MW_BIND: %s",
		      ibv_wc_status_str(wc.status));
	SVT_CHECK_FILL(bb, 64, 34);

	/* the endpoint goes: ERR, and ERR again */
	for (int i = 0; i < 2; i++) {
		SVT_CHECK_OK(svt_qp_to_state(qa, IBV_QPS_ERR));
		SVT_CHECK_OK(svt_qp_to_state(qb, IBV_QPS_ERR));
	}
	SVT_CHECK_OK(ibv_destroy_qp(qa));
	SVT_CHECK_OK(ibv_destroy_qp(qb));
	SVT_CHECK_OK(ibv_dereg_mr(ma));
	SVT_CHECK_OK(ibv_dereg_mr(mb));
	free(ba);
	free(bb);
	SVT_CHECK_OK(ibv_destroy_cq(sa));
	SVT_CHECK_OK(ibv_destroy_cq(ra));
	SVT_CHECK_OK(ibv_destroy_cq(sb));
	SVT_CHECK_OK(ibv_destroy_cq(rb));
	svt_log("ok: DAPL's QP setup (MW_BIND among the QP's access flags)");
}

int main(void)
{
	svt_watchdog(50);
	svt_dev_open(&dev);
	cq = svt_create_cq(dev.ctx, 256, NULL);

	test_create_caps();
	test_transitions(IBV_QPT_RC);
	test_transitions(IBV_QPT_UC);
	test_transitions(IBV_QPT_UD);
	test_bad_values();
	test_query(IBV_QPT_RC);
	test_query(IBV_QPT_UC);
	test_query(IBV_QPT_UD);
	test_post_by_state();
	test_many_qps();
	test_dapl_setup();

	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&dev);
	return 0;
}
