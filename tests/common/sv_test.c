/*
 * sv_test.c - shared test harness for softverbs tests. See sv_test.h.
 */
#include "sv_test.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char *program_invocation_short_name;

/* ------------------------------------------------------------------------- */
/* Assertions                                                                 */
/* ------------------------------------------------------------------------- */

void svt_fail_at(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: FAIL: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	fflush(stdout);
	exit(1);
}

void svt_skip(const char *reason)
{
	fprintf(stderr, "SKIP: %s\n", reason);
	fflush(stderr);
	fflush(stdout);
	exit(77);
}

void svt_log(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", program_invocation_short_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void svt_fail_cmp(const char *file, int line, const char *ea, const char *op,
		  const char *eb, long long a, long long b)
{
	svt_fail_at(file, line,
		    "check failed: %s %s %s\n"
		    "    left : %s = %lld (0x%llx)\n"
		    "    right: %s = %lld (0x%llx)",
		    ea, op, eb, ea, a, (unsigned long long)a, eb, b,
		    (unsigned long long)b);
}

void svt_fail_rc(const char *file, int line, const char *expr, int rc,
		 int expected)
{
	svt_fail_at(file, line, "%s returned %d (%s), expected %d (%s)", expr,
		    rc, rc > 0 ? strerror(rc) : (rc == 0 ? "success" : "?"),
		    expected, expected ? strerror(expected) : "success");
}

void svt_check_mem_at(const char *file, int line, const void *a, const void *b,
		      size_t len)
{
	const uint8_t *pa = a, *pb = b;
	size_t i;

	for (i = 0; i < len; i++)
		if (pa[i] != pb[i])
			break;
	if (i == len)
		return;
	svt_fail_at(file, line,
		    "memory differs at offset %zu of %zu: 0x%02x != 0x%02x", i,
		    len, pa[i], pb[i]);
}

static void watchdog_handler(int sig)
{
	static const char msg[] = "FAIL: watchdog: test took too long\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);

	(void)r;
	(void)sig;
	signal(SIGABRT, SIG_DFL);
	abort();
}

void svt_watchdog(unsigned int seconds)
{
	signal(SIGALRM, watchdog_handler);
	alarm(seconds);
}

uint64_t svt_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void svt_sleep_ms(unsigned int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

bool svt_private_netns(void)
{
	struct ifreq ifr = { 0 };
	int s;

	if (geteuid() != 0 || unshare(CLONE_NEWNET))
		return false;
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	SVT_CHECK(s >= 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	SVT_CHECK_OK(ioctl(s, SIOCGIFFLAGS, &ifr));
	ifr.ifr_flags |= IFF_UP;
	SVT_CHECK_OK(ioctl(s, SIOCSIFFLAGS, &ifr));
	close(s);
	return true;
}

void svt_private_netns_done(void)
{
	struct stat st;
	char path[128];

	/* the QPN registry of the namespace's lo (src/transport/registry.c) */
	if (!stat("/proc/self/ns/net", &st)) {
		snprintf(path, sizeof(path), "/dev/shm/softverbs-%u-%lu-7f000001.qpn",
			 (unsigned)getuid(), (unsigned long)st.st_ino);
		unlink(path);
	}
}

/* Brief pause used inside polling loops: spin a little, then sleep 20 us so
 * the library's engine threads get the (2) CPUs. */
static void backoff(unsigned int *iter)
{
	if (++*iter < 200)
		return;
	struct timespec ts = { 0, 20000 };
	nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------- */
/* Buffers                                                                    */
/* ------------------------------------------------------------------------- */

uint8_t svt_pattern_byte(uint32_t seed, size_t off)
{
	uint32_t x = seed * 2654435761u + (uint32_t)off * 40503u +
		     (uint32_t)(off >> 16) * 2246822519u;

	x ^= x >> 13;
	x *= 0x5bd1e995u;
	x ^= x >> 15;
	return (uint8_t)x;
}

/* Is addr in pages softverbs shared (a mapping of its memfd)? */
bool svt_shared_pages(const void *addr)
{
	char line[512];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "r");

	SVT_CHECK(f != NULL);
	while (!found && fgets(line, sizeof(line), f)) {
		unsigned long long s, e;
		char perms[8];

		/* a shared mapping (a deregistered MR's memfd is mapped
		 * privately: rw-p) */
		if (sscanf(line, "%llx-%llx %7s", &s, &e, perms) == 3 && (uintptr_t)addr >= s &&
		    (uintptr_t)addr < e)
			found = strstr(line, "/memfd:softverbs-mr") != NULL && perms[3] == 's';
	}
	fclose(f);
	return found;
}

void svt_fill(void *buf, size_t len, uint32_t seed)
{
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = svt_pattern_byte(seed, i);
}

void svt_check_fill_at(const char *file, int line, const void *buf, size_t len,
		       uint32_t seed)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < len; i++) {
		uint8_t want = svt_pattern_byte(seed, i);

		if (p[i] != want)
			svt_fail_at(file, line,
				    "data mismatch at offset %zu of %zu: got "
				    "0x%02x, expected 0x%02x (seed %u)",
				    i, len, p[i], want, seed);
	}
}

