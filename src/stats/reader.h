/*
 * Reading counters segments (layout.h) from outside the process that counts:
 * the tool (`softverbs stat/top`), the preload library (the sysfs view's
 * counters files) and libibverbs itself (ibv_query_port's device-wide
 * counters).  Nothing here stops or slows the counting processes: a reader
 * maps each file read-only and loads every value with a relaxed atomic.
 */
#ifndef SV_STATS_READER_H
#define SV_STATS_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stats/layout.h"

struct sv_stat_qp_view {
	uint32_t qpn, dest_qpn;
	uint8_t type, state;       /* enum ibv_qp_type, enum ibv_qp_state */
	uint16_t peer_port;        /* host order; 0: no peer */
	uint32_t peer_ip;          /* network order */
	uint64_t c[SV_QPC_COUNT];
};

/* One live context, or (sv_stat_device_sum) a device's sum over contexts. */
struct sv_stat_ctx_view {
	char path[1100];
	int pid;
	uid_t uid;
	uint32_t ctx_no;
	uint64_t opened_ns;       /* CLOCK_REALTIME */
	char comm[17], dev[65];
	uint64_t netns;           /* network namespace (inode); 0 unknown */
	uint32_t ep_ip;           /* network order */
	uint16_t ep_port;
	uint64_t port[SV_QPC_COUNT]; /* the port: every QP of the context, destroyed ones too */
	uint64_t ctx_c[SV_CTXC_COUNT];
	uint64_t wc_status[SV_STAT_WC_MAX];
	size_t nqp;
	struct sv_stat_qp_view *qp; /* live QPs, by QPN (with SV_STAT_QPS) */
};

enum {
	SV_STAT_QPS = 1,       /* also list the live QPs */
	SV_STAT_CLEAN = 2,     /* remove the segments of processes that are gone */
	SV_STAT_ALL_USERS = 4, /* root: every user's runtime directories too */
};

/*
 * Every live context's counters, in pid and context order: *out (free with
 * sv_stat_views_free) and *n.  Segments of processes that are gone (killed
 * before they could remove them) are skipped, and removed with
 * SV_STAT_CLEAN.  0, or -1 with errno (ENOMEM).
 */
int sv_stat_collect(unsigned flags, struct sv_stat_ctx_view **out, size_t *n);
void sv_stat_views_free(struct sv_stat_ctx_view *v, size_t n);

/* Remove the segments in dir of processes that no longer exist (by the pid
 * in their names: cheap, no file is opened). */
void sv_stat_sweep(const char *dir);

/* A segment mapped at h, as a view; 0, or -1 (ENOMEM for the QP list). */
int sv_stat_snapshot(const struct sv_stat_hdr *h, unsigned flags, struct sv_stat_ctx_view *out);

/*
 * The counters of device dev (e.g. "sv_lo") of this network namespace,
 * summed over every live context of it (this user's): what a port counter
 * of a shared HCA shows.  The number of contexts summed, or -1 with errno.
 */
int sv_stat_device_sum(const char *dev, struct sv_stat_ctx_view *sum);

/*
 * The counters files of the sysfs view, ports/1/GROUP/NAME (sysfs_counters.c):
 * file i of sv_stat_sysfs_count(), found by name (-1: no such file), and its
 * value for a device's sum.
 */
size_t sv_stat_sysfs_count(void);
void sv_stat_sysfs_file(size_t i, const char **group, const char **name);
int sv_stat_sysfs_find(const char *group, const char *name);
uint64_t sv_stat_sysfs_value(size_t i, const struct sv_stat_ctx_view *sum);

/* The network namespace of this process (inode of /proc/self/ns/net), 0 if unknown. */
uint64_t sv_stat_netns(void);

/* The start time of process pid (/proc/PID/stat, field 22), 0 if unknown. */
uint64_t sv_stat_proc_start(int pid);

/* Names, as `softverbs stat` and the JSON output print them. */
const char *sv_stat_qpc_name(unsigned c);
const char *sv_stat_ctxc_name(unsigned c);
/* a completion status (enum ibv_wc_status) as JSON names it: "rem_access_err" */
const char *sv_stat_wc_name(unsigned status);

#endif
