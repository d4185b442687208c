/* Reading counters segments (reader.h). */
#include "stats/reader.h"
#include "common/proc.h"
#include "stats/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static const char *const qpc_names[SV_QPC_COUNT] = {
	[SV_QPC_TX_PKTS] = "tx_packets",
	[SV_QPC_TX_BYTES] = "tx_bytes",
	[SV_QPC_RX_PKTS] = "rx_packets",
	[SV_QPC_RX_BYTES] = "rx_bytes",
	[SV_QPC_RETRANS] = "retransmits",
	[SV_QPC_ACK_TIMEOUTS] = "ack_timeouts",
	[SV_QPC_RNR_NAK_SENT] = "rnr_naks_sent",
	[SV_QPC_RNR_NAK_RCVD] = "rnr_naks_received",
	[SV_QPC_SEQ_ERR] = "sequence_errors",
	[SV_QPC_DUP_REQ] = "duplicate_requests",
	[SV_QPC_REM_ACCESS_SENT] = "remote_access_errors_sent",
	[SV_QPC_REM_ACCESS_RCVD] = "remote_access_errors_received",
	[SV_QPC_REM_INV_SENT] = "remote_invalid_requests_sent",
	[SV_QPC_REM_INV_RCVD] = "remote_invalid_requests_received",
	[SV_QPC_REM_OP_SENT] = "remote_operation_errors_sent",
	[SV_QPC_REM_OP_RCVD] = "remote_operation_errors_received",
	[SV_QPC_QKEY_VIOL] = "qkey_violations",
	[SV_QPC_CQE_OK] = "completions",
	[SV_QPC_CQE_ERR] = "completion_errors",
	[SV_QPC_ECN_MARKED] = "ecn_marked_packets",
	[SV_QPC_CNP_SENT] = "cnp_sent",
	[SV_QPC_CNP_RCVD] = "cnp_received",
	[SV_QPC_PROBES] = "retransmit_probes",
	[SV_QPC_ACK_ASKS] = "ack_asks",
};

static const char *const ctxc_names[SV_CTXC_COUNT] = {
	[SV_CTXC_CQ_OVERRUN] = "cq_overruns",
	[SV_CTXC_CONN_LOST] = "connections_lost",
	[SV_CTXC_CONNECT_FAIL] = "connect_failures",
	[SV_CTXC_RX_NO_QP] = "rx_no_qp_drops",
	[SV_CTXC_RX_WRONG_PEER] = "rx_wrong_peer_drops",
	[SV_CTXC_HELLO_SPOOFED] = "hello_address_mismatches",
	[SV_CTXC_RX_BAD_ICRC] = "rx_bad_icrc_drops",
	[SV_CTXC_RX_BAD_TAG] = "rx_bad_tag_drops",
};

static const char *const wc_names[SV_STAT_WC_MAX] = {
	[IBV_WC_SUCCESS] = "success",
	[IBV_WC_LOC_LEN_ERR] = "loc_len_err",
	[IBV_WC_LOC_QP_OP_ERR] = "loc_qp_op_err",
	[IBV_WC_LOC_EEC_OP_ERR] = "loc_eec_op_err",
	[IBV_WC_LOC_PROT_ERR] = "loc_prot_err",
	[IBV_WC_WR_FLUSH_ERR] = "wr_flush_err",
	[IBV_WC_MW_BIND_ERR] = "mw_bind_err",
	[IBV_WC_BAD_RESP_ERR] = "bad_resp_err",
	[IBV_WC_LOC_ACCESS_ERR] = "loc_access_err",
	[IBV_WC_REM_INV_REQ_ERR] = "rem_inv_req_err",
	[IBV_WC_REM_ACCESS_ERR] = "rem_access_err",
	[IBV_WC_REM_OP_ERR] = "rem_op_err",
	[IBV_WC_RETRY_EXC_ERR] = "retry_exc_err",
	[IBV_WC_RNR_RETRY_EXC_ERR] = "rnr_retry_exc_err",
	[IBV_WC_LOC_RDD_VIOL_ERR] = "loc_rdd_viol_err",
	[IBV_WC_REM_INV_RD_REQ_ERR] = "rem_inv_rd_req_err",
	[IBV_WC_REM_ABORT_ERR] = "rem_abort_err",
	[IBV_WC_INV_EECN_ERR] = "inv_eecn_err",
	[IBV_WC_INV_EEC_STATE_ERR] = "inv_eec_state_err",
	[IBV_WC_FATAL_ERR] = "fatal_err",
	[IBV_WC_RESP_TIMEOUT_ERR] = "resp_timeout_err",
	[IBV_WC_GENERAL_ERR] = "general_err",
	[IBV_WC_TM_ERR] = "tm_err",
	[IBV_WC_TM_RNDV_INCOMPLETE] = "tm_rndv_incomplete",
};