static bool fill_matches(const void *buf, size_t len, uint32_t seed)
{
	const volatile uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != svt_pattern_byte(seed, i))
			return false;
	return true;
}

void svt_wait_fill_at(const char *file, int line, const void *buf, size_t len,
		      uint32_t seed, int timeout_ms)
{
	uint64_t deadline;

	if (timeout_ms <= 0)
		timeout_ms = SVT_TIMEOUT_MS;
	deadline = svt_now_ms() + (uint64_t)timeout_ms;
	while (!fill_matches(buf, len, seed) && svt_now_ms() < deadline)
		svt_sleep_ms(1);
	svt_check_fill_at(file, line, buf, len, seed);
}

void *svt_alloc(size_t len)
{
	void *p = NULL;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	if (posix_memalign(&p, pg, len ? len : 1) != 0)
		SVT_FAIL("posix_memalign(%zu) failed", len);
	memset(p, 0, len);
	return p;
}

/* ------------------------------------------------------------------------- */
/* Device, PD, CQ, QP                                                         */
/* ------------------------------------------------------------------------- */

const char *svt_device_name(void)
{
	const char *n = getenv("SVT_DEVICE");

	return (n && *n) ? n : "sv_lo";
}

struct ibv_context *svt_open_context(void)
{
	const char *want = svt_device_name();
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_context *ctx = NULL;

	if (!list)
		SVT_FAIL("ibv_get_device_list failed: %s", strerror(errno));
	for (int i = 0; i < num; i++) {
		if (strcmp(ibv_get_device_name(list[i]), want) == 0) {
			ctx = ibv_open_device(list[i]);
			if (!ctx)
				SVT_FAIL("ibv_open_device(%s) failed: %s", want,
					 strerror(errno));
			break;
		}
	}
	if (!ctx) {
		fprintf(stderr, "devices found (%d):", num);
		for (int i = 0; i < num; i++)
			fprintf(stderr, " %s", ibv_get_device_name(list[i]));
		fputc('\n', stderr);
		ibv_free_device_list(list);
		SVT_FAIL("device %s not found (set SVT_DEVICE)", want);
	}
	ibv_free_device_list(list);
	return ctx;
}

void svt_dev_open(struct svt_dev *d)
{
	memset(d, 0, sizeof(*d));
	d->ctx = svt_open_context();
	d->pd = ibv_alloc_pd(d->ctx);
	SVT_CHECK_PTR(d->pd);
	SVT_CHECK_OK(ibv_query_device(d->ctx, &d->dev_attr));
	SVT_CHECK_OK(ibv_query_port(d->ctx, 1, &d->port_attr));
	SVT_CHECK_OK(ibv_query_gid(d->ctx, 1, 0, &d->gid));
}

void svt_dev_close(struct svt_dev *d)
{
	if (d->pd)
		SVT_CHECK_OK(ibv_dealloc_pd(d->pd));
	if (d->ctx)
		SVT_CHECK_OK(ibv_close_device(d->ctx));
	memset(d, 0, sizeof(*d));
}

