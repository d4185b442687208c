/*
 * softverbs stat [--json] [--pid PID] [--device DEV]
 * softverbs top [--delay SECONDS] [--iterations N] [--pid PID] [--device DEV]
 *
 * What the softverbs contexts of this host are doing, read from their
 * counters segments (src/stats/layout.h) without stopping them: like
 * `rdma statistic` and `rdma resource show qp` for a kernel device.  Each
 * context is a port of its device (sv_lo/1) that one process opened; the
 * device line sums its live contexts, which is what the sysfs view's
 * counters files show.  Segments of processes that are gone are removed
 * here.  As root, every user's contexts are listed.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <infiniband/verbs.h>

#include "stats/reader.h"
#include "tool.h"

static const char *qp_type_str(unsigned t)
{
	switch (t) {
	case IBV_QPT_RC:
		return "RC";
	case IBV_QPT_UC:
		return "UC";
	case IBV_QPT_UD:
		return "UD";
	case IBV_QPT_XRC_SEND:
		return "XRC_SEND";
	case IBV_QPT_XRC_RECV:
		return "XRC_RECV";
	default:
		return "?";
	}
}

static const char *qp_state_str(unsigned s)
{
	static const char *const names[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

static void addr_str(uint32_t ip, uint16_t port, char *out, size_t len)
{
	struct in_addr a = { .s_addr = ip };
	char text[INET_ADDRSTRLEN];

	if (!port)
		snprintf(out, len, "-");
	else
		snprintf(out, len, "%s:%u", inet_ntop(AF_INET, &a, text, sizeof(text)) ? text : "?",
			 port);
}

struct options {
	bool json;
	int pid;               /* 0: any */
	const char *device;    /* NULL: any */
	double delay;          /* top */
	long iterations;       /* top: 0 forever */
};

static int parse_options(const char *cmd, int argc, char **argv, struct options *o, bool top)
{
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;

		if (!top && !strcmp(a, "--json")) {
			o->json = true;
			continue;
		}
		if (!strcmp(a, "--pid") || !strcmp(a, "-p")) {
			long p = val ? strtol(val, &end, 10) : 0;

			if (!val || *end || p <= 0)
				return usage_error("%s: --pid needs a process id", cmd);
			o->pid = (int)p;
		} else if (!strcmp(a, "--device") || !strcmp(a, "-d")) {
			if (!val)
				return usage_error("%s: --device needs a name, e.g. sv_lo", cmd);
			o->device = val;
		} else if (top && (!strcmp(a, "--delay") || !strcmp(a, "-s"))) {
			o->delay = val ? strtod(val, &end) : 0;
			if (!val || *end || o->delay < 0.05 || o->delay > 3600)
				return usage_error("%s: --delay needs seconds, 0.05 to 3600", cmd);
		} else if (top && (!strcmp(a, "--iterations") || !strcmp(a, "-n"))) {
			o->iterations = val ? strtol(val, &end, 10) : 0;
			if (!val || *end || o->iterations <= 0)
				return usage_error("%s: --iterations needs a count", cmd);
		} else {
			return usage_error("%s: unknown argument '%s'", cmd, a);
		}
		i++;
	}
	return 0;
}

static bool selected(const struct options *o, const struct sv_stat_ctx_view *v)
{
	return (!o->pid || v->pid == o->pid) && (!o->device || !strcmp(v->dev, o->device));
}

/* A device is its name in one network namespace: index of v's in dev[0..nd), or nd. */
static size_t device_of(const struct sv_stat_ctx_view *dev, size_t nd,
			const struct sv_stat_ctx_view *v)
{
	size_t d;

	for (d = 0; d < nd && (strcmp(dev[d].dev, v->dev) || dev[d].netns != v->netns); d++)
		;
	return d;
}

/*
 * The device totals: for each device a selected context uses, the sum over
 * all its contexts (whichever --pid shows), which is what the device's
 * sysfs counters files hold.  counts[d]: how many contexts.
 */
