/*
 * The counters files of the sysfs view (reader.h): which files exist under
 * ports/1/counters and ports/1/hw_counters, and what each one shows.
 *
 * counters/ has the InfiniBand PortCounters names the kernel uses, where
 * softverbs has the quantity: packets, and data in units of 4 octets as
 * PortXmitData/PortRcvData count them (of payload only: softverbs counts no
 * header bytes).  softverbs has no multicast: those stay 0, truly.
 * hw_counters/ has every counter of `softverbs stat` under its name, and
 * Soft-RoCE's (rxe) names for the ones that mean the same thing, so that
 * scripts written for rxe read them.
 */
#include "stats/reader.h"

#include <string.h>

#include <infiniband/verbs.h>

enum kind { QPC, QPC_DIV4, CTXC, WC, ZERO };

static const struct {
	const char *group, *name;
	enum kind kind;
	unsigned index;
} files[] = {
	{ "counters", "port_xmit_packets", QPC, SV_QPC_TX_PKTS },
	{ "counters", "port_rcv_packets", QPC, SV_QPC_RX_PKTS },
	{ "counters", "port_xmit_data", QPC_DIV4, SV_QPC_TX_BYTES },
	{ "counters", "port_rcv_data", QPC_DIV4, SV_QPC_RX_BYTES },
	{ "counters", "unicast_xmit_packets", QPC, SV_QPC_TX_PKTS },
	{ "counters", "unicast_rcv_packets", QPC, SV_QPC_RX_PKTS },
	{ "counters", "multicast_xmit_packets", ZERO, 0 },
	{ "counters", "multicast_rcv_packets", ZERO, 0 },
	/* Soft-RoCE's names */
	{ "hw_counters", "sent_pkts", QPC, SV_QPC_TX_PKTS },
	{ "hw_counters", "rcvd_pkts", QPC, SV_QPC_RX_PKTS },
	{ "hw_counters", "duplicate_request", QPC, SV_QPC_DUP_REQ },
	{ "hw_counters", "out_of_seq_request", QPC, SV_QPC_SEQ_ERR },
	{ "hw_counters", "rcvd_rnr_err", QPC, SV_QPC_RNR_NAK_RCVD },
	{ "hw_counters", "send_rnr_err", QPC, SV_QPC_RNR_NAK_SENT },
	{ "hw_counters", "completer_retry_err", QPC, SV_QPC_ACK_TIMEOUTS },
	{ "hw_counters", "retry_exceeded_err", WC, IBV_WC_RETRY_EXC_ERR },
	{ "hw_counters", "retry_rnr_exceeded_err", WC, IBV_WC_RNR_RETRY_EXC_ERR },
};

/* after the table: every counter of `softverbs stat`, hw_counters/<name> */
#define NFIXED (sizeof(files) / sizeof(files[0]))

size_t sv_stat_sysfs_count(void)
{
	return NFIXED + SV_QPC_COUNT + SV_CTXC_COUNT;
}

void sv_stat_sysfs_file(size_t i, const char **group, const char **name)
{
	if (i < NFIXED) {
		*group = files[i].group;
		*name = files[i].name;
	} else {
		*group = "hw_counters";
		*name = i - NFIXED < SV_QPC_COUNT ? sv_stat_qpc_name((unsigned)(i - NFIXED))
						  : sv_stat_ctxc_name((unsigned)(i - NFIXED - SV_QPC_COUNT));
	}
}

int sv_stat_sysfs_find(const char *group, const char *name)
{
	for (size_t i = 0; i < sv_stat_sysfs_count(); i++) {
		const char *g, *n;

		sv_stat_sysfs_file(i, &g, &n);
		if (!strcmp(g, group) && !strcmp(n, name))
			return (int)i;
	}
	return -1;
}

uint64_t sv_stat_sysfs_value(size_t i, const struct sv_stat_ctx_view *sum)
{
	if (i >= NFIXED) {
		i -= NFIXED;
		return i < SV_QPC_COUNT ? sum->port[i] : sum->ctx_c[i - SV_QPC_COUNT];
	}
	switch (files[i].kind) {
	case QPC:
		return sum->port[files[i].index];
	case QPC_DIV4:
		return sum->port[files[i].index] / 4;
	case CTXC:
		return sum->ctx_c[files[i].index];
	case WC:
		return sum->wc_status[files[i].index];
	case ZERO:
		break;
	}
	return 0;
}