struct ibv_mr *svt_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
			  unsigned int access)
{
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access);

	if (!mr)
		SVT_FAIL("ibv_reg_mr(%p, %zu, 0x%x) failed: %s", addr, len,
			 access, strerror(errno));
	return mr;
}

struct ibv_cq *svt_create_cq(struct ibv_context *ctx, int cqe,
			     struct ibv_comp_channel *channel)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, cqe, NULL, channel, 0);

	if (!cq)
		SVT_FAIL("ibv_create_cq(%d) failed: %s", cqe, strerror(errno));
	return cq;
}

void svt_qp_init_default(struct svt_qp_init *qi, enum ibv_qp_type type)
{
	memset(qi, 0, sizeof(*qi));
	qi->type = type;
	qi->cap.max_send_wr = 64;
	qi->cap.max_recv_wr = 64;
	qi->cap.max_send_sge = 4;
	qi->cap.max_recv_sge = 4;
	qi->cap.max_inline_data = 64;
}

struct ibv_qp *svt_create_qp(struct ibv_pd *pd, struct ibv_cq *send_cq,
			     struct ibv_cq *recv_cq,
			     const struct svt_qp_init *qi)
{
	struct ibv_qp_init_attr ia;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = send_cq;
	ia.recv_cq = recv_cq;
	ia.srq = qi->srq;
	ia.cap = qi->cap;
	ia.qp_type = qi->type;
	ia.sq_sig_all = qi->sq_sig_all;

	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		SVT_FAIL("ibv_create_qp(type %d, wr %u/%u, sge %u/%u, "
			 "inline %u) failed: %s",
			 qi->type, qi->cap.max_send_wr, qi->cap.max_recv_wr,
			 qi->cap.max_send_sge, qi->cap.max_recv_sge,
			 qi->cap.max_inline_data, strerror(errno));
	return qp;
}

void svt_conn_default(struct svt_conn *c, enum ibv_qp_type type)
{
	memset(c, 0, sizeof(*c));
	c->port_num = 1;
	c->pkey_index = 0;
	c->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (type == IBV_QPT_RC)
		c->access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	c->path_mtu = IBV_MTU_4096;
	c->sq_psn = 0x1000;
	c->rq_psn = 0x1000;
	c->timeout = 14;
	c->retry_cnt = 7;
	c->rnr_retry = 7;
	c->min_rnr_timer = 12;
	c->max_rd_atomic = 4;
	c->max_dest_rd_atomic = 4;
	c->qkey = 0x11111111;
	c->sgid_index = 3; /* the IPv4-mapped RoCE v2 GID, what a GRH carries */
	c->hop_limit = 1;
}

void svt_ah_attr(struct ibv_ah_attr *ah, const union ibv_gid *dgid,
		 const struct svt_conn *c)
{
	struct svt_conn def;

	if (!c) {
		svt_conn_default(&def, IBV_QPT_RC);
		c = &def;
	}
	memset(ah, 0, sizeof(*ah));
	ah->is_global = 1;
	ah->grh.dgid = *dgid;
	ah->grh.sgid_index = c->sgid_index;
	ah->grh.hop_limit = c->hop_limit;
	ah->port_num = c->port_num;
}

static const struct svt_conn *conn_or_default(const struct svt_conn *c,
					      struct svt_conn *buf,
					      enum ibv_qp_type type)
{
	if (c)
		return c;
	svt_conn_default(buf, type);
	return buf;
}

int svt_init_attr(enum ibv_qp_type type, const struct svt_conn *c,
		  struct ibv_qp_attr *a)
{
	struct svt_conn def;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;

	c = conn_or_default(c, &def, type);
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_INIT;
	a->pkey_index = c->pkey_index;
	a->port_num = c->port_num;
	if (type == IBV_QPT_UD) {
		a->qkey = c->qkey;
		mask |= IBV_QP_QKEY;
	} else {
		a->qp_access_flags = c->access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return mask;
}

int svt_rtr_attr(enum ibv_qp_type type, const struct svt_conn *c,
		 const union ibv_gid *dgid, uint32_t dest_qpn,
		 struct ibv_qp_attr *a)
{
	struct svt_conn def;
	int mask = IBV_QP_STATE;

