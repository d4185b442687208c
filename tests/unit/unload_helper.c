/*
 * unload_helper: the process side of unit_unload.  It is deliberately NOT
 * linked with libibverbs or librdmacm (only libdl): glibc unloads a library
 * at dlclose only when nothing else holds it, so a program that links
 * libibverbs could never show that the library's threads stop when its code
 * goes away.  Everything is reached through dlopen/dlsym; the data-path
 * verbs (ibv_post_send, ibv_poll_cq) are the header's inline functions,
 * which call through context->ops and need no symbol.
 *
 *   unload_helper verbs  LIBDIR N   N rounds of: dlopen LIBDIR/libibverbs.so.1,
 *                                   open the device, move data with an RDMA
 *                                   WRITE between two QPs, then (odd rounds)
 *                                   leave the device, QPs and a WRITE in flight
 *                                   as they are, or (even rounds) close them;
 *                                   dlclose.
 *   unload_helper rdmacm LIBDIR N   N rounds of: dlopen LIBDIR/librdmacm.so.1,
 *                                   start the CM thread (event channel, a
 *                                   listener on 127.0.0.1, an id that
 *                                   resolves address and route to it), then
 *                                   (odd rounds) leave the ids or (even
 *                                   rounds) destroy them; dlclose.
 *
 * After each dlclose: the library must really be gone (dlopen RTLD_NOLOAD
 * gives NULL, else the round proves nothing), the process must be back to
 * one thread, and it must go on running for 200 ms: a thread left in the
 * unmapped code would crash it there (SIGSEGV; the parent sees the signal).
 * After libibverbs' dlclose the SIGSEGV and SIGBUS handlers are the ones
 * from before it was loaded (its fault guard's handler went with it).
 * Exit status 0 when every round passed, 1 with a message otherwise.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#define BUF_LEN (256 * 1024)
#define BIG_LEN (4 * 1024 * 1024)

static int round_no;

/*
 * Sanitizer builds (SV_SANITIZE): the rounds that unload with the device
 * left open leak it by design (what the library held is unreachable once its
 * globals are unmapped); LeakSanitizer would fail the run at exit for that.
 */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return 1;
}

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "unload_helper: round %d: ", round_no);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
	exit(1);
}

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond))                                                   \
			die("%s:%d: check failed: %s", __FILE__, __LINE__, #cond); \
	} while (0)

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	CHECK(d != NULL);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

/*
 * The thread count once it has settled to `want`: a joined thread may stay
 * listed in /proc/self/task for a moment after pthread_join returned (the
 * kernel wakes the joiner before it releases the task).  Returns the count
 * seen last, after at most timeout_ms.
 */
static int threads_settle(int want, unsigned timeout_ms)
{
	uint64_t end = now_ms() + timeout_ms;
	int n;

	while ((n = count_threads()) != want && now_ms() < end)
		sleep_ms(5);
	return n;
}

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (!p)
		die("dlsym %s: %s", name, dlerror());
	return p;
}

static void lib_path(char *out, size_t len, const char *dir, const char *name)
{
	if ((size_t)snprintf(out, len, "%s/%s", dir, name) >= len)
		die("path too long");
}

/* The library at path must not be mapped any more. */
static void check_unloaded(const char *path)
{
	void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);

	if (h) {
		dlclose(h); /* NOLOAD took a reference: give it back */
		die("%s is still loaded after dlclose: the round proves nothing", path);
	}
}

/* The SIGSEGV/SIGBUS handlers the library installed (src/common/fault_guard.c)
 * went with it: the program's from before (the default action, or a
 * sanitizer's) are back, so a fault does not jump into unmapped code. */
static struct sigaction before_segv, before_bus;

static void save_fault_handlers(void)
{
	if (sigaction(SIGSEGV, NULL, &before_segv) || sigaction(SIGBUS, NULL, &before_bus))
		die("sigaction");
}

static void check_fault_handler(int sig, const struct sigaction *before)
{
	struct sigaction sa;

	if (sigaction(sig, NULL, &sa) ||
	    (sa.sa_flags & SA_SIGINFO) != (before->sa_flags & SA_SIGINFO) ||
	    ((sa.sa_flags & SA_SIGINFO) ? (void *)sa.sa_sigaction != (void *)before->sa_sigaction
					: sa.sa_handler != before->sa_handler))
		die("%s's handler after dlclose is not the one from before", strsignal(sig));
}

static void check_fault_handlers(void)
{
	check_fault_handler(SIGSEGV, &before_segv);
	check_fault_handler(SIGBUS, &before_bus);
}