static size_t device_totals(const struct options *o, const struct sv_stat_ctx_view *v, size_t n,
			    struct sv_stat_ctx_view *dev, size_t *counts)
{
	size_t nd = 0;

	for (size_t i = 0; i < n; i++) {
		if (!selected(o, &v[i]) || device_of(dev, nd, &v[i]) < nd)
			continue;
		memset(&dev[nd], 0, sizeof(dev[nd]));
		snprintf(dev[nd].dev, sizeof(dev[nd].dev), "%s", v[i].dev);
		dev[nd].netns = v[i].netns;
		counts[nd++] = 0;
	}
	for (size_t i = 0; i < n; i++) {
		size_t d = device_of(dev, nd, &v[i]);

		if (d == nd)
			continue;
		counts[d]++;
		for (unsigned c = 0; c < SV_QPC_COUNT; c++)
			dev[d].port[c] += v[i].port[c];
		for (unsigned c = 0; c < SV_CTXC_COUNT; c++)
			dev[d].ctx_c[c] += v[i].ctx_c[c];
		for (unsigned c = 0; c < SV_STAT_WC_MAX; c++)
			dev[d].wc_status[c] += v[i].wc_status[c];
	}
	return nd;
}

/* ---- text ---- */

/* "name value" pairs, wrapped under an indent. */
struct wrap {
	int col;
};

static void pair(struct wrap *w, const char *name, uint64_t value)
{
	char text[96];
	int len = snprintf(text, sizeof(text), "%s %" PRIu64, name, value);

	if (w->col && w->col + 1 + len > 96) {
		printf("\n");
		w->col = 0;
	}
	if (!w->col) {
		printf("    ");
		w->col = 4;
	} else {
		printf(" ");
		w->col++;
	}
	printf("%s", text);
	w->col += len;
}

static void end_pairs(struct wrap *w)
{
	if (w->col)
		printf("\n");
	w->col = 0;
}

/* Ends a heading line: names the network namespace when it is not this one. */
static void netns_text(uint64_t netns)
{
	static uint64_t own;

	if (!own)
		own = sv_stat_netns();
	if (netns && netns != own)
		printf(" netns %" PRIu64, netns);
	printf("\n");
}

static void text_counters(const uint64_t *qpc, const uint64_t *ctxc, const uint64_t *wc)
{
	struct wrap w = { 0 };

	for (unsigned c = 0; c < SV_QPC_COUNT; c++)
		pair(&w, sv_stat_qpc_name(c), qpc[c]);
	if (ctxc)
		for (unsigned c = 0; c < SV_CTXC_COUNT; c++)
			pair(&w, sv_stat_ctxc_name(c), ctxc[c]);
	end_pairs(&w);
	if (!wc)
		return;
	for (unsigned c = 1; c < SV_STAT_WC_MAX; c++)
		if (wc[c]) {
			if (!w.col)
				printf("    completion errors by status:");
			printf(" %s %" PRIu64, sv_stat_wc_name(c), wc[c]);
			w.col = 1;
		}
	end_pairs(&w);
}