const char *sv_stat_wc_name(unsigned c)
{
	return c < SV_STAT_WC_MAX && wc_names[c] ? wc_names[c] : "unknown";
}

const char *sv_stat_qpc_name(unsigned c)
{
	return c < SV_QPC_COUNT ? qpc_names[c] : "?";
}

const char *sv_stat_ctxc_name(unsigned c)
{
	return c < SV_CTXC_COUNT ? ctxc_names[c] : "?";
}

static uint64_t ld64(const uint64_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static uint32_t ld32(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_RELAXED);
}

uint64_t sv_stat_netns(void)
{
	struct stat st;

	return stat("/proc/self/ns/net", &st) ? 0 : (uint64_t)st.st_ino;
}

uint64_t sv_stat_proc_start(int pid)
{
	char state;

	return sv_proc_stat(pid, &state);
}

/* pid runs, and is the process that made the segment (pids are reused); a
 * zombie has exited: nobody counts there any more */
static bool proc_alive(int pid, uint64_t start)
{
	char state = '?';

	if (pid <= 0 || (kill(pid, 0) && errno != EPERM))
		return false;
	return sv_proc_stat(pid, &state) == start && state != 'Z' && state != 'X';
}

/* a copy of a fixed-size text field that may lack its NUL */
static void field_copy(char *dst, size_t dlen, const char *src, size_t slen)
{
	size_t n = strnlen(src, slen);

	if (n >= dlen)
		n = dlen - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
}

int sv_stat_snapshot(const struct sv_stat_hdr *h, unsigned flags, struct sv_stat_ctx_view *v)
{
	const struct sv_stat_qp *slots = (const void *)((const char *)h + SV_STAT_HDR_SIZE);

	v->pid = h->pid;
	v->ctx_no = h->ctx_no;
	v->opened_ns = h->opened_ns;
	field_copy(v->comm, sizeof(v->comm), h->comm, sizeof(h->comm));
	field_copy(v->dev, sizeof(v->dev), h->dev, sizeof(h->dev));
	v->netns = h->netns;
	v->ep_ip = h->ep_ip;
	v->ep_port = h->ep_port;
	v->nqp = 0;
	v->qp = NULL;
	/*
	 * A destroyed QP's counters move from its slot to `gone` between two
	 * steps of gone_seq: read again if one happened meanwhile, so that they
	 * are counted once (a few tries; a reader never waits on a writer).
	 */
	for (int tries = 0; tries < 100; tries++) {
		uint32_t seq = __atomic_load_n(&h->gone_seq, __ATOMIC_ACQUIRE);
		uint32_t used = ld32(&h->slots_used);
		size_t cap = 0;

		if (seq & 1)
			continue;
		if (used > SV_STAT_NSLOTS) /* never past the segment, whatever it says */
			used = SV_STAT_NSLOTS;
		for (unsigned c = 0; c < SV_QPC_COUNT; c++)
			v->port[c] = ld64(&h->gone[c]);
		for (unsigned c = 0; c < SV_CTXC_COUNT; c++)
			v->ctx_c[c] = ld64(&h->ctx_c[c]);
		for (unsigned c = 0; c < SV_STAT_WC_MAX; c++)
			v->wc_status[c] = ld64(&h->wc_status[c]);
		free(v->qp);
		v->qp = NULL;
		v->nqp = 0;
		for (uint32_t i = 0; i < used; i++) {
			const struct sv_stat_qp *s = &slots[i];
			struct sv_stat_qp_view *q;

			if (!ld32(&s->in_use))
				continue;
			for (unsigned c = 0; c < SV_QPC_COUNT; c++)
				v->port[c] += ld64(&s->c[c]);
			if (!(flags & SV_STAT_QPS))
				continue;
			if (v->nqp == cap) {
				void *p;

				cap = cap ? cap * 2 : 16;
				p = realloc(v->qp, cap * sizeof(*v->qp));

				if (!p) {
					free(v->qp);
					v->qp = NULL;
					v->nqp = 0;
					errno = ENOMEM;
					return -1;
				}
				v->qp = p;
			}
			q = &v->qp[v->nqp++];
			q->qpn = ld32(&s->qpn);
			q->dest_qpn = ld32(&s->dest_qpn);
			q->type = __atomic_load_n(&s->type, __ATOMIC_RELAXED);
			q->state = __atomic_load_n(&s->state, __ATOMIC_RELAXED);
			q->peer_port = __atomic_load_n(&s->peer_port, __ATOMIC_RELAXED);
			q->peer_ip = ld32(&s->peer_ip);
			for (unsigned c = 0; c < SV_QPC_COUNT; c++)
				q->c[c] = ld64(&s->c[c]);
		}
		if (__atomic_load_n(&h->gone_seq, __ATOMIC_ACQUIRE) == seq)
			break;
	}
	return 0;
}

