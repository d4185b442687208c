/* err_util.c - helpers for the error-semantics tests (see err_util.h). */
#include "err_util.h"

struct ibv_wc errt_expect_wc_at(const char *file, int line, struct ibv_cq *cq,
				uint64_t wr_id, enum ibv_wc_status status,
				int timeout_ms)
{
	struct ibv_wc wc;

	svt_poll_n_at(file, line, cq, 1, &wc, timeout_ms);
	if (wc.wr_id != wr_id || wc.status != status)
		svt_fail_at(file, line,
			    "completion wr_id %llu status %d (%s); expected "
			    "wr_id %llu status %d (%s)",
			    (unsigned long long)wc.wr_id, (int)wc.status,
			    ibv_wc_status_str(wc.status),
			    (unsigned long long)wr_id, (int)status,
			    ibv_wc_status_str(status));
	return wc;
}

void errt_expect_flushed_at(const char *file, int line, struct ibv_cq *cq,
			    const struct ibv_qp *qp, uint64_t first_wr_id,
			    int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = errt_expect_wc_at(file, line, cq,
						     first_wr_id + i,
						     IBV_WC_WR_FLUSH_ERR, 0);
		if (wc.qp_num != qp->qp_num)
			svt_fail_at(file, line,
				    "flushed wr_id %llu reports qp_num %u, "
				    "expected %u",
				    (unsigned long long)wc.wr_id, wc.qp_num,
				    qp->qp_num);
	}
}

void errt_rc_pair(struct svt_pair *p, int cqe, uint32_t max_wr)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.separate_cqs = true;
	if (cqe > 0)
		o.cqe = cqe;
	if (max_wr > 0) {
		o.qp.cap.max_send_wr = max_wr;
		o.qp.cap.max_recv_wr = max_wr;
	}
	svt_pair_create(p, IBV_QPT_RC, &o);
}

uint32_t errt_unused_key(uint32_t base, const uint32_t *used, int n_used)
{
	uint32_t k = base ^ 0x00a5a500u;

	for (;;) {
		bool clash = false;

		for (int i = 0; i < n_used; i++)
			if (used[i] == k)
				clash = true;
		if (!clash)
			return k;
		k += 0x101;
	}
}

uint32_t errt_mtu_bytes(enum ibv_mtu mtu)
{
	switch (mtu) {
	case IBV_MTU_256:
		return 256;
	case IBV_MTU_512:
		return 512;
	case IBV_MTU_1024:
		return 1024;
	case IBV_MTU_2048:
		return 2048;
	case IBV_MTU_4096:
		return 4096;
	}
	SVT_FAIL("unknown MTU enum %d", (int)mtu);
}

bool errt_has_atomics(const struct svt_side *s)
{
	return s->dev_attr.atomic_cap != IBV_ATOMIC_NONE;
}