static void text_output(const struct options *o, const struct sv_stat_ctx_view *v, size_t n)
{
	struct sv_stat_ctx_view *dev = calloc(n ? n : 1, sizeof(*dev));
	size_t *counts = calloc(n ? n : 1, sizeof(*counts));
	size_t shown = 0, nd;

	if (!dev || !counts) {
		fprintf(stderr, "softverbs: out of memory\n");
		free(dev);
		free(counts);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char ep[32];

		if (!selected(o, &v[i]))
			continue;
		shown++;
		addr_str(v[i].ep_ip, v[i].ep_port, ep, sizeof(ep));
		printf("link %s/1 pid %d comm %s context %u endpoint %s qps %zu", v[i].dev,
		       v[i].pid, v[i].comm, v[i].ctx_no, ep, v[i].nqp);
		netns_text(v[i].netns);
		text_counters(v[i].port, v[i].ctx_c, v[i].wc_status);
		for (size_t q = 0; q < v[i].nqp; q++) {
			const struct sv_stat_qp_view *qp = &v[i].qp[q];
			char peer[32];

			addr_str(qp->peer_ip, qp->peer_port, peer, sizeof(peer));
			printf("qp %s/1 lqpn %u type %s state %s rqpn %u peer %s pid %d comm %s\n",
			       v[i].dev, qp->qpn, qp_type_str(qp->type), qp_state_str(qp->state),
			       qp->dest_qpn, peer, v[i].pid, v[i].comm);
			text_counters(qp->c, NULL, NULL);
		}
	}
	nd = device_totals(o, v, n, dev, counts);
	for (size_t d = 0; d < nd; d++) {
		printf("device %s/1 contexts %zu", dev[d].dev, counts[d]);
		netns_text(dev[d].netns);
		text_counters(dev[d].port, dev[d].ctx_c, dev[d].wc_status);
	}
	if (!shown)
		printf("no softverbs contexts%s\n", o->pid || o->device ? " match" : " on this host");
	free(dev);
	free(counts);
}

/* ---- JSON ---- */

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void json_counters(const uint64_t *qpc, const uint64_t *ctxc, const uint64_t *wc)
{
	printf("\"counters\":{");
	for (unsigned c = 0; c < SV_QPC_COUNT; c++)
		printf("%s\"%s\":%" PRIu64, c ? "," : "", sv_stat_qpc_name(c), qpc[c]);
	if (ctxc)
		for (unsigned c = 0; c < SV_CTXC_COUNT; c++)
			printf(",\"%s\":%" PRIu64, sv_stat_ctxc_name(c), ctxc[c]);
	printf("}");
	if (!wc)
		return;
	printf(",\"completion_errors_by_status\":{");
	for (unsigned c = 1, first = 1; c < SV_STAT_WC_MAX; c++)
		if (wc[c]) {
			printf("%s\"%s\":%" PRIu64, first ? "" : ",",
			       sv_stat_wc_name(c), wc[c]);
			first = 0;
		}
	printf("}");
}

static void json_output(const struct options *o, const struct sv_stat_ctx_view *v, size_t n)
{
	struct sv_stat_ctx_view *dev = calloc(n ? n : 1, sizeof(*dev));
	size_t *counts = calloc(n ? n : 1, sizeof(*counts));
	size_t nd;
	bool first = true;

	if (!dev || !counts) {
		fprintf(stderr, "softverbs: out of memory\n");
		free(dev);
		free(counts);
		return;
	}
	printf("{\"contexts\":[");
	for (size_t i = 0; i < n; i++) {
		char ep[32];

		if (!selected(o, &v[i]))
			continue;
		addr_str(v[i].ep_ip, v[i].ep_port, ep, sizeof(ep));
		printf("%s\n{\"pid\":%d,\"comm\":", first ? "" : ",", v[i].pid);
		json_str(v[i].comm);
		printf(",\"uid\":%u,\"device\":", (unsigned)v[i].uid);
		json_str(v[i].dev);
		printf(",\"port\":1,\"netns\":%" PRIu64 ",\"context\":%u,\"endpoint\":\"%s\","
		       "\"opened_unix_ns\":%" PRIu64 ",",
		       v[i].netns, v[i].ctx_no, ep, v[i].opened_ns);
		json_counters(v[i].port, v[i].ctx_c, v[i].wc_status);
		printf(",\"qps\":[");
		for (size_t q = 0; q < v[i].nqp; q++) {
			const struct sv_stat_qp_view *qp = &v[i].qp[q];
			char peer[32];

			addr_str(qp->peer_ip, qp->peer_port, peer, sizeof(peer));
			printf("%s{\"qpn\":%u,\"type\":\"%s\",\"state\":\"%s\",\"dest_qpn\":%u,"
			       "\"peer\":\"%s\",",
			       q ? "," : "", qp->qpn, qp_type_str(qp->type), qp_state_str(qp->state),
			       qp->dest_qpn, peer);
			json_counters(qp->c, NULL, NULL);
			printf("}");
		}
		printf("]}");
		first = false;
	}
	printf("\n],\"devices\":[");
	nd = device_totals(o, v, n, dev, counts);
	for (size_t d = 0; d < nd; d++) {
		printf("%s\n{\"device\":", d ? "," : "");
		json_str(dev[d].dev);
		printf(",\"port\":1,\"netns\":%" PRIu64 ",\"contexts\":%zu,", dev[d].netns, counts[d]);
		json_counters(dev[d].port, dev[d].ctx_c, dev[d].wc_status);
		printf("}");
	}
	printf("\n]}\n");
	free(dev);
	free(counts);
}