/* After the last dlclose: one thread, and it stays alive for 200 ms. */
static void check_alone_and_alive(void)
{
	int n = threads_settle(1, 2000);

	if (n != 1)
		die("%d threads after dlclose, expected 1 (a library thread survived the unload)", n);
	sleep_ms(200); /* a surviving thread in unmapped code would crash us here */
	n = count_threads();
	if (n != 1)
		die("%d threads 200 ms after dlclose, expected 1", n);
}

/* ---- libibverbs ---- */

struct verbs_fns {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *,
				    int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*destroy_qp)(struct ibv_qp *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
};

static void verbs_resolve(void *h, struct verbs_fns *f)
{
	f->get_device_list = (struct ibv_device * *(*)(int *))sym(h, "ibv_get_device_list");
	f->free_device_list = (void (*)(struct ibv_device **))sym(h, "ibv_free_device_list");
	f->get_device_name = (const char *(*)(struct ibv_device *))sym(h, "ibv_get_device_name");
	f->open_device = (struct ibv_context * (*)(struct ibv_device *))sym(h, "ibv_open_device");
	f->close_device = (int (*)(struct ibv_context *))sym(h, "ibv_close_device");
	f->alloc_pd = (struct ibv_pd * (*)(struct ibv_context *))sym(h, "ibv_alloc_pd");
	f->dealloc_pd = (int (*)(struct ibv_pd *))sym(h, "ibv_dealloc_pd");
	f->reg_mr = (struct ibv_mr * (*)(struct ibv_pd *, void *, size_t, int))sym(h, "ibv_reg_mr");
	f->dereg_mr = (int (*)(struct ibv_mr *))sym(h, "ibv_dereg_mr");
	f->create_cq = (struct ibv_cq * (*)(struct ibv_context *, int, void *,
					    struct ibv_comp_channel *, int))sym(h, "ibv_create_cq");
	f->destroy_cq = (int (*)(struct ibv_cq *))sym(h, "ibv_destroy_cq");
	f->create_qp = (struct ibv_qp * (*)(struct ibv_pd *, struct ibv_qp_init_attr *))sym(
		h, "ibv_create_qp");
	f->destroy_qp = (int (*)(struct ibv_qp *))sym(h, "ibv_destroy_qp");
	f->modify_qp = (int (*)(struct ibv_qp *, struct ibv_qp_attr *, int))sym(h, "ibv_modify_qp");
	f->query_gid = (int (*)(struct ibv_context *, uint8_t, int, union ibv_gid *))sym(
		h, "ibv_query_gid");
}

/* RESET -> INIT -> RTR -> RTS towards dest_qpn at gid (an RC QP). */
static void rc_connect(const struct verbs_fns *f, struct ibv_qp *qp, const union ibv_gid *gid,
		       uint32_t dest_qpn)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	CHECK(f->modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0x100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(f->modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(f->modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

static int post_write(struct ibv_qp *qp, uint64_t wr_id, void *src, uint32_t len, uint32_t lkey,
		      void *dst, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)src, len, lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)dst;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad); /* inline: context->ops */
}