	c = conn_or_default(c, &def, type);
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTR;
	if (type != IBV_QPT_UD) {
		svt_ah_attr(&a->ah_attr, dgid, c);
		a->path_mtu = c->path_mtu;
		a->dest_qp_num = dest_qpn;
		a->rq_psn = c->rq_psn;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		if (type == IBV_QPT_RC) {
			a->max_dest_rd_atomic = c->max_dest_rd_atomic;
			a->min_rnr_timer = c->min_rnr_timer;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC |
				IBV_QP_MIN_RNR_TIMER;
		}
	}
	return mask;
}

int svt_rts_attr(enum ibv_qp_type type, const struct svt_conn *c,
		 struct ibv_qp_attr *a)
{
	struct svt_conn def;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;

	c = conn_or_default(c, &def, type);
	memset(a, 0, sizeof(*a));
	a->qp_state = IBV_QPS_RTS;
	a->sq_psn = c->sq_psn;
	if (type == IBV_QPT_RC) {
		a->timeout = c->timeout;
		a->retry_cnt = c->retry_cnt;
		a->rnr_retry = c->rnr_retry;
		a->max_rd_atomic = c->max_rd_atomic;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return mask;
}

int svt_qp_to_init(struct ibv_qp *qp, const struct svt_conn *c)
{
	struct ibv_qp_attr a;
	int mask = svt_init_attr(qp->qp_type, c, &a);

	return ibv_modify_qp(qp, &a, mask);
}

int svt_qp_to_rtr(struct ibv_qp *qp, const struct svt_conn *c,
		  const union ibv_gid *dgid, uint32_t dest_qpn)
{
	struct ibv_qp_attr a;
	int mask = svt_rtr_attr(qp->qp_type, c, dgid, dest_qpn, &a);

	return ibv_modify_qp(qp, &a, mask);
}

int svt_qp_to_rts(struct ibv_qp *qp, const struct svt_conn *c)
{
	struct ibv_qp_attr a;
	int mask = svt_rts_attr(qp->qp_type, c, &a);

	return ibv_modify_qp(qp, &a, mask);
}

int svt_qp_to_state(struct ibv_qp *qp, enum ibv_qp_state state)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

struct ibv_qp *svt_ud_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
			 uint32_t qkey, uint8_t sgid_index)
{
	struct svt_qp_init qi;
	struct svt_conn c;
	struct ibv_qp *qp;

	svt_qp_init_default(&qi, IBV_QPT_UD);
	qp = svt_create_qp(pd, scq, rcq, &qi);
	svt_conn_default(&c, IBV_QPT_UD);
	c.qkey = qkey;
	c.sgid_index = sgid_index;
	svt_qp_connect(qp, &c, NULL, 0);
	return qp;
}

void svt_qp_connect(struct ibv_qp *qp, const struct svt_conn *c,
		    const union ibv_gid *dgid, uint32_t dest_qpn)
{
	int rc;

	rc = svt_qp_to_init(qp, c);
	if (rc)
		SVT_FAIL("QP %u RESET->INIT failed: %d (%s)", qp->qp_num, rc,
			 strerror(rc));
	rc = svt_qp_to_rtr(qp, c, dgid, dest_qpn);
	if (rc)
		SVT_FAIL("QP %u INIT->RTR failed: %d (%s)", qp->qp_num, rc,
			 strerror(rc));
	rc = svt_qp_to_rts(qp, c);
	if (rc)
		SVT_FAIL("QP %u RTR->RTS failed: %d (%s)", qp->qp_num, rc,
			 strerror(rc));
}

void svt_qp_link(struct ibv_qp *qa, const union ibv_gid *ga, struct ibv_qp *qb,
		 const union ibv_gid *gb, const struct svt_conn *c)
{
	svt_qp_connect(qa, c, gb, qb->qp_num);
	svt_qp_connect(qb, c, ga, qa->qp_num);
}

enum ibv_qp_state svt_qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia));
	return a.qp_state;
}