/* Read one segment file; 1 read, 0 not a live segment (removed if stale and clean), -1 ENOMEM */
static int read_one(const char *path, const char *name, unsigned flags, struct sv_stat_ctx_view *v)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	const struct sv_stat_hdr *h;
	int pid = atoi(name), ret = 0;
	bool live;

	if (fd < 0)
		return 0;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < SV_STAT_FILE_SIZE) {
		close(fd);
		/* a short file is only a leftover of a process that is gone */
		if ((flags & SV_STAT_CLEAN) && pid > 0 && kill(pid, 0) && errno == ESRCH)
			unlink(path);
		return 0;
	}
	h = mmap(NULL, SV_STAT_FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED)
		return 0;
	live = !memcmp(h->magic, SV_STAT_MAGIC, sizeof(h->magic)) &&
	       h->version == SV_STAT_VERSION && h->hdr_size == SV_STAT_HDR_SIZE &&
	       h->slot_size == sizeof(struct sv_stat_qp) && h->nslots == SV_STAT_NSLOTS &&
	       proc_alive(h->pid, h->pid_start);
	if (live) {
		memset(v, 0, sizeof(*v));
		if ((size_t)snprintf(v->path, sizeof(v->path), "%s", path) >= sizeof(v->path))
			v->path[0] = '\0'; /* shown only; too long to show */
		v->uid = st.st_uid;
		ret = sv_stat_snapshot(h, flags, v) ? -1 : 1;
	} else if ((flags & SV_STAT_CLEAN) &&
		   (!memcmp(h->magic, SV_STAT_MAGIC, sizeof(h->magic)) ||
		    (pid > 0 && kill(pid, 0) && errno == ESRCH))) {
		/* its process is gone, or its pid names another process now; a
		 * file without the magic is left alone while the process named
		 * in its name lives: the library may be writing its header */
		unlink(path);
	}
	munmap((void *)h, SV_STAT_FILE_SIZE);
	return ret;
}

static int view_cmp(const void *a, const void *b)
{
	const struct sv_stat_ctx_view *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->ctx_no < y->ctx_no ? -1 : x->ctx_no > y->ctx_no;
}

