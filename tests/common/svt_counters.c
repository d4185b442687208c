#include "svt_counters.h"
#include "sv_test.h"
#include "stats/reader.h"

#include <unistd.h>

int64_t svt_qp_counter(uint32_t qpn, uint32_t dest_qpn, enum sv_stat_qp_counter c)
{
	struct sv_stat_ctx_view *all;
	size_t n;
	int64_t v = -1;

	SVT_CHECK_OK(sv_stat_collect(SV_STAT_QPS, &all, &n));
	for (size_t i = 0; i < n; i++)
		if (all[i].pid == getpid())
			for (size_t k = 0; k < all[i].nqp; k++)
				if (all[i].qp[k].qpn == qpn && all[i].qp[k].dest_qpn == dest_qpn)
					v = (int64_t)all[i].qp[k].c[c];
	sv_stat_views_free(all, n);
	return v;
}

uint64_t svt_ctx_counter(enum sv_stat_ctx_counter c)
{
	struct sv_stat_ctx_view *all;
	size_t n;
	uint64_t v = 0;

	SVT_CHECK_OK(sv_stat_collect(0, &all, &n));
	for (size_t i = 0; i < n; i++)
		if (all[i].pid == getpid())
			v += all[i].ctx_c[c];
	sv_stat_views_free(all, n);
	return v;
}