/* ------------------------------------------------------------------------- */
/* Pair                                                                       */
/* ------------------------------------------------------------------------- */

void svt_pair_opts_default(struct svt_pair_opts *o, enum ibv_qp_type type)
{
	memset(o, 0, sizeof(*o));
	o->type = type;
	o->buf_len = 64 * 1024;
	o->cqe = 256;
	o->separate_cqs = false;
	o->mr_access = SVT_ACCESS_ALL;
	svt_qp_init_default(&o->qp, type);
	svt_conn_default(&o->conn, type);
}

static void side_create(struct svt_side *s, const struct svt_pair_opts *o)
{
	memset(s, 0, sizeof(*s));
	s->ctx = svt_open_context();
	SVT_CHECK_OK(ibv_query_device(s->ctx, &s->dev_attr));
	SVT_CHECK_OK(ibv_query_gid(s->ctx, o->conn.port_num, o->conn.sgid_index,
				   &s->gid));
	s->pd = ibv_alloc_pd(s->ctx);
	SVT_CHECK_PTR(s->pd);
	if (o->comp_channel) {
		s->channel = ibv_create_comp_channel(s->ctx);
		SVT_CHECK_PTR(s->channel);
	}
	s->send_cq = svt_create_cq(s->ctx, o->cqe, s->channel);
	s->recv_cq = o->separate_cqs ? svt_create_cq(s->ctx, o->cqe, s->channel)
				     : s->send_cq;
	struct svt_qp_init qi = o->qp;
	qi.type = o->type;
	s->qp = svt_create_qp(s->pd, s->send_cq, s->recv_cq, &qi);
	s->buf_len = o->buf_len;
	s->buf = svt_alloc(o->buf_len);
	s->mr = svt_reg_mr(s->pd, s->buf, o->buf_len, o->mr_access);
}

void svt_pair_create(struct svt_pair *p, enum ibv_qp_type type,
		     const struct svt_pair_opts *opts)
{
	memset(p, 0, sizeof(*p));
	if (opts) {
		p->opts = *opts;
		p->opts.type = type;
	} else {
		svt_pair_opts_default(&p->opts, type);
	}
	p->type = type;
	side_create(&p->a, &p->opts);
	side_create(&p->b, &p->opts);
	p->a.remote_qpn = p->b.qp->qp_num;
	p->b.remote_qpn = p->a.qp->qp_num;
	if (type == IBV_QPT_UD) {
		struct ibv_ah_attr ah;

		svt_ah_attr(&ah, &p->b.gid, &p->opts.conn);
		p->a.ah = ibv_create_ah(p->a.pd, &ah);
		SVT_CHECK_PTR(p->a.ah);
		svt_ah_attr(&ah, &p->a.gid, &p->opts.conn);
		p->b.ah = ibv_create_ah(p->b.pd, &ah);
		SVT_CHECK_PTR(p->b.ah);
	}
	if (!p->opts.no_connect)
		svt_pair_connect(p);
}

void svt_pair_connect(struct svt_pair *p)
{
	svt_qp_link(p->a.qp, &p->a.gid, p->b.qp, &p->b.gid, &p->opts.conn);
}

static void side_destroy(struct svt_side *s)
{
	if (s->ah)
		SVT_CHECK_OK(ibv_destroy_ah(s->ah));
	if (s->qp)
		SVT_CHECK_OK(ibv_destroy_qp(s->qp));
	if (s->mr)
		SVT_CHECK_OK(ibv_dereg_mr(s->mr));
	free(s->buf);
	if (s->recv_cq && s->recv_cq != s->send_cq)
		SVT_CHECK_OK(ibv_destroy_cq(s->recv_cq));
	if (s->send_cq)
		SVT_CHECK_OK(ibv_destroy_cq(s->send_cq));
	if (s->channel)
		SVT_CHECK_OK(ibv_destroy_comp_channel(s->channel));
	if (s->pd)
		SVT_CHECK_OK(ibv_dealloc_pd(s->pd));
	if (s->ctx)
		SVT_CHECK_OK(ibv_close_device(s->ctx));
	memset(s, 0, sizeof(*s));
}