static void verbs_round(const char *dir, int leave_open)
{
	char path[4096];
	struct verbs_fns f;
	const char *want = getenv("SVT_DEVICE") ? getenv("SVT_DEVICE") : "sv_lo";
	struct ibv_device **list, *dev = NULL;
	union ibv_gid gid;

	lib_path(path, sizeof(path), dir, "libibverbs.so.1");
	check_unloaded(path); /* nothing of the previous round left */
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h)
		die("dlopen %s: %s", path, dlerror());
	/* softverbs' own private entry point: this is our libibverbs, not rdma-core's */
	sym(h, "softverbs_fs_view");
	verbs_resolve(h, &f);

	list = f.get_device_list(NULL);
	CHECK(list != NULL);
	for (int i = 0; list[i]; i++)
		if (!strcmp(f.get_device_name(list[i]), want))
			dev = list[i];
	if (!dev)
		die("device %s not found", want);
	struct ibv_context *ctx = f.open_device(dev);

	CHECK(ctx != NULL);
	/* the engine thread runs now; it is what the unload must stop */
	CHECK(count_threads() > 1);
	CHECK(f.query_gid(ctx, 1, 0, &gid) == 0);
	struct ibv_pd *pd = f.alloc_pd(ctx);

	CHECK(pd != NULL);
	/* src | dst | big source and target of the WRITEs left in flight */
	const size_t total = 2 * BUF_LEN + 2 * BIG_LEN;
	char *buf = aligned_alloc(4096, total);

	CHECK(buf != NULL);
	memset(buf, 0, total);
	char *src = buf, *dst = buf + BUF_LEN, *big = buf + 2 * BUF_LEN, *bigdst = big + BIG_LEN;
	struct ibv_mr *mr = f.reg_mr(pd, buf, total,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

	CHECK(mr != NULL);
	struct ibv_cq *cq = f.create_cq(ctx, 64, NULL, NULL, 0);

	CHECK(cq != NULL);
	struct ibv_qp_init_attr qia;

	memset(&qia, 0, sizeof(qia));
	qia.send_cq = cq;
	qia.recv_cq = cq;
	qia.qp_type = IBV_QPT_RC;
	qia.cap.max_send_wr = 32;
	qia.cap.max_recv_wr = 32;
	qia.cap.max_send_sge = 1;
	qia.cap.max_recv_sge = 1;
	struct ibv_qp *qa = f.create_qp(pd, &qia);
	struct ibv_qp *qb = f.create_qp(pd, &qia);

	CHECK(qa != NULL && qb != NULL);
	rc_connect(&f, qa, &gid, qb->qp_num);
	rc_connect(&f, qb, &gid, qa->qp_num);

	/* real data movement through the dlopened library before it goes */
	for (size_t i = 0; i < BUF_LEN; i++)
		src[i] = (char)(i * 7 + round_no);
	CHECK(post_write(qa, 1, src, BUF_LEN, mr->lkey, dst, mr->rkey) == 0);
	struct ibv_wc wc;
	uint64_t end = now_ms() + 5000;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && now_ms() < end)
		;
	CHECK(n == 1);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 1)
		die("WRITE completion: status %d wr_id %llu", (int)wc.status,
		    (unsigned long long)wc.wr_id);
	CHECK(memcmp(src, dst, BUF_LEN) == 0);

	if (leave_open) {
		/*
		 * As middleware that unloads without tearing down: the device,
		 * PD, MR, CQ and both QPs stay, with WRITEs still being moved.
		 */
		for (int i = 0; i < 4; i++)
			CHECK(post_write(qa, 10 + i, big, BIG_LEN, mr->lkey, bigdst, mr->rkey) == 0);
		f.free_device_list(list);
	} else {
		CHECK(f.destroy_qp(qa) == 0);
		CHECK(f.destroy_qp(qb) == 0);
		CHECK(f.destroy_cq(cq) == 0);
		CHECK(f.dereg_mr(mr) == 0);
		CHECK(f.dealloc_pd(pd) == 0);
		CHECK(f.close_device(ctx) == 0);
		f.free_device_list(list);
		n = threads_settle(1, 2000);
		if (n != 1)
			die("%d threads after ibv_close_device, expected 1", n);
	}
	if (dlclose(h))
		die("dlclose: %s", dlerror());
	check_unloaded(path);
	check_alone_and_alive();
	check_fault_handlers();
	/*
	 * Left open, the buffer is not freed: the library is gone and so is
	 * anything that could still write to it, but the test would learn
	 * nothing more from freeing it.
	 */
	if (!leave_open)
		free(buf);
}

/* ---- librdmacm ---- */

struct cm_fns {
	struct rdma_event_channel *(*create_event_channel)(void);
	void (*destroy_event_channel)(struct rdma_event_channel *);
	int (*create_id)(struct rdma_event_channel *, struct rdma_cm_id **, void *,
			 enum rdma_port_space);
	int (*destroy_id)(struct rdma_cm_id *);
	int (*bind_addr)(struct rdma_cm_id *, struct sockaddr *);
	int (*listen)(struct rdma_cm_id *, int);
	int (*resolve_addr)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *, int);
	int (*resolve_route)(struct rdma_cm_id *, int);
	int (*get_cm_event)(struct rdma_event_channel *, struct rdma_cm_event **);
	int (*ack_cm_event)(struct rdma_cm_event *);
	uint16_t (*get_src_port)(struct rdma_cm_id *);
};

static void cm_resolve(void *h, struct cm_fns *f)
{
	f->create_event_channel =
		(struct rdma_event_channel * (*)(void))sym(h, "rdma_create_event_channel");
	f->destroy_event_channel =
		(void (*)(struct rdma_event_channel *))sym(h, "rdma_destroy_event_channel");
	f->create_id = (int (*)(struct rdma_event_channel *, struct rdma_cm_id **, void *,
				enum rdma_port_space))sym(h, "rdma_create_id");
	f->destroy_id = (int (*)(struct rdma_cm_id *))sym(h, "rdma_destroy_id");
	f->bind_addr = (int (*)(struct rdma_cm_id *, struct sockaddr *))sym(h, "rdma_bind_addr");
	f->listen = (int (*)(struct rdma_cm_id *, int))sym(h, "rdma_listen");
	f->resolve_addr = (int (*)(struct rdma_cm_id *, struct sockaddr *, struct sockaddr *,
				   int))sym(h, "rdma_resolve_addr");
	f->resolve_route = (int (*)(struct rdma_cm_id *, int))sym(h, "rdma_resolve_route");
	f->get_cm_event = (int (*)(struct rdma_event_channel *, struct rdma_cm_event **))sym(
		h, "rdma_get_cm_event");
	f->ack_cm_event = (int (*)(struct rdma_cm_event *))sym(h, "rdma_ack_cm_event");
	f->get_src_port = (uint16_t(*)(struct rdma_cm_id *))sym(h, "rdma_get_src_port");
}