static unsigned collect_flags(void)
{
	return SV_STAT_QPS | SV_STAT_CLEAN | (geteuid() == 0 ? SV_STAT_ALL_USERS : 0);
}

int cmd_stat(int argc, char **argv)
{
	struct options o = { 0 };
	struct sv_stat_ctx_view *v;
	size_t n;
	int ret = parse_options("stat", argc, argv, &o, false);

	if (ret)
		return ret;
	if (sv_stat_collect(collect_flags(), &v, &n)) {
		fprintf(stderr, "softverbs: reading counters: %s\n", strerror(errno));
		return 1;
	}
	if (o.json)
		json_output(&o, v, n);
	else
		text_output(&o, v, n);
	sv_stat_views_free(v, n);
	return 0;
}

/* ---- top ---- */

static volatile sig_atomic_t top_stop;

static void on_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

/* The previous frame's view of the same context (pid, context number), if any. */
static const struct sv_stat_ctx_view *previous(const struct sv_stat_ctx_view *prev, size_t np,
					       const struct sv_stat_ctx_view *cur)
{
	for (size_t i = 0; i < np; i++)
		if (prev[i].pid == cur->pid && prev[i].ctx_no == cur->ctx_no &&
		    prev[i].opened_ns == cur->opened_ns)
			return &prev[i];
	return NULL;
}

static const struct sv_stat_qp_view *previous_qp(const struct sv_stat_ctx_view *p, uint32_t qpn)
{
	for (size_t i = 0; p && i < p->nqp; i++)
		if (p->qp[i].qpn == qpn)
			return &p->qp[i];
	return NULL;
}

/* Per second: since the previous frame, or without one (the first frame,
 * a new context or QP) the average over `age` seconds. */
static double rate(const uint64_t *cur, const uint64_t *prev, unsigned c, double secs, double age)
{
	if (!prev)
		return age > 0 ? (double)cur[c] / age : 0.0;
	return cur[c] >= prev[c] ? (double)(cur[c] - prev[c]) / secs : 0.0;
}

/* Seconds since a context was opened (opened_ns: CLOCK_REALTIME). */
static double age_of(const struct sv_stat_ctx_view *c)
{
	struct timespec now;
	double t;

	clock_gettime(CLOCK_REALTIME, &now);
	t = (double)now.tv_sec + (double)now.tv_nsec / 1e9 - (double)c->opened_ns / 1e9;
	return t > 0 ? t : 0;
}

/* One row of top: the left columns given, then rates and totals of counters c. */
static void top_row(const char *left, const uint64_t *c, const uint64_t *prev, double secs,
		    double age)
{
	printf("%s %10.0f %10.0f %9.2f %9.2f %8" PRIu64 " %6" PRIu64 " %6" PRIu64 "\n", left,
	       rate(c, prev, SV_QPC_TX_PKTS, secs, age), rate(c, prev, SV_QPC_RX_PKTS, secs, age),
	       rate(c, prev, SV_QPC_TX_BYTES, secs, age) / 1e6,
	       rate(c, prev, SV_QPC_RX_BYTES, secs, age) / 1e6,
	       c[SV_QPC_RETRANS], c[SV_QPC_RNR_NAK_SENT] + c[SV_QPC_RNR_NAK_RCVD],
	       c[SV_QPC_CQE_ERR]);
}