void svt_pair_destroy(struct svt_pair *p)
{
	side_destroy(&p->a);
	side_destroy(&p->b);
}

/* ------------------------------------------------------------------------- */
/* Posting                                                                    */
/* ------------------------------------------------------------------------- */

/* Fill sge; return it, or NULL when len is 0 (then the WR has no SGE). */
static struct ibv_sge *sge1(struct ibv_sge *sge, void *addr, uint32_t len,
			    uint32_t lkey)
{
	sge->addr = (uintptr_t)addr;
	sge->length = len;
	sge->lkey = lkey;
	return len ? sge : NULL;
}

/* One send WR with one SGE (none when len is 0). */
static void send_wr1(struct ibv_send_wr *wr, struct ibv_sge *sge,
		     uint64_t wr_id, enum ibv_wr_opcode op, unsigned int flags,
		     void *addr, uint32_t len, uint32_t lkey)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = wr_id;
	wr->sg_list = sge1(sge, addr, len, lkey);
	wr->num_sge = len ? 1 : 0;
	wr->opcode = op;
	wr->send_flags = flags;
}

int svt_post_send(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op,
		  unsigned int flags, void *addr, uint32_t len, uint32_t lkey,
		  uint64_t remote_addr, uint32_t rkey, uint32_t imm_host)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;

	send_wr1(&wr, &sge, wr_id, op, flags, addr, len, lkey);
	if (op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htonl(imm_host);
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int svt_post_ud_send(struct ibv_qp *qp, uint64_t wr_id, unsigned int flags,
		     void *addr, uint32_t len, uint32_t lkey, struct ibv_ah *ah,
		     uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;

	send_wr1(&wr, &sge, wr_id, IBV_WR_SEND, flags, addr, len, lkey);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = remote_qpn;
	wr.wr.ud.remote_qkey = remote_qkey;
	return ibv_post_send(qp, &wr, &bad);
}

int svt_post_atomic(struct ibv_qp *qp, uint64_t wr_id, enum ibv_wr_opcode op,
		    unsigned int flags, void *addr, uint32_t lkey,
		    uint64_t remote_addr, uint32_t rkey, uint64_t compare_add,
		    uint64_t swap)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad = NULL;

	send_wr1(&wr, &sge, wr_id, op, flags, addr, 8, lkey);
	wr.wr.atomic.remote_addr = remote_addr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return ibv_post_send(qp, &wr, &bad);
}

/* One receive WR with one SGE (none when len is 0). */
static void recv_wr1(struct ibv_recv_wr *wr, struct ibv_sge *sge,
		     uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = wr_id;
	wr->sg_list = sge1(sge, addr, len, lkey);
	wr->num_sge = len ? 1 : 0;
}

int svt_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
		  uint32_t lkey)
{
	struct ibv_sge sge;
	struct ibv_recv_wr wr, *bad = NULL;

	recv_wr1(&wr, &sge, wr_id, addr, len, lkey);
	return ibv_post_recv(qp, &wr, &bad);
}

int svt_post_srq_recv(struct ibv_srq *srq, uint64_t wr_id, void *addr,
		      uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge;
	struct ibv_recv_wr wr, *bad = NULL;

	recv_wr1(&wr, &sge, wr_id, addr, len, lkey);
	return ibv_post_srq_recv(srq, &wr, &bad);
}

/* ------------------------------------------------------------------------- */
/* Completions and events                                                     */
/* ------------------------------------------------------------------------- */

void svt_poll_n_at(const char *file, int line, struct ibv_cq *cq, int n,
		   struct ibv_wc *wc, int timeout_ms)
{
	int got = 0;
	unsigned int iter = 0;
	uint64_t deadline;