/* The next event on ch must be `type` (status 0) within 5 s; acked here. */
static void cm_expect(const struct cm_fns *f, struct rdma_event_channel *ch,
		      enum rdma_cm_event_type type)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, 5000) != 1)
		die("no rdma_cm event within 5 s (expected %d)", (int)type);
	CHECK(f->get_cm_event(ch, &ev) == 0);
	if (ev->event != type || ev->status != 0)
		die("rdma_cm event %d status %d, expected %d", (int)ev->event, ev->status,
		    (int)type);
	CHECK(f->ack_cm_event(ev) == 0);
}

static void rdmacm_round(const char *dir, int leave_open)
{
	char path[4096], vpath[4096];
	struct cm_fns f;
	struct rdma_cm_id *lid, *aid;
	struct sockaddr_in sin;

	lib_path(path, sizeof(path), dir, "librdmacm.so.1");
	lib_path(vpath, sizeof(vpath), dir, "libibverbs.so.1");
	check_unloaded(path);
	check_unloaded(vpath);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);

	if (!h)
		die("dlopen %s: %s", path, dlerror());
	/*
	 * librdmacm's libibverbs is the one from the same folder (its RUNPATH),
	 * not the host's: NOLOAD finds it by that path.
	 */
	void *vh = dlopen(vpath, RTLD_NOW | RTLD_NOLOAD);

	if (!vh)
		die("librdmacm did not load %s", vpath);
	sym(vh, "softverbs_fs_view");
	dlclose(vh);
	cm_resolve(h, &f);

	struct rdma_event_channel *ch = f.create_event_channel();

	CHECK(ch != NULL);
	CHECK(f.create_id(ch, &lid, NULL, RDMA_PS_TCP) == 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(f.bind_addr(lid, (struct sockaddr *)&sin) == 0);
	CHECK(lid->verbs == NULL); /* a loopback bind names no device, as on Linux */
	CHECK(f.listen(lid, 4) == 0);
	sin.sin_port = htons(f.get_src_port(lid));
	CHECK(sin.sin_port != 0);
	CHECK(f.create_id(ch, &aid, NULL, RDMA_PS_TCP) == 0);
	CHECK(f.resolve_addr(aid, NULL, (struct sockaddr *)&sin, 2000) == 0);
	cm_expect(&f, ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(f.resolve_route(aid, 2000) == 0);
	cm_expect(&f, ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK(aid->verbs != NULL); /* resolved through sv_lo: the device is open */
	/* the CM thread and the device's engine thread */
	CHECK(count_threads() >= 3);

	if (!leave_open) {
		CHECK(f.destroy_id(aid) == 0);
		CHECK(f.destroy_id(lid) == 0);
		f.destroy_event_channel(ch);
	}
	if (dlclose(h))
		die("dlclose: %s", dlerror());
	/* librdmacm, and libibverbs that only it held */
	check_unloaded(path);
	check_unloaded(vpath);
	check_alone_and_alive();
}

int main(int argc, char **argv)
{
	if (argc != 4)
		goto usage;
	int rounds = atoi(argv[3]);
	int n = count_threads();

	if (n != 1)
		die("%d threads at start, expected 1", n);
	save_fault_handlers();
	for (round_no = 1; round_no <= rounds; round_no++) {
		int leave_open = round_no % 2;

		if (!strcmp(argv[1], "verbs"))
			verbs_round(argv[2], leave_open);
		else if (!strcmp(argv[1], "rdmacm"))
			rdmacm_round(argv[2], leave_open);
		else
			goto usage;
		fprintf(stderr, "unload_helper: %s round %d (%s): unloaded, 1 thread, alive\n",
			argv[1], round_no, leave_open ? "left open" : "closed");
	}
	return 0;
usage:
	fprintf(stderr, "usage: unload_helper verbs|rdmacm LIBDIR ROUNDS\n");
	return 2;
}
