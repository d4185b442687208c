/*
 * The counters softverbs keeps for a QP of this process, read from the
 * counters segments as `softverbs stat` reads them (src/stats/reader.h).
 * For white-box checks of what the wire did: a test that links this also
 * compiles src/stats (SV_STATS_SOURCES) and includes src/.
 */
#ifndef SVT_COUNTERS_H
#define SVT_COUNTERS_H

#include "stats/layout.h"

#include <stdint.h>

/* Counter c of this process's QP qpn connected to dest_qpn; -1 if no such
 * QP is listed. */
int64_t svt_qp_counter(uint32_t qpn, uint32_t dest_qpn, enum sv_stat_qp_counter c);

/* Context counter c, summed over this process's open contexts. */
uint64_t svt_ctx_counter(enum sv_stat_ctx_counter c);

#endif