	if (timeout_ms <= 0)
		timeout_ms = SVT_TIMEOUT_MS;
	deadline = svt_now_ms() + (uint64_t)timeout_ms;
	while (got < n) {
		int r = ibv_poll_cq(cq, n - got, wc + got);

		if (r < 0)
			svt_fail_at(file, line,
				    "ibv_poll_cq returned %d after %d of %d "
				    "completions",
				    r, got, n);
		if (r > n - got)
			svt_fail_at(file, line,
				    "ibv_poll_cq returned %d > requested %d", r,
				    n - got);
		got += r;
		if (got >= n)
			break;
		if (r == 0) {
			if (svt_now_ms() > deadline)
				svt_fail_at(file, line,
					    "timeout (%d ms): got %d of %d "
					    "completions",
					    timeout_ms, got, n);
			backoff(&iter);
		}
	}
}

void svt_poll_ok_at(const char *file, int line, struct ibv_cq *cq, int n,
		    struct ibv_wc *wc, int timeout_ms)
{
	svt_poll_n_at(file, line, cq, n, wc, timeout_ms);
	for (int i = 0; i < n; i++)
		if (wc[i].status != IBV_WC_SUCCESS)
			svt_fail_at(file, line,
				    "completion %d of %d (wr_id %llu, opcode "
				    "%d): status %d (%s), vendor_err %u",
				    i, n, (unsigned long long)wc[i].wr_id,
				    (int)wc[i].opcode, (int)wc[i].status,
				    ibv_wc_status_str(wc[i].status),
				    wc[i].vendor_err);
}

struct ibv_wc svt_poll_one_at(const char *file, int line, struct ibv_cq *cq)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	svt_poll_n_at(file, line, cq, 1, &wc, 0);
	return wc;
}

void svt_expect_no_wc_at(const char *file, int line, struct ibv_cq *cq, int ms)
{
	uint64_t deadline = svt_now_ms() + (uint64_t)(ms > 0 ? ms : 0);
	unsigned int iter = 0;
	struct ibv_wc wc;

	do {
		int r = ibv_poll_cq(cq, 1, &wc);

		if (r < 0)
			svt_fail_at(file, line, "ibv_poll_cq returned %d", r);
		if (r > 0)
			svt_fail_at(file, line,
				    "unexpected completion: wr_id %llu opcode "
				    "%d status %d (%s) byte_len %u",
				    (unsigned long long)wc.wr_id,
				    (int)wc.opcode, (int)wc.status,
				    ibv_wc_status_str(wc.status), wc.byte_len);
		backoff(&iter);
	} while (svt_now_ms() < deadline);
}

static int wait_readable(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint64_t deadline;

	if (timeout_ms <= 0)
		timeout_ms = SVT_TIMEOUT_MS;
	deadline = svt_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		uint64_t now = svt_now_ms();
		int left = now >= deadline ? 0 : (int)(deadline - now);
		int r = poll(&pfd, 1, left);

		if (r > 0)
			return 0;
		if (r == 0)
			return ETIMEDOUT;
		if (errno != EINTR)
			return errno;
	}
}

int svt_wait_cq_event(struct ibv_comp_channel *ch, int timeout_ms,
		      struct ibv_cq **cq, void **cq_context)
{
	int rc = wait_readable(ch->fd, timeout_ms);

	if (rc)
		return rc;
	if (ibv_get_cq_event(ch, cq, cq_context))
		return errno ? errno : EIO;
	return 0;
}

int svt_wait_async_event(struct ibv_context *ctx, int timeout_ms,
			 struct ibv_async_event *ev)
{
	int rc = wait_readable(ctx->async_fd, timeout_ms);

	if (rc)
		return rc;
	if (ibv_get_async_event(ctx, ev))
		return errno ? errno : EIO;
	return 0;
}

/* ------------------------------------------------------------------------- */
/* Two-process tests                                                          */
/* ------------------------------------------------------------------------- */

#define CHILD_FLAG "--svt-child"