/* The stats directories to read, each once (candidates may be the same place). */
static size_t stats_dirs(unsigned flags, char (*dirs)[PATH_MAX], size_t max)
{
	char cand[2][1024];
	int nc = sv_rundir_candidates(cand);
	size_t n = 0;
	glob_t g = { 0 };

	for (int i = 0; i < nc && n < max; i++)
		snprintf(dirs[n++], PATH_MAX, "%s/stats", cand[i]);
	if ((flags & SV_STAT_ALL_USERS) && geteuid() == 0) {
		glob("/tmp/softverbs-*/stats", 0, NULL, &g);
		glob("/run/user/*/softverbs/stats", GLOB_APPEND, NULL, &g);
		for (size_t i = 0; i < g.gl_pathc && n < max; i++)
			snprintf(dirs[n++], PATH_MAX, "%s", g.gl_pathv[i]);
		globfree(&g);
	}
	/* the same directory under two names (a link) is read once */
	for (size_t i = 0; i < n; i++) {
		char ri[PATH_MAX], rj[PATH_MAX];

		if (!realpath(dirs[i], ri))
			continue;
		for (size_t j = i + 1; j < n; j++)
			if (realpath(dirs[j], rj) && !strcmp(ri, rj)) {
				memmove(dirs[j], dirs[n - 1], PATH_MAX);
				n--;
				j--;
			}
	}
	return n;
}

void sv_stat_sweep(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		int pid = atoi(e->d_name);
		char path[PATH_MAX + 300];

		if (e->d_name[0] < '1' || e->d_name[0] > '9' || pid <= 0)
			continue;
		if (kill(pid, 0) && errno == ESRCH &&
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) < sizeof(path))
			unlink(path);
	}
	closedir(d);
}

#define MAX_DIRS 64

int sv_stat_collect(unsigned flags, struct sv_stat_ctx_view **out, size_t *nout)
{
	char (*dirs)[PATH_MAX] = malloc(MAX_DIRS * sizeof(*dirs));
	size_t ndirs = dirs ? stats_dirs(flags, dirs, MAX_DIRS) : 0;
	struct sv_stat_ctx_view *v = NULL;
	size_t n = 0, cap = 0;

	if (!dirs) {
		errno = ENOMEM;
		return -1;
	}

	for (size_t d = 0; d < ndirs; d++) {
		DIR *dir = opendir(dirs[d]);
		struct dirent *e;

		if (!dir)
			continue;
		while ((e = readdir(dir))) {
			char path[PATH_MAX + 300];
			int r;

			if (e->d_name[0] < '1' || e->d_name[0] > '9')
				continue; /* PID-N: never ".", "..", or anything else */
			if (n == cap) {
				size_t ncap = cap ? cap * 2 : 8;
				void *p = realloc(v, ncap * sizeof(*v));

				if (!p) {
					closedir(dir);
					goto oom;
				}
				v = p;
				cap = ncap;
			}
			if ((size_t)snprintf(path, sizeof(path), "%s/%s", dirs[d], e->d_name) >=
			    sizeof(path))
				continue;
			r = read_one(path, e->d_name, flags, &v[n]);
			if (r < 0) {
				closedir(dir);
				goto oom;
			}
			n += (size_t)r;
		}
		closedir(dir);
	}
	free(dirs);
	if (n)
		qsort(v, n, sizeof(*v), view_cmp);
	*out = v;
	*nout = n;
	return 0;
oom:
	free(dirs);
	sv_stat_views_free(v, n);
	errno = ENOMEM;
	return -1;
}

void sv_stat_views_free(struct sv_stat_ctx_view *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i].qp);
	free(v);
}

int sv_stat_device_sum(const char *dev, struct sv_stat_ctx_view *sum)
{
	struct sv_stat_ctx_view *v;
	uint64_t netns = sv_stat_netns();
	size_t n;
	int found = 0;

	memset(sum, 0, sizeof(*sum));
	snprintf(sum->dev, sizeof(sum->dev), "%s", dev);
	sum->netns = netns;
	if (sv_stat_collect(0, &v, &n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(v[i].dev, dev) || (netns && v[i].netns && v[i].netns != netns))
			continue;
		found++;
		for (unsigned c = 0; c < SV_QPC_COUNT; c++)
			sum->port[c] += v[i].port[c];
		for (unsigned c = 0; c < SV_CTXC_COUNT; c++)
			sum->ctx_c[c] += v[i].ctx_c[c];
		for (unsigned c = 0; c < SV_STAT_WC_MAX; c++)
			sum->wc_status[c] += v[i].wc_status[c];
	}
	sv_stat_views_free(v, n);
	return found;
}
