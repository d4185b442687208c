/*
 * err_util.h - small helpers shared by the error-semantics tests (tests/errors).
 *
 * Everything builds on the sv_test harness (tests/common/sv_test.h) and the
 * public verbs API only. The helpers here are the checks every error test
 * repeats: "the next completion is wr_id X with status Y", "these N WRs were
 * flushed, in order, exactly once", "this memory still holds its pattern".
 */
#ifndef ERR_UTIL_H
#define ERR_UTIL_H

#include "sv_test.h"

/*
 * Poll exactly one completion from cq (timeout_ms <= 0: SVT_TIMEOUT_MS) and
 * check its wr_id and status. Returns the completion for further checks.
 */
struct ibv_wc errt_expect_wc_at(const char *file, int line, struct ibv_cq *cq,
				uint64_t wr_id, enum ibv_wc_status status,
				int timeout_ms);
#define errt_expect_wc(cq, wr_id, status, timeout_ms)                          \
	errt_expect_wc_at(__FILE__, __LINE__, cq, wr_id, status, timeout_ms)

/*
 * Poll n completions from cq and check they are wr_ids first_wr_id,
 * first_wr_id + 1, ... in that order, each IBV_WC_WR_FLUSH_ERR on qp.
 */
void errt_expect_flushed_at(const char *file, int line, struct ibv_cq *cq,
			    const struct ibv_qp *qp, uint64_t first_wr_id,
			    int n);
#define errt_expect_flushed(cq, qp, first_wr_id, n)                            \
	errt_expect_flushed_at(__FILE__, __LINE__, cq, qp, first_wr_id, n)

/*
 * An RC pair (svt_pair_create) whose sides have separate send and receive
 * CQs. cqe > 0 sets the CQ size, max_wr > 0 both queues' max WRs; 0 keeps
 * the harness default.
 */
void errt_rc_pair(struct svt_pair *p, int cqe, uint32_t max_wr);

/* The QP's current state (ibv_query_qp) must be st. */
#define ERRT_CHECK_STATE(qp, st)                                               \
	do {                                                                   \
		enum ibv_qp_state errt_s_ = svt_qp_state(qp);                  \
		if (errt_s_ != (st))                                           \
			svt_fail_at(__FILE__, __LINE__,                        \
				    "QP %u in state %d, expected %d (%s)",     \
				    (qp)->qp_num, (int)errt_s_, (int)(st),     \
				    #st);                                      \
	} while (0)

/*
 * A key that no MR in the list uses (for "wrong lkey/rkey" cases): starts
 * from base ^ 0x00a5a500 and steps until it differs from every key given.
 */
uint32_t errt_unused_key(uint32_t base, const uint32_t *used, int n_used);

/* Byte length of an enum ibv_mtu value (IBV_MTU_1024 -> 1024). */
uint32_t errt_mtu_bytes(enum ibv_mtu mtu);

/* Whether the side's device reports atomic support (atomic_cap). */
bool errt_has_atomics(const struct svt_side *s);

/* Name of a completion status for log lines. */
static inline const char *errt_st(enum ibv_wc_status st)
{
	return ibv_wc_status_str(st);
}

#endif /* ERR_UTIL_H */