static void top_frame(const struct options *o, const struct sv_stat_ctx_view *v, size_t n,
		      const struct sv_stat_ctx_view *prev, size_t np, double secs)
{
	time_t now = time(NULL);
	struct tm tm;
	char clock[16];
	size_t nctx = 0, nqp = 0;

	localtime_r(&now, &tm);
	strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
	for (size_t i = 0; i < n; i++)
		if (selected(o, &v[i]))
			nctx++, nqp += v[i].nqp;
	printf("softverbs top - %s  contexts %zu  qps %zu  (every %.2g s; Ctrl-C quits)\n\n", clock,
	       nctx, nqp, o->delay);
	printf("%-8s %-16s %-10s %4s %5s %10s %10s %9s %9s %8s %6s %6s\n", "PID", "COMMAND",
	       "LINK", "CTX", "QPS", "TX pkt/s", "RX pkt/s", "TX MB/s", "RX MB/s", "RETRANS",
	       "RNR", "ERRORS");
	for (size_t i = 0; i < n; i++) {
		const struct sv_stat_ctx_view *c = &v[i];
		const struct sv_stat_ctx_view *p;
		char link[80], left[160];

		if (!selected(o, c))
			continue;
		p = previous(prev, np, c);
		snprintf(link, sizeof(link), "%s/1", c->dev); /* the device's port 1 */
		snprintf(left, sizeof(left), "%-8d %-16s %-10s %4u %5zu", c->pid, c->comm, link,
			 c->ctx_no, c->nqp);
		top_row(left, c->port, p ? p->port : NULL, secs, age_of(c));
		for (size_t q = 0; q < c->nqp; q++) {
			const struct sv_stat_qp_view *qp = &c->qp[q];
			const struct sv_stat_qp_view *pq = previous_qp(p, qp->qpn);
			char name[48];

			snprintf(name, sizeof(name), "qp %u %s %s", qp->qpn, qp_type_str(qp->type),
				 qp_state_str(qp->state));
			snprintf(left, sizeof(left), "%-8s %-32s %5s", "", name, "");
			top_row(left, qp->c, pq ? pq->c : NULL, secs, age_of(c));
		}
	}
	if (!nctx)
		printf("no softverbs contexts%s\n", o->pid || o->device ? " match" : " on this host");
}

int cmd_top(int argc, char **argv)
{
	struct options o = { .delay = 1.0 };
	struct sv_stat_ctx_view *prev = NULL, *cur;
	size_t np = 0, n;
	struct timespec t0, t1;
	bool tty = isatty(STDOUT_FILENO);
	int ret = parse_options("top", argc, argv, &o, true);

	if (ret)
		return ret;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long frame = 0; !top_stop && (!o.iterations || frame < o.iterations); frame++) {
		double secs;

		if (sv_stat_collect(collect_flags(), &cur, &n)) {
			fprintf(stderr, "softverbs: reading counters: %s\n", strerror(errno));
			sv_stat_views_free(prev, np);
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
		t0 = t1;
		/* a terminal is redrawn in place; a pipe gets frames one after another */
		if (tty)
			printf("\033[H\033[2J");
		else if (frame)
			printf("\n");
		top_frame(&o, cur, n, prev, np, secs > 0 ? secs : o.delay);
		fflush(stdout);
		sv_stat_views_free(prev, np);
		prev = cur;
		np = n;
		if (o.iterations && frame + 1 >= o.iterations)
			break;
		struct timespec d = { (time_t)o.delay,
				      (long)((o.delay - (double)(time_t)o.delay) * 1e9) };
		while (!top_stop && nanosleep(&d, &d) && errno == EINTR)
			;
	}
	sv_stat_views_free(prev, np);
	return 0;
}
