#ifndef SV_QP_STATE_H
#define SV_QP_STATE_H

#include <infiniband/verbs.h>
#include <stdbool.h>

/* Is from -> to with exactly these attributes (mask) a legal modify_qp? */
bool sv_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state from, enum ibv_qp_state to,
			 int mask);

#endif
