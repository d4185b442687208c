/*
 * The QP state machine's rulebook: which attributes each transition requires
 * and which it allows, per transport (IBA 11.2.4.2 / ibv_modify_qp(3)).
 */
#include "verbs/qp_state.h"
#include "engine/wr_opcode.h"

#define S(x) IBV_QPS_##x
#define A(x) IBV_QP_##x

struct rule {
	enum ibv_qp_state from, to;
	int req[3], opt[3]; /* indexed by transport: RC, UC, UD */
};

/* RTS-like optional sets, shared by several transitions */
#define RTS_OPT_RC (A(CUR_STATE) | A(ALT_PATH) | A(ACCESS_FLAGS) | A(MIN_RNR_TIMER) | A(PATH_MIG_STATE))
#define RTS_OPT_UC (A(CUR_STATE) | A(ALT_PATH) | A(ACCESS_FLAGS) | A(PATH_MIG_STATE))
#define RTS_OPT_UD (A(CUR_STATE) | A(QKEY))

static const struct rule rules[] = {
	{ S(RESET), S(INIT),
	  { A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS), A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS),
	    A(PKEY_INDEX) | A(PORT) | A(QKEY) },
	  { 0, 0, 0 } },
	{ S(INIT), S(INIT),
	  { 0, 0, 0 },
	  { A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS), A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS),
	    A(PKEY_INDEX) | A(PORT) | A(QKEY) } },
	{ S(INIT), S(RTR),
	  { A(AV) | A(PATH_MTU) | A(DEST_QPN) | A(RQ_PSN) | A(MAX_DEST_RD_ATOMIC) | A(MIN_RNR_TIMER),
	    A(AV) | A(PATH_MTU) | A(DEST_QPN) | A(RQ_PSN), 0 },
	  { A(ALT_PATH) | A(ACCESS_FLAGS) | A(PKEY_INDEX), A(ALT_PATH) | A(ACCESS_FLAGS) | A(PKEY_INDEX),
	    A(PKEY_INDEX) | A(QKEY) } },
	{ S(RTR), S(RTS),
	  { A(SQ_PSN) | A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) | A(MAX_QP_RD_ATOMIC), A(SQ_PSN),
	    A(SQ_PSN) },
	  { RTS_OPT_RC, RTS_OPT_UC, RTS_OPT_UD } },
	{ S(RTS), S(RTS), { 0, 0, 0 }, { RTS_OPT_RC, RTS_OPT_UC, RTS_OPT_UD } },
	{ S(RTS), S(SQD), { 0, 0, 0 },
	  { A(EN_SQD_ASYNC_NOTIFY), A(EN_SQD_ASYNC_NOTIFY), A(EN_SQD_ASYNC_NOTIFY) } },
	{ S(SQD), S(RTS), { 0, 0, 0 }, { RTS_OPT_RC, RTS_OPT_UC, RTS_OPT_UD } },
	{ S(SQD), S(SQD), { 0, 0, 0 },
	  { A(PORT) | A(AV) | A(ALT_PATH) | A(ACCESS_FLAGS) | A(MIN_RNR_TIMER) | A(MAX_QP_RD_ATOMIC) |
		    A(MAX_DEST_RD_ATOMIC) | A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) | A(PKEY_INDEX) |
		    A(PATH_MIG_STATE) | A(CUR_STATE),
	    A(AV) | A(ALT_PATH) | A(ACCESS_FLAGS) | A(PKEY_INDEX) | A(PATH_MIG_STATE) | A(CUR_STATE),
	    A(PKEY_INDEX) | A(QKEY) | A(CUR_STATE) } },
	{ S(SQE), S(RTS), { 0, 0, 0 },
	  { A(CUR_STATE) | A(ACCESS_FLAGS), A(CUR_STATE) | A(ACCESS_FLAGS), A(CUR_STATE) | A(QKEY) } },
};

bool sv_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state from, enum ibv_qp_state to,
			 int mask)
{
	/* the rules' column is the type's (XRC's two ends have RC's, less what
	 * their missing queue needs, as Linux's qp_state_table: the send end's
	 * RTR does not require the responder's resources, the receive end's
	 * RTS not the requester's) */
	const struct sv_qp_type_info *ti = sv_qp_type_info(type);
	int t;

	if (!ti)
		return false;
	t = ti->index;

	mask &= ~A(STATE);
	/* to RESET or ERR from anywhere, with nothing else */
	if (to == S(RESET) || to == S(ERR))
		return (mask & ~A(CUR_STATE)) == 0;
	for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
		const struct rule *r = &rules[i];

		int req = r->req[t];

		if (r->from != from || r->to != to)
			continue;
		if (type == IBV_QPT_XRC_SEND && to == S(RTR))
			req &= ~(A(MAX_DEST_RD_ATOMIC) | A(MIN_RNR_TIMER));
		if (type == IBV_QPT_XRC_RECV && to == S(RTS) && from == S(RTR))
			req &= ~(A(RETRY_CNT) | A(RNR_RETRY) | A(MAX_QP_RD_ATOMIC));
		if ((mask & req) != req)
			return false; /* a required attribute is missing */
		return (mask & ~(r->req[t] | r->opt[t])) == 0;
	}
	return false; /* no such transition */
}