void svt_child_dispatch(int argc, char **argv,
			const struct svt_child_role *roles)
{
	if (argc < 3 || strcmp(argv[1], CHILD_FLAG) != 0)
		return;
	const char *fds = getenv("SVT_CHILD_FDS");
	int rfd = -1, wfd = -1;

	if (!fds || sscanf(fds, "%d,%d", &rfd, &wfd) != 2)
		SVT_FAIL("child %s: SVT_CHILD_FDS missing", argv[2]);
	for (const struct svt_child_role *r = roles; r && r->name; r++) {
		if (strcmp(r->name, argv[2]) == 0) {
			int rc = r->fn(rfd, wfd, argc - 3, argv + 3);

			fflush(stdout);
			fflush(stderr);
			exit(rc);
		}
	}
	SVT_FAIL("unknown child role %s", argv[2]);
}

void svt_spawn(struct svt_child *c, const char *role, char *const args[])
{
	int to_child[2], from_child[2];
	int nargs = 0;

	while (args && args[nargs])
		nargs++;
	SVT_CHECK(pipe2(to_child, O_CLOEXEC) == 0);
	SVT_CHECK(pipe2(from_child, O_CLOEXEC) == 0);
	fflush(stdout);
	fflush(stderr);

	pid_t pid = fork();

	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		/* Child: keep only its pipe ends, without CLOEXEC. */
		char env[64];
		char **argv = calloc((size_t)nargs + 4, sizeof(char *));

		if (!argv)
			_exit(127);
		close(to_child[1]);
		close(from_child[0]);
		fcntl(to_child[0], F_SETFD, 0);
		fcntl(from_child[1], F_SETFD, 0);
		snprintf(env, sizeof(env), "%d,%d", to_child[0], from_child[1]);
		setenv("SVT_CHILD_FDS", env, 1);
		argv[0] = program_invocation_short_name;
		argv[1] = (char *)CHILD_FLAG;
		argv[2] = (char *)role;
		for (int i = 0; i < nargs; i++)
			argv[3 + i] = args[i];
		argv[3 + nargs] = NULL;
		execv("/proc/self/exe", argv);
		fprintf(stderr, "exec /proc/self/exe failed: %s\n",
			strerror(errno));
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	c->pid = pid;
	c->rfd = from_child[0];
	c->wfd = to_child[1];
}

int svt_child_wait(struct svt_child *c, int timeout_ms)
{
	uint64_t deadline;
	int status = 0;

	if (timeout_ms <= 0)
		timeout_ms = SVT_TIMEOUT_MS;
	deadline = svt_now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		pid_t r = waitpid(c->pid, &status, WNOHANG);

		if (r == c->pid)
			break;
		if (r < 0 && errno != EINTR)
			SVT_FAIL("waitpid(%d): %s", (int)c->pid,
				 strerror(errno));
		if (svt_now_ms() > deadline) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &status, 0);
			SVT_FAIL("child %d did not exit within %d ms (killed)",
				 (int)c->pid, timeout_ms);
		}
		svt_sleep_ms(2);
	}
	if (c->rfd >= 0)
		close(c->rfd);
	if (c->wfd >= 0)
		close(c->wfd);
	c->rfd = c->wfd = -1;
	c->pid = 0;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

void svt_child_kill(struct svt_child *c, int sig)
{
	if (c->pid > 0)
		SVT_CHECK(kill(c->pid, sig) == 0);
}

void svt_chan_write(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			SVT_FAIL("pipe write failed: %s", strerror(errno));
		p += w;
		len -= (size_t)w;
	}
}

void svt_chan_read(int fd, void *buf, size_t len, int timeout_ms)
{
	char *p = buf;

	while (len) {
		int rc = wait_readable(fd, timeout_ms);

		if (rc)
			SVT_FAIL("pipe read: %s (%zu bytes missing)",
				 strerror(rc), len);
		ssize_t r = read(fd, p, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			SVT_FAIL("pipe read failed: %s", strerror(errno));
		if (r == 0)
			SVT_FAIL("pipe read: peer closed (%zu bytes missing)",
				 len);
		p += r;
		len -= (size_t)r;
	}
}

void svt_sync_send(int fd, char token)
{
	svt_chan_write(fd, &token, 1);
}

char svt_sync_recv(int fd, int timeout_ms)
{
	char t;

	svt_chan_read(fd, &t, 1, timeout_ms);
	return t;
}
