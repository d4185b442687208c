/*
 * unit_shm: what the shm transport (src/transport/shm.c) promises beyond
 * "bytes arrive", checked from outside through /proc and the verbs API.
 * Every scenario also runs as unit_shm.tcp and unit_shm.rocev2
 * (SOFTVERBS_TRANSPORT=tcp, rocev2): there the traffic is the same and the
 * checks about shm objects turn into "there are none".
 *   1. Private objects: after a 1 MiB WRITE and SEND between two contexts,
 *      the rings are a memfd "softverbs-shm" mapped shared, not inherited by
 *      fork (MADV_DONTFORK: VmFlags "dc"), mode 0600, with no fd left open,
 *      nothing in /dev/shm; closing the contexts unmaps them.
 *   2. SIGKILL: a child exchanging SEND/WRITE with us is killed while 1 MiB
 *      WRITEs flow both ways: every WR we posted completes within a bound,
 *      successes first, then RETRY_EXC_ERR, then WR_FLUSH_ERR (receives
 *      too); the rings are unmapped once the QP is gone, and a new pair
 *      works afterwards.
 *   3. Single copy refused: two processes under a seccomp filter that makes
 *      process_vm_readv/writev fail with EPERM (and two contexts of one such
 *      process), or with SOFTVERBS_SHM_CMA=0, exchange 1 MiB SEND (16 SGEs
 *      each side), WRITE and READ both ways, every byte checked, and the
 *      library logged that it could not read the peer (never "allowed").
 *   4. Atomics across processes: two children and a second context of ours
 *      FETCH_AND_ADD 1 and then CAS-increment one word of ours concurrently;
 *      the final value is exact and the old values returned are all
 *      distinct (no lost or doubled update), every completion a success.
 *   5. First requests at once: between two fresh contexts, six threads
 *      post the first WRITE of six QP pairs together (a barrier); all land,
 *      and they made one connection (two mappings of one ring area, ours
 *      and the peer context's), not one per thread that found none.  Ten
 *      rounds.
 * Where seccomp filters cannot be installed, the seccomp part of 3 is left
 * out and the test ends as skipped (77) once everything else has passed.
 */
#include "sv_test.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#define KiB 1024u
#define MiB (1024u * 1024u)
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* What the memfd is called in /proc (see shm_connect). */
#define SHM_MEMFD "/memfd:softverbs-shm"

/* SOFTVERBS_TRANSPORT=tcp or rocev2: no shm objects may exist at all. */
static bool without_shm;

/* Scenario 3 found no seccomp: reported as a skip once all else passed. */
static const char *seccomp_missing;

/* ------------------------------------------------------------------------- */
/* Looking at shm objects from outside                                        */
/* ------------------------------------------------------------------------- */

struct shm_map {
	unsigned long start, end;
	char perms[8];
	char path[256];
};

/* Count the mappings of our memfd in /proc/self/maps; the first in *first. */
static int shm_maps(struct shm_map *first)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	SVT_CHECK_PTR(f);
	while (fgets(line, sizeof(line), f)) {
		struct shm_map m;
		int path_at = 0;

		if (!strstr(line, SHM_MEMFD))
			continue;
		memset(&m, 0, sizeof(m));
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &m.start, &m.end,
			   m.perms, &path_at) < 3)
			SVT_FAIL("cannot parse maps line: %s", line);
		snprintf(m.path, sizeof(m.path), "%s", line + path_at);
		m.path[strcspn(m.path, "\n")] = 0;
		if (n++ == 0 && first)
			*first = m;
	}
	fclose(f);
	return n;
}

/* Wait up to ms for our memfd mappings to go (they are dropped by the
 * engine thread, possibly a moment after the verb that let them go). */
static int shm_maps_gone(unsigned int ms)
{
	uint64_t deadline = svt_now_ms() + ms;
	int n;

	while ((n = shm_maps(NULL)) && svt_now_ms() < deadline)
		svt_sleep_ms(5);
	return n;
}

/* Does the smaps entry starting at `start` carry VmFlags token `flag`? */
static bool smaps_flag(unsigned long start, const char *flag)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool in = false, found = false;

	SVT_CHECK_PTR(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long s, e;

		if (sscanf(line, "%lx-%lx ", &s, &e) == 2) {
			in = s == start;
			continue;
		}
		if (in && !strncmp(line, "VmFlags:", 8)) {
			for (char *t = strtok(line + 8, " \n"); t; t = strtok(NULL, " \n"))
				found |= !strcmp(t, flag);
			break;
		}
	}
	fclose(f);
	return found;
}

/* How many of our fds still name the memfd (it must be closed once mapped). */
static int shm_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	SVT_CHECK_PTR(d);
	while ((de = readdir(d))) {
		char p[300], target[256];
		ssize_t l;

		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
		l = readlink(p, target, sizeof(target) - 1);
		if (l <= 0)
			continue;
		target[l] = 0;
		if (strstr(target, SHM_MEMFD))
			n++;
	}
	closedir(d);
	return n;
}

/* The names in /dev/shm, to show nothing was created there. */
struct names {
	char **v;
	size_t n;
};

static void dev_shm_list(struct names *l)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *de;

	l->v = NULL;
	l->n = 0;
	if (!d) {
		SVT_CHECK_MSG(errno == ENOENT, "opendir /dev/shm: %s", strerror(errno));
		return; /* no /dev/shm here: nothing can appear in it either */
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		/* the host's QPN registries (one per user, namespace and device
		 * address) are meant to stay: they are not the shm transport's */
		if (!strncmp(de->d_name, "softverbs-", 10) &&
		    strlen(de->d_name) > 4 && !strcmp(de->d_name + strlen(de->d_name) - 4, ".qpn"))
			continue;
		l->v = realloc(l->v, (l->n + 1) * sizeof(*l->v));
		SVT_CHECK_PTR(l->v);
		l->v[l->n] = strdup(de->d_name);
		SVT_CHECK_PTR(l->v[l->n]);
		l->n++;
	}
	closedir(d);
}

static void names_free(struct names *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static struct names dev_shm_before;

/* Fail naming any /dev/shm entry that was not there when the test began. */
static void check_dev_shm_unchanged(const char *when)
{
	struct names now;

	dev_shm_list(&now);
	for (size_t i = 0; i < now.n; i++) {
		bool old = false;

		for (size_t j = 0; j < dev_shm_before.n && !old; j++)
			old = !strcmp(now.v[i], dev_shm_before.v[j]);
		SVT_CHECK_MSG(old, "%s: new entry /dev/shm/%s", when, now.v[i]);
	}
	names_free(&now);
}

/* ------------------------------------------------------------------------- */
/* Traffic shared by the scenarios                                            */
/* ------------------------------------------------------------------------- */

/* 1 MiB WRITE then 1 MiB SEND a -> b on a pair with >= 2 MiB buffers. */
static void pair_traffic(struct svt_pair *p, uint32_t seed)
{
	char *a = p->a.buf, *b = p->b.buf;
	struct ibv_wc wc[2];

	svt_fill(a, MiB, seed);
	svt_fill(a + MiB, MiB, seed + 1);
	memset(b, 0, 2 * MiB);
	SVT_CHECK_OK(svt_post_recv(p->b.qp, 7, b + MiB, MiB, p->b.mr->lkey));
	SVT_CHECK_OK(svt_post_send(p->a.qp, 1, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, a, MiB,
				   p->a.mr->lkey, (uintptr_t)b, p->b.mr->rkey, 0));
	SVT_CHECK_OK(svt_post_send(p->a.qp, 2, IBV_WR_SEND, IBV_SEND_SIGNALED, a + MiB, MiB,
				   p->a.mr->lkey, 0, 0, 0));
	svt_poll_ok(p->a.send_cq, 2, wc, 10000);
	SVT_CHECK_EQ(wc[0].wr_id, 1);
	SVT_CHECK_EQ(wc[1].wr_id, 2);
	svt_poll_ok(p->b.recv_cq, 1, wc, 10000);
	SVT_CHECK_EQ(wc[0].wr_id, 7);
	SVT_CHECK_EQ(wc[0].byte_len, MiB);
	/* the SEND completed after the WRITE on one RC QP: both are placed */
	SVT_CHECK_FILL(b, MiB, seed);
	SVT_CHECK_FILL(b + MiB, MiB, seed + 1);
}

static struct svt_pair *pair_big(struct svt_pair *p)
{
	struct svt_pair_opts o;

	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = 2 * MiB;
	svt_pair_create(p, IBV_QPT_RC, &o);
	return p;
}

/* One process's RC endpoint in the scenarios with more than one process. */
struct ep {
	struct svt_dev d;
	struct ibv_cq *scq, *rcq; /* the same CQ unless opened separate */
	struct ibv_qp *qp;        /* NULL once the caller destroyed it */
	char *buf;
	size_t len;
	struct ibv_mr *mr;
};

/* qi NULL: svt_qp_init_default for RC. */
static void ep_open(struct ep *e, size_t len, unsigned int access, bool separate_cqs,
		    const struct svt_qp_init *qi)
{
	struct svt_qp_init def;

	if (!qi) {
		svt_qp_init_default(&def, IBV_QPT_RC);
		qi = &def;
	}
	svt_dev_open(&e->d);
	e->scq = svt_create_cq(e->d.ctx, 64, NULL);
	e->rcq = separate_cqs ? svt_create_cq(e->d.ctx, 64, NULL) : e->scq;
	e->qp = svt_create_qp(e->d.pd, e->scq, e->rcq, qi);
	e->len = len;
	e->buf = svt_alloc(len);
	e->mr = svt_reg_mr(e->d.pd, e->buf, len, access);
}

/* What the other side needs to connect to us and reach our buffer. */
static struct svt_peer_info ep_info(const struct ep *e)
{
	struct svt_peer_info i;

	memset(&i, 0, sizeof(i));
	i.gid = e->d.gid;
	i.qpn = e->qp->qp_num;
	i.addr = (uintptr_t)e->buf;
	i.rkey = e->mr->rkey;
	i.len = (uint32_t)e->len;
	return i;
}

static void ep_close(struct ep *e)
{
	if (e->qp)
		SVT_CHECK_OK(ibv_destroy_qp(e->qp));
	SVT_CHECK_OK(ibv_dereg_mr(e->mr));
	if (e->rcq != e->scq)
		SVT_CHECK_OK(ibv_destroy_cq(e->rcq));
	SVT_CHECK_OK(ibv_destroy_cq(e->scq));
	free(e->buf);
	svt_dev_close(&e->d);
}

/* ------------------------------------------------------------------------- */
/* 1. Private objects                                                         */
/* ------------------------------------------------------------------------- */

static void test_private_objects(void)
{
	struct svt_pair p;
	struct shm_map m;
	int n;

	SVT_CHECK_EQ(shm_maps(NULL), 0);
	pair_traffic(pair_big(&p), 11);

	n = shm_maps(&m);
	if (without_shm) {
		SVT_CHECK_EQ(n, 0);
		SVT_CHECK_EQ(shm_fds(), 0);
	} else {
		char mf[96];
		struct stat st;

		svt_log("%d mapping(s) of the rings, first %lx-%lx %s %s", n, m.start, m.end,
			m.perms, m.path);
		SVT_CHECK_MSG(n >= 1, "no %s mapping after shm traffic", SHM_MEMFD);
		/* unnamed: the only name is the memfd's, already unlinked */
		SVT_CHECK_MSG(!strcmp(m.path, SHM_MEMFD " (deleted)"), "mapping path \"%s\"",
			      m.path);
		/* MAP_SHARED (else the peer would never see our writes) */
		SVT_CHECK_MSG(m.perms[3] == 's', "perms %s: not a shared mapping", m.perms);
		/* MADV_DONTFORK: a forked child must not share the rings */
		SVT_CHECK_MSG(smaps_flag(m.start, "dc"), "rings mapping lacks VmFlags dc");
		/* no fd left open: the mapping alone keeps the memfd alive */
		SVT_CHECK_EQ(shm_fds(), 0);
		/* the inode behind the mapping is private to our uid */
		snprintf(mf, sizeof(mf), "/proc/self/map_files/%lx-%lx", m.start, m.end);
		if (stat(mf, &st) == 0) {
			SVT_CHECK_MSG(S_ISREG(st.st_mode), "%s: mode %o", mf, st.st_mode);
			SVT_CHECK_MSG((st.st_mode & 07777) == 0600, "%s: mode %04o, expected 0600",
				      mf, st.st_mode & 07777);
			SVT_CHECK_EQ(st.st_uid, getuid());
		} else if (errno == EPERM || errno == EACCES) {
			svt_log("stat %s: %s: mode check skipped", mf, strerror(errno));
		} else {
			SVT_FAIL("stat %s: %s", mf, strerror(errno));
		}
	}
	check_dev_shm_unchanged("after shm traffic");

	svt_pair_destroy(&p);
	/* both contexts closed: nothing of the transport may stay mapped */
	SVT_CHECK_EQ(shm_maps(NULL), 0);
	SVT_CHECK_EQ(shm_fds(), 0);
	check_dev_shm_unchanged("after closing the pair");
}

/* ------------------------------------------------------------------------- */
/* 2. SIGKILL of the peer in mid-stream                                       */
/* ------------------------------------------------------------------------- */

/*
 * timeout 15 = 134 ms per try, retry_cnt 2: a dead peer gives RETRY_EXC_ERR
 * within about half a second, while a busy 2-core machine under ASan is far
 * from 3 x 134 ms without any ACK in live traffic.
 */
static void kill_conn(struct svt_conn *c)
{
	svt_conn_default(c, IBV_QPT_RC);
	c->timeout = 15;
	c->retry_cnt = 2;
}

/* Buffer layout of both sides of scenario 2 (3 MiB each). */
#define K_RECV 0                 /* 64 KiB: the other's SEND */
#define K_WTGT (64 * KiB)        /* 64 KiB: the other's WRITE */
#define K_SSRC (128 * KiB)       /* 64 KiB: our SEND source */
#define K_WSRC (192 * KiB)       /* 64 KiB: our WRITE source */
#define K_STGT (1 * MiB)         /* 1 MiB: the other's streaming WRITEs */
#define K_STSRC (2 * MiB)        /* 1 MiB: our streaming WRITEs' source */
#define K_LEN (3 * MiB)
#define K_SMALL (64 * KiB)
#define K_KILLED_WRITES 8
#define K_LATE_WRITES 2
#define K_RECVS 4

/* SIGALRM while ibv_close_device runs (test_sigkill). */
static void close_hung(int sig)
{
	static const char msg[] = "FAIL: ibv_close_device hung for 8 s after the RC peer was "
				  "SIGKILLed\n";
	ssize_t r = write(STDERR_FILENO, msg, sizeof(msg) - 1);

	(void)r;
	(void)sig;
	signal(SIGABRT, SIG_DFL);
	abort();
}

/* 64 KiB SEND and 64 KiB WRITE to the other side, both completed. */
static void send_small(struct ep *e, const struct svt_peer_info *peer, uint32_t seed)
{
	struct ibv_wc wc[2];

	svt_fill(e->buf + K_SSRC, K_SMALL, seed);
	svt_fill(e->buf + K_WSRC, K_SMALL, seed + 1);
	SVT_CHECK_OK(svt_post_send(e->qp, 1, IBV_WR_SEND, IBV_SEND_SIGNALED, e->buf + K_SSRC,
				   K_SMALL, e->mr->lkey, 0, 0, 0));
	SVT_CHECK_OK(svt_post_send(e->qp, 2, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
				   e->buf + K_WSRC, K_SMALL, e->mr->lkey, peer->addr + K_WTGT,
				   peer->rkey, 0));
	svt_poll_ok(e->scq, 2, wc, 10000);
}

/* What send_small(seed) put here, once the other side saw it complete. */
static void check_small(struct ep *e, uint32_t seed)
{
	struct ibv_wc wc;

	svt_poll_ok(e->rcq, 1, &wc, 10000);
	SVT_CHECK_EQ(wc.wr_id, 50);
	SVT_CHECK_EQ(wc.byte_len, K_SMALL);
	SVT_CHECK_FILL(e->buf + K_RECV, K_SMALL, seed);
	SVT_CHECK_FILL(e->buf + K_WTGT, K_SMALL, seed + 1);
}

/* Connect with kill_conn's timers; post the receive for send_small. */
static void ep_connect_small(struct ep *e, const struct svt_peer_info *peer)
{
	struct svt_conn cn;

	kill_conn(&cn);
	svt_qp_connect(e->qp, &cn, &peer->gid, peer->qpn);
	SVT_CHECK_OK(svt_post_recv(e->qp, 50, e->buf + K_RECV, K_SMALL, e->mr->lkey));
}

static int victim(int rfd, int wfd, int argc, char **argv)
{
	struct ep e;
	struct svt_peer_info me, peer;
	struct ibv_wc wc;

	(void)argc;
	(void)argv;
	svt_watchdog(30); /* the parent should have killed us long before */
	ep_open(&e, K_LEN, SVT_ACCESS_ALL, true, NULL);
	me = ep_info(&e);
	svt_send_info(wfd, &me);
	svt_recv_info(rfd, &peer);
	ep_connect_small(&e, &peer);
	svt_sync_send(wfd, 'R');

	/* parent -> us, then us -> parent */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 10000), 'W');
	check_small(&e, 201);
	send_small(&e, &peer, 203);
	svt_sync_send(wfd, 'D');

	/* Stream 1 MiB WRITEs into the parent, 4 in flight, until killed: the
	 * parent then has payloads of ours in its ring when we die. */
	svt_fill(e.buf + K_STSRC, MiB, 205);
	uint64_t posted = 0, done = 0, deadline = svt_now_ms() + 20000;

	while (svt_now_ms() < deadline) {
		while (posted - done < 4) {
			SVT_CHECK_OK(svt_post_send(e.qp, 100 + posted, IBV_WR_RDMA_WRITE,
						   IBV_SEND_SIGNALED, e.buf + K_STSRC, MiB,
						   e.mr->lkey, peer.addr + K_STGT, peer.rkey, 0));
			posted++;
		}
		svt_poll_ok(e.scq, 1, &wc, 10000);
		if (++done == 2)
			svt_sync_send(wfd, 'S');
	}
	return 2; /* never killed: the parent will say why */
}

static void test_sigkill(void)
{
	struct svt_child c;
	struct ep e;
	struct svt_peer_info me, peer;
	struct ibv_wc wc[K_KILLED_WRITES + K_LATE_WRITES];
	const int nw = K_KILLED_WRITES + K_LATE_WRITES;

	svt_spawn(&c, "victim", NULL);
	ep_open(&e, K_LEN, SVT_ACCESS_ALL, true, NULL);
	svt_recv_info(c.rfd, &peer);
	me = ep_info(&e);
	svt_send_info(c.wfd, &me);
	ep_connect_small(&e, &peer);
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 10000), 'R');

	/* Both ways while the child lives, 64 KiB each (indirect over shm). */
	send_small(&e, &peer, 201);
	svt_sync_send(c.wfd, 'W');
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 10000), 'D');
	check_small(&e, 203);

	/* Receives the dead child will never consume: they must be flushed. */
	for (int i = 0; i < K_RECVS; i++)
		SVT_CHECK_OK(svt_post_recv(e.qp, 60 + i, e.buf + K_RECV, K_SMALL, e.mr->lkey));

	/* Kill it while both directions carry 1 MiB WRITEs. */
	SVT_CHECK_EQ(svt_sync_recv(c.rfd, 10000), 'S');
	svt_fill(e.buf + K_STSRC, MiB, 206);
	for (int i = 0; i < K_KILLED_WRITES; i++)
		SVT_CHECK_OK(svt_post_send(e.qp, 10 + i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED,
					   e.buf + K_STSRC, MiB, e.mr->lkey, peer.addr + K_STGT,
					   peer.rkey, 0));
	svt_child_kill(&c, SIGKILL);
	uint64_t t0 = svt_now_ms();

	SVT_CHECK_EQ(svt_child_wait(&c, 5000), 128 + SIGKILL);
	/* Posted once the peer is surely gone: these cannot succeed, so an
	 * error is seen even if all of the above had completed before. */
	for (int i = 0; i < K_LATE_WRITES; i++)
		SVT_CHECK_OK(svt_post_send(e.qp, 10 + K_KILLED_WRITES + i, IBV_WR_RDMA_WRITE,
					   IBV_SEND_SIGNALED, e.buf + K_STSRC, MiB, e.mr->lkey,
					   peer.addr + K_STGT, peer.rkey, 0));

	/* Every WR completes, in order: successes, RETRY_EXC_ERR, flushes. */
	svt_poll_n(e.scq, nw, wc, 8000);
	uint64_t took = svt_now_ms() - t0;
	int first_err = -1;

	for (int i = 0; i < nw; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, 10 + i);
		if (first_err < 0 && wc[i].status != IBV_WC_SUCCESS)
			first_err = i;
		if (first_err < 0)
			continue;
		SVT_CHECK_WC_STATUS(wc[i], i == first_err ? IBV_WC_RETRY_EXC_ERR
							  : IBV_WC_WR_FLUSH_ERR);
	}
	SVT_CHECK_GE(first_err, 0);
	SVT_CHECK_LE(first_err, K_KILLED_WRITES);
	svt_log("SIGKILL: %d of %d WRITEs completed before the error, all %d in %llu ms",
		first_err, K_KILLED_WRITES, nw, (unsigned long long)took);
	/* 3 tries of 134 ms, plus slack for a loaded machine */
	SVT_CHECK_LT(took, 4000);
	svt_poll_n(e.rcq, K_RECVS, wc, 2000);
	for (int i = 0; i < K_RECVS; i++) {
		SVT_CHECK_EQ(wc[i].wr_id, 60 + i);
		SVT_CHECK_WC_STATUS(wc[i], IBV_WC_WR_FLUSH_ERR);
	}
	SVT_CHECK_EQ(svt_qp_state(e.qp), IBV_QPS_ERR);
	svt_expect_no_wc(e.scq, 50);
	svt_expect_no_wc(e.rcq, 0);

	SVT_CHECK_OK(ibv_destroy_qp(e.qp));
	e.qp = NULL;
	/* The device stays open: the connections to the dead child, both the
	 * one we opened and the one it opened to us, must be gone with the QP,
	 * not linger until the context closes. */
	/* (5 s: a killed process under AddressSanitizer, on a loaded 2-core
	 * machine, can take seconds to be gone and close its sockets) */
	int left = shm_maps_gone(5000);

	SVT_CHECK_MSG(left == 0, "%d %s mapping(s) left 5 s after the QP to a killed peer "
		      "was destroyed", left, SHM_MEMFD);
	SVT_CHECK_EQ(shm_fds(), 0);
	/*
	 * Closing must not hang.  It once did over tcp: a reconnect to the dead
	 * peer that the engine thread failed before conn_register had linked it
	 * stayed on eng->conns, and sv_engine_stop spun on it.  Bounded here so
	 * such a failure names itself instead of waiting for the watchdog.
	 */
	signal(SIGALRM, close_hung);
	alarm(8);
	ep_close(&e);
	svt_watchdog(40); /* back to the test-wide watchdog */
	check_dev_shm_unchanged("after SIGKILL of the peer");

	/* Life goes on: a new pair in this process works. */
	struct svt_pair p;

	pair_traffic(pair_big(&p), 21);
	SVT_CHECK(without_shm ? shm_maps(NULL) == 0 : shm_maps(NULL) >= 1);
	svt_pair_destroy(&p);
	SVT_CHECK_EQ(shm_maps(NULL), 0);
}

/* ------------------------------------------------------------------------- */
/* 3. Single copy refused (seccomp) or disabled (SOFTVERBS_SHM_CMA=0)         */
/* ------------------------------------------------------------------------- */

#if defined(__x86_64__)
#define SVT_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SVT_AUDIT_ARCH AUDIT_ARCH_AARCH64
#elif defined(__i386__)
#define SVT_AUDIT_ARCH AUDIT_ARCH_I386
#endif

/*
 * Make process_vm_readv and process_vm_writev fail with EPERM in this
 * process and its descendants, as a container's seccomp profile may.
 * Returns 0, or an errno value with *why set when seccomp is unavailable.
 */
static int deny_cma(const char **why)
{
#ifdef SVT_AUDIT_ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SVT_AUDIT_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
	};
	struct sock_fprog prog = { .len = (unsigned short)ARRAY_LEN(f), .filter = f };
	int rc;

	/* unprivileged filters need no_new_privs */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
		*why = "prctl(PR_SET_NO_NEW_PRIVS) failed";
		return errno;
	}
	rc = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
	if (rc && errno == ENOSYS) /* kernels before seccomp(2) */
		rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
	if (rc) {
		*why = "seccomp filter not accepted (no CONFIG_SECCOMP_FILTER, or a "
		       "sandbox forbids it)";
		return errno;
	}
	return 0;
#else
	*why = "no audit arch known for this CPU";
	return ENOSYS;
#endif
}

/* process_vm_readv on pid, expected to fail with EPERM under the filter. */
static void check_cma_denied(pid_t pid)
{
	uint64_t src = 42, dst = 0;
	struct iovec l = { &dst, sizeof(dst) }, r = { &src, sizeof(src) };
	ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);

	SVT_CHECK_MSG(n < 0 && errno == EPERM,
		      "process_vm_readv(%d) under the filter: %zd (%s), expected EPERM", (int)pid,
		      n, n < 0 ? strerror(errno) : "success");
}

/*
 * Fork (no exec, no verbs: only system calls) to see whether a seccomp
 * filter can be installed here at all and does what we want.  Returns NULL
 * if so, else why not.  Called before any device is opened.
 */
static const char *probe_seccomp(void)
{
	int status;
	pid_t pid = fork();

	SVT_CHECK(pid >= 0);
	if (pid == 0) {
		const char *why = NULL;
		uint64_t src = 1, dst = 0;
		struct iovec l = { &dst, sizeof(dst) }, r = { &src, sizeof(src) };

		if (deny_cma(&why))
			_exit(77);
		_exit(process_vm_readv(getpid(), &l, 1, &r, 1, 0) < 0 && errno == EPERM ? 0 : 1);
	}
	SVT_CHECK_EQ(waitpid(pid, &status, 0), pid);
	SVT_CHECK(WIFEXITED(status));
	if (WEXITSTATUS(status) == 77)
		return "scenario 3 without its seccomp part (all else passed): seccomp filters "
		       "are not available here (EINVAL/ENOSYS/EPERM: a kernel without "
		       "CONFIG_SECCOMP_FILTER, or a container that forbids them)";
	SVT_CHECK_MSG(WEXITSTATUS(status) == 0,
		      "a seccomp filter returning EPERM for process_vm_readv did not work");
	return NULL;
}

/*
 * The library's debug log ("shm: single-copy reads from pid N allowed" /
 * "shm: cannot read pid N's memory") is the one place that says which way
 * the payloads went.  Tap it by replacing stderr with a stream that copies
 * every write to fd 2 at once (so nothing is lost when a check fails) and
 * counts those lines.  Swapped only while no engine thread exists.
 */
static struct {
	FILE *saved, *f;
	char line[1024];
	size_t len;
	int allowed, refused;
} tap;

static void tap_line(void)
{
	tap.line[tap.len] = 0;
	if (strstr(tap.line, "shm: single-copy reads from pid"))
		tap.allowed++;
	if (strstr(tap.line, "shm: cannot read pid"))
		tap.refused++;
	tap.len = 0;
}

static ssize_t tap_write(void *cookie, const char *buf, size_t n)
{
	size_t off = 0;

	(void)cookie;
	while (off < n) {
		ssize_t w = write(STDERR_FILENO, buf + off, n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	for (size_t i = 0; i < n; i++) {
		if (buf[i] == '\n')
			tap_line();
		else if (tap.len < sizeof(tap.line) - 1)
			tap.line[tap.len++] = buf[i];
	}
	return (ssize_t)n;
}

static void tap_begin(void)
{
	cookie_io_functions_t io = { .write = tap_write };

	SVT_CHECK_OK(setenv("SOFTVERBS_LOG", "debug", 1));
	memset(&tap, 0, sizeof(tap));
	tap.f = fopencookie(NULL, "w", io);
	SVT_CHECK_PTR(tap.f);
	setvbuf(tap.f, NULL, _IONBF, 0);
	tap.saved = stderr;
	stderr = tap.f;
}

static void tap_end(void)
{
	fflush(stderr);
	stderr = tap.saved;
	if (tap.len)
		tap_line();
	fclose(tap.f);
	tap.f = NULL;
}

/* What the log must say, by transport and mode. */
static void tap_check(const char *mode, const char *where)
{
	bool seccomp = !strcmp(mode, "seccomp");

	svt_log("%s, %s: the log said %d times \"allowed\", %d times \"cannot read\"", mode,
		where, tap.allowed, tap.refused);
	/* single copy must never be switched on */
	SVT_CHECK_EQ(tap.allowed, 0);
	if (without_shm || !seccomp)
		/* no shm at all, or SHM_CMA=0: the self-test does not even run */
		SVT_CHECK_EQ(tap.refused, 0);
	else
		SVT_CHECK_GE(tap.refused, 1);
}

/* Applied in a child before it opens a device. */
static void nocma_setup(const char *mode)
{
	if (!strcmp(mode, "seccomp")) {
		const char *why = NULL;
		int e = deny_cma(&why);

		SVT_CHECK_MSG(e == 0, "%s: %s (the probe said it works)", why, strerror(e));
		check_cma_denied(getpid());
	} else {
		SVT_CHECK(!strcmp(mode, "cma0"));
		SVT_CHECK_OK(setenv("SOFTVERBS_SHM_CMA", "0", 1));
	}
	tap_begin();
}

/* Per side, 5 regions of 1 MiB. */
enum { B_SRC, B_RECV, B_WTGT, B_RSRC, B_RDST, B_NREG };
#define B_LEN ((size_t)B_NREG * MiB)
#define B_SGES 16

struct bulk {
	struct ibv_qp *qp;
	struct ibv_cq *cq; /* send and receive */
	char *base;
	uint32_t lkey;
	uint64_t raddr; /* the peer's base */
	uint32_t rkey;
	uint32_t seed, peer_seed;
};

static char *reg(const struct bulk *b, int r)
{
	return b->base + (size_t)r * MiB;
}

/* Fill our sources and post the receive (16 uneven SGEs, 1 MiB in all). */
static void bulk_prepare(struct bulk *b)
{
	struct ibv_sge sg[B_SGES];
	struct ibv_recv_wr wr, *bad;
	size_t off = 0;

	svt_fill(reg(b, B_SRC), MiB, b->seed);
	svt_fill(reg(b, B_RSRC), MiB, b->seed + 1);
	memset(reg(b, B_RECV), 0, MiB);
	memset(reg(b, B_WTGT), 0, MiB);
	memset(reg(b, B_RDST), 0, MiB);
	for (int i = 0; i < B_SGES; i++) {
		/* pieces neither MTU- nor page-sized, so packets straddle them */
		uint32_t len = i < B_SGES - 1 ? 4096u * (uint32_t)i + 1000u + 7u * (uint32_t)i
					      : (uint32_t)(MiB - off);

		sg[i] = (struct ibv_sge){ (uintptr_t)reg(b, B_RECV) + off, len, b->lkey };
		off += len;
	}
	SVT_CHECK_EQ(off, MiB);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 100;
	wr.sg_list = sg;
	wr.num_sge = B_SGES;
	SVT_CHECK_OK(ibv_post_recv(b->qp, &wr, &bad));
}

/* Entry i of a chain of signaled WRs; raddr is a region of the peer's. */
static void chain_wr(struct ibv_send_wr *wr, int i, enum ibv_wr_opcode op, struct ibv_sge *sg,
		     int nsge, const struct bulk *b, int raddr)
{
	wr[i].wr_id = (uint64_t)i + 1;
	wr[i].sg_list = sg;
	wr[i].num_sge = nsge;
	wr[i].opcode = op;
	wr[i].send_flags = IBV_SEND_SIGNALED;
	wr[i].wr.rdma.remote_addr = b->raddr + (uint64_t)raddr * MiB;
	wr[i].wr.rdma.rkey = b->rkey;
	if (i)
		wr[i - 1].next = &wr[i];
}

/* SEND 1 MiB gathered from 16 SGEs, WRITE 1 MiB, READ 1 MiB: one chain. */
static void bulk_post(struct bulk *b)
{
	struct ibv_sge ss[B_SGES], ws, rs;
	struct ibv_send_wr wr[3], *bad;

	for (int i = 0; i < B_SGES; i++)
		ss[i] = (struct ibv_sge){ (uintptr_t)reg(b, B_SRC) + (size_t)i * (MiB / B_SGES),
					  MiB / B_SGES, b->lkey };
	ws = (struct ibv_sge){ (uintptr_t)reg(b, B_SRC), MiB, b->lkey };
	rs = (struct ibv_sge){ (uintptr_t)reg(b, B_RDST), MiB, b->lkey };
	memset(wr, 0, sizeof(wr));
	chain_wr(wr, 0, IBV_WR_SEND, ss, B_SGES, b, 0);
	chain_wr(wr, 1, IBV_WR_RDMA_WRITE, &ws, 1, b, B_WTGT);
	chain_wr(wr, 2, IBV_WR_RDMA_READ, &rs, 1, b, B_RSRC);
	SVT_CHECK_OK(ibv_post_send(b->qp, wr, &bad));
}

/* Our three sends and the peer's SEND complete; what we received is right. */
static void bulk_complete(struct bulk *b)
{
	struct ibv_wc wc[4];
	uint64_t next = 1;
	int recvs = 0;

	svt_poll_ok(b->cq, 4, wc, 15000);
	for (int i = 0; i < 4; i++) {
		if (wc[i].opcode == IBV_WC_RECV) {
			SVT_CHECK_EQ(wc[i].wr_id, 100);
			SVT_CHECK_EQ(wc[i].byte_len, MiB);
			recvs++;
			continue;
		}
		SVT_CHECK_EQ(wc[i].wr_id, next); /* in posting order */
		next++;
	}
	SVT_CHECK_EQ(recvs, 1);
	SVT_CHECK_FILL(reg(b, B_RECV), MiB, b->peer_seed);
	SVT_CHECK_FILL(reg(b, B_RDST), MiB, b->peer_seed + 1);
}

/* Once the peer's WRITE has completed over there. */
static void bulk_check_written(struct bulk *b)
{
	SVT_CHECK_FILL(reg(b, B_WTGT), MiB, b->peer_seed);
}

static void bulk_qp_init(struct svt_qp_init *qi)
{
	svt_qp_init_default(qi, IBV_QPT_RC);
	qi->cap.max_send_sge = B_SGES;
	qi->cap.max_recv_sge = B_SGES;
}

/* One of two sibling processes; the test process relays between them. */
static int nocma_peer(int rfd, int wfd, int argc, char **argv)
{
	struct ep e;
	struct svt_peer_info me, peer;
	struct svt_qp_init qi;
	struct bulk b;
	pid_t peer_pid;
	int32_t mypid = (int32_t)getpid(), ppid;

	SVT_CHECK_EQ(argc, 2);
	svt_watchdog(30);
	nocma_setup(argv[0]); /* before the device is opened */
	bulk_qp_init(&qi);
	ep_open(&e, B_LEN, SVT_ACCESS_ALL, false, &qi);
	me = ep_info(&e);
	svt_send_info(wfd, &me);
	svt_chan_write(wfd, &mypid, sizeof(mypid));
	svt_recv_info(rfd, &peer);
	svt_chan_read(rfd, &ppid, sizeof(ppid), 0);
	peer_pid = ppid;
	if (!strcmp(argv[0], "seccomp"))
		check_cma_denied(peer_pid); /* what the library will find */

	svt_qp_connect(e.qp, NULL, &peer.gid, peer.qpn);
	b = (struct bulk){ e.qp, e.scq, e.buf, e.mr->lkey, peer.addr, peer.rkey, 0, 0 };
	b.seed = (uint32_t)atoi(argv[1]);
	b.peer_seed = b.seed == 30 ? 40 : 30;
	bulk_prepare(&b);
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, 10000), 'G');
	bulk_post(&b);
	bulk_complete(&b);
	svt_sync_send(wfd, 'D');
	SVT_CHECK_EQ(svt_sync_recv(rfd, 20000), 'V');
	bulk_check_written(&b);
	ep_close(&e);
	tap_end();
	tap_check(argv[0], "two processes");
	return 0;
}

/* Both contexts in one process (the child), both ways at once. */
static int nocma_pair(int rfd, int wfd, int argc, char **argv)
{
	struct svt_pair_opts o;
	struct svt_pair p;
	struct bulk a, b;

	(void)rfd;
	(void)wfd;
	SVT_CHECK_EQ(argc, 1);
	svt_watchdog(30);
	nocma_setup(argv[0]);
	svt_pair_opts_default(&o, IBV_QPT_RC);
	o.buf_len = B_LEN;
	o.cqe = 16;
	bulk_qp_init(&o.qp);
	svt_pair_create(&p, IBV_QPT_RC, &o);
	a = (struct bulk){ p.a.qp, p.a.send_cq, p.a.buf, p.a.mr->lkey, (uintptr_t)p.b.buf,
			   p.b.mr->rkey, 50, 60 };
	b = (struct bulk){ p.b.qp, p.b.send_cq, p.b.buf, p.b.mr->lkey, (uintptr_t)p.a.buf,
			   p.a.mr->rkey, 60, 50 };
	bulk_prepare(&a);
	bulk_prepare(&b);
	bulk_post(&a);
	bulk_post(&b);
	bulk_complete(&a);
	bulk_complete(&b);
	bulk_check_written(&a);
	bulk_check_written(&b);
	svt_pair_destroy(&p);
	tap_end();
	tap_check(argv[0], "one process");
	return 0;
}

static void run_nocma_peers(const char *mode)
{
	struct svt_child c[2];
	struct svt_peer_info info[2];
	int32_t pid[2];
	char *args[2][3] = { { (char *)mode, "30", NULL }, { (char *)mode, "40", NULL } };

	for (int i = 0; i < 2; i++)
		svt_spawn(&c[i], "nocma_peer", args[i]);
	for (int i = 0; i < 2; i++) {
		svt_recv_info(c[i].rfd, &info[i]);
		svt_chan_read(c[i].rfd, &pid[i], sizeof(pid[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		svt_send_info(c[i].wfd, &info[1 - i]);
		svt_chan_write(c[i].wfd, &pid[1 - i], sizeof(pid[i]));
	}
	for (int i = 0; i < 2; i++)
		SVT_CHECK_EQ(svt_sync_recv(c[i].rfd, 10000), 'R');
	for (int i = 0; i < 2; i++)
		svt_sync_send(c[i].wfd, 'G');
	for (int i = 0; i < 2; i++)
		SVT_CHECK_EQ(svt_sync_recv(c[i].rfd, 20000), 'D');
	for (int i = 0; i < 2; i++)
		svt_sync_send(c[i].wfd, 'V');
	for (int i = 0; i < 2; i++)
		SVT_CHECK_MSG(svt_child_wait(&c[i], 15000) == 0, "%s peer %d failed", mode, i);
}

static void run_nocma_pair(const char *mode)
{
	struct svt_child c;
	char *args[] = { (char *)mode, NULL };

	svt_spawn(&c, "nocma_pair", args);
	SVT_CHECK_MSG(svt_child_wait(&c, 20000) == 0, "%s pair failed", mode);
}

static void test_single_copy_refused(void)
{
	if (seccomp_missing) {
		svt_log("seccomp part skipped: %s", seccomp_missing);
	} else {
		run_nocma_peers("seccomp");
		run_nocma_pair("seccomp");
	}
	run_nocma_peers("cma0");
	run_nocma_pair("cma0");
	check_dev_shm_unchanged("after the no-single-copy runs");
}

/* ------------------------------------------------------------------------- */
/* 4. Atomics on one word from two processes and a second context             */
/* ------------------------------------------------------------------------- */

#define A_FAA 2000 /* FETCH_AND_ADD 1 per agent */
#define A_CAS 400  /* successful CAS increments per agent */
#define A_AGENTS 3
#define A_WINDOW 16
/* crosses 2^32 during the FETCH_AND_ADD phase: a 32-bit carry bug shows */
#define A_INIT ((1ull << 32) - 2500)
/* an agent's registered results: FETCH_AND_ADD olds, then CAS scratch */
#define A_RES_LEN ((A_FAA + 1) * sizeof(uint64_t))

/* N FETCH_AND_ADD 1, up to A_WINDOW in flight; old values into olds[]. */
static void faa_run(struct ibv_qp *qp, struct ibv_cq *cq, uint64_t *olds, uint32_t lkey,
		    uint64_t raddr, uint32_t rkey)
{
	int posted = 0, done = 0;
	struct ibv_wc wc[A_WINDOW];

	while (done < A_FAA) {
		while (posted < A_FAA && posted - done < A_WINDOW) {
			SVT_CHECK_OK(svt_post_atomic(qp, (uint64_t)posted, IBV_WR_ATOMIC_FETCH_AND_ADD,
						     IBV_SEND_SIGNALED, &olds[posted], lkey, raddr,
						     rkey, 1, 0));
			posted++;
		}
		svt_poll_ok(cq, 1, wc, 10000);
		SVT_CHECK_EQ(wc[0].wr_id, done);
		SVT_CHECK_EQ(wc[0].opcode, IBV_WC_FETCH_ADD);
		done++;
	}
	/* one QP's atomics execute in order: its old values only grow */
	for (int i = 1; i < A_FAA; i++)
		SVT_CHECK_MSG(olds[i] > olds[i - 1], "FETCH_AND_ADD %d returned %llu after %llu", i,
			      (unsigned long long)olds[i], (unsigned long long)olds[i - 1]);
}

/* Increment by CAS until A_CAS succeeded; the old value of each success. */
static void cas_run(struct ibv_qp *qp, struct ibv_cq *cq, uint64_t *olds, uint64_t *scratch,
		    uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	uint64_t guess = 0, tries = 0; /* the first try learns the value */
	int ok = 0;
	struct ibv_wc wc;

	while (ok < A_CAS) {
		SVT_CHECK_MSG(++tries < 100u * A_CAS, "CAS: %d successes in %llu tries", ok,
			      (unsigned long long)tries);
		SVT_CHECK_OK(svt_post_atomic(qp, tries, IBV_WR_ATOMIC_CMP_AND_SWP,
					     IBV_SEND_SIGNALED, scratch, lkey, raddr, rkey, guess,
					     guess + 1));
		svt_poll_ok(cq, 1, &wc, 10000);
		SVT_CHECK_EQ(wc.opcode, IBV_WC_COMP_SWAP);
		if (*scratch == guess) {
			olds[ok++] = guess;
			guess++;
		} else {
			guess = *scratch;
		}
	}
}

static int atomics_agent(int rfd, int wfd, int argc, char **argv)
{
	struct ep e;
	struct svt_peer_info me, t;

	(void)argc;
	(void)argv;
	svt_watchdog(30);
	ep_open(&e, A_RES_LEN, IBV_ACCESS_LOCAL_WRITE, false, NULL);
	uint64_t *res = (uint64_t *)e.buf;

	me = ep_info(&e);
	svt_send_info(wfd, &me);
	svt_recv_info(rfd, &t);
	svt_qp_connect(e.qp, NULL, &t.gid, t.qpn);
	svt_sync_send(wfd, 'R');
	SVT_CHECK_EQ(svt_sync_recv(rfd, 10000), 'G');
	faa_run(e.qp, e.scq, res, e.mr->lkey, t.addr, t.rkey);
	svt_chan_write(wfd, res, A_FAA * sizeof(uint64_t));
	SVT_CHECK_EQ(svt_sync_recv(rfd, 20000), 'C');
	cas_run(e.qp, e.scq, res, res + A_CAS, e.mr->lkey, t.addr, t.rkey);
	svt_chan_write(wfd, res, A_CAS * sizeof(uint64_t));
	SVT_CHECK_EQ(svt_sync_recv(rfd, 20000), 'Q');
	ep_close(&e);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The n old values of all agents are exactly from, from+1, ..., from+n-1. */
static void check_olds(uint64_t *v, size_t n, uint64_t from, const char *what)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < n; i++)
		SVT_CHECK_MSG(v[i] == from + i,
			      "%s: sorted old value %zu is %llu, expected %llu (an update was %s)",
			      what, i, (unsigned long long)v[i], (unsigned long long)(from + i),
			      v[i] < from + i ? "applied twice to one value" : "lost");
}

static void test_atomics(void)
{
	struct svt_child c[2];
	struct ep t, m;
	struct svt_qp_init qi;
	struct svt_peer_info ci[2], ti;
	struct ibv_qp *tq[A_AGENTS];
	uint64_t *olds = calloc(A_AGENTS * A_FAA, sizeof(uint64_t));

	SVT_CHECK_PTR(olds);
	for (int i = 0; i < 2; i++)
		svt_spawn(&c[i], "atomics", NULL);

	/* the target: the word, and one QP per agent */
	ep_open(&t, 4096, SVT_ACCESS_ALL, false, NULL);
	uint64_t *word = (uint64_t *)t.buf;

	*word = A_INIT;
	svt_qp_init_default(&qi, IBV_QPT_RC);
	tq[0] = t.qp;
	for (int i = 1; i < A_AGENTS; i++)
		tq[i] = svt_create_qp(t.d.pd, t.scq, t.rcq, &qi);

	/* our own agent, on a second context */
	ep_open(&m, A_RES_LEN, IBV_ACCESS_LOCAL_WRITE, false, NULL);
	uint64_t *res = (uint64_t *)m.buf;

	ti = ep_info(&t);
	for (int i = 0; i < 2; i++) {
		svt_recv_info(c[i].rfd, &ci[i]);
		ti.qpn = tq[i]->qp_num;
		svt_send_info(c[i].wfd, &ti);
		svt_qp_connect(tq[i], NULL, &ci[i].gid, ci[i].qpn);
	}
	svt_qp_link(tq[2], &t.d.gid, m.qp, &m.d.gid, NULL);
	for (int i = 0; i < 2; i++)
		SVT_CHECK_EQ(svt_sync_recv(c[i].rfd, 10000), 'R');

	/* FETCH_AND_ADD phase, all three at once */
	uint64_t t0 = svt_now_ms();

	for (int i = 0; i < 2; i++)
		svt_sync_send(c[i].wfd, 'G');
	faa_run(m.qp, m.scq, res, m.mr->lkey, ti.addr, ti.rkey);
	memcpy(olds + 2 * A_FAA, res, A_FAA * sizeof(uint64_t));
	for (int i = 0; i < 2; i++)
		svt_chan_read(c[i].rfd, olds + i * A_FAA, A_FAA * sizeof(uint64_t), 20000);
	uint64_t t1 = svt_now_ms();

	/* every agent saw its completions: all were executed here */
	SVT_CHECK_EQ(__atomic_load_n(word, __ATOMIC_ACQUIRE), A_INIT + A_AGENTS * A_FAA);
	/* how often another agent got in between (the test's own contention,
	 * for the log only: a scheduler may serialise the agents) */
	int interleaved = 0;

	for (int i = 1; i < A_AGENTS * A_FAA; i++)
		interleaved += i % A_FAA && olds[i] != olds[i - 1] + 1;
	check_olds(olds, A_AGENTS * A_FAA, A_INIT, "FETCH_AND_ADD");

	/* CMP_AND_SWAP phase: each increments by CAS loop, contending */
	for (int i = 0; i < 2; i++)
		svt_sync_send(c[i].wfd, 'C');
	cas_run(m.qp, m.scq, olds + 2 * A_CAS, res + A_FAA, m.mr->lkey, ti.addr, ti.rkey);
	for (int i = 0; i < 2; i++)
		svt_chan_read(c[i].rfd, olds + i * A_CAS, A_CAS * sizeof(uint64_t), 20000);
	uint64_t t2 = svt_now_ms();

	SVT_CHECK_EQ(__atomic_load_n(word, __ATOMIC_ACQUIRE),
		     A_INIT + A_AGENTS * (A_FAA + A_CAS));
	check_olds(olds, A_AGENTS * A_CAS, A_INIT + A_AGENTS * A_FAA, "CMP_AND_SWAP");
	svt_log("atomics: %d FETCH_AND_ADD in %llu ms (%d interleavings), %d CAS increments in "
		"%llu ms", A_AGENTS * A_FAA, (unsigned long long)(t1 - t0), interleaved,
		A_AGENTS * A_CAS, (unsigned long long)(t2 - t1));

	for (int i = 0; i < 2; i++)
		svt_sync_send(c[i].wfd, 'Q');
	for (int i = 0; i < 2; i++)
		SVT_CHECK_EQ(svt_child_wait(&c[i], 10000), 0);
	svt_expect_no_wc(t.scq, 0); /* a responder completes nothing */

	ep_close(&m);
	for (int i = 1; i < A_AGENTS; i++)
		SVT_CHECK_OK(ibv_destroy_qp(tq[i]));
	ep_close(&t);
	SVT_CHECK_EQ(shm_maps(NULL), 0);
	free(olds);
}

/* ------------------------------------------------------------------------- */

static const struct svt_child_role roles[] = {
	{ "victim", victim },
	{ "nocma_peer", nocma_peer },
	{ "nocma_pair", nocma_pair },
	{ "atomics", atomics_agent },
	{ NULL, NULL },
};

static void timed(const char *name, void (*fn)(void))
{
	uint64_t t0 = svt_now_ms();

	fn();
	svt_log("%s: ok in %llu ms", name, (unsigned long long)(svt_now_ms() - t0));
}

/* ------------------------------------------------------------------------- */
/* 5. First requests at once                                                  */
/* ------------------------------------------------------------------------- */

#define RACERS 6
#define RACE_ROUNDS 10

struct racer {
	struct ibv_qp *qp;
	struct svt_pair *p;
	int i;
	pthread_barrier_t *go;
};

static void *race_write(void *arg)
{
	struct racer *r = arg;
	uint8_t *src = (uint8_t *)r->p->a.buf + r->i * 64;
	uint64_t dst = (uintptr_t)r->p->b.buf + (uint64_t)r->i * 64;

	svt_fill(src, 64, 40 + (uint32_t)r->i);
	pthread_barrier_wait(r->go);
	SVT_CHECK_OK(svt_post_send(r->qp, (uint64_t)r->i, IBV_WR_RDMA_WRITE, IBV_SEND_SIGNALED, src,
				   64, r->p->a.mr->lkey, dst, r->p->b.mr->rkey, 0));
	return NULL;
}

static void test_first_requests(void)
{
	for (int round = 0; round < RACE_ROUNDS; round++) {
		struct svt_pair p;
		struct ibv_qp *qa[RACERS], *qb[RACERS];
		struct racer r[RACERS];
		pthread_t th[RACERS];
		pthread_barrier_t go;
		struct svt_qp_init qi;
		struct ibv_wc wc[RACERS];
		int n;

		svt_pair_create(&p, IBV_QPT_RC, NULL);
		svt_qp_init_default(&qi, IBV_QPT_RC);
		for (int i = 0; i < RACERS; i++) {
			qa[i] = svt_create_qp(p.a.pd, p.a.send_cq, p.a.recv_cq, &qi);
			qb[i] = svt_create_qp(p.b.pd, p.b.send_cq, p.b.recv_cq, &qi);
			svt_qp_link(qa[i], &p.a.gid, qb[i], &p.b.gid, NULL);
		}
		/* no request yet: no connection */
		SVT_CHECK_EQ(shm_maps(NULL), 0);
		SVT_CHECK_OK(pthread_barrier_init(&go, NULL, RACERS));
		for (int i = 0; i < RACERS; i++) {
			r[i] = (struct racer){ qa[i], &p, i, &go };
			SVT_CHECK_OK(pthread_create(&th[i], NULL, race_write, &r[i]));
		}
		for (int i = 0; i < RACERS; i++)
			SVT_CHECK_OK(pthread_join(th[i], NULL));
		svt_poll_ok(p.a.send_cq, RACERS, wc, 0);
		for (int i = 0; i < RACERS; i++)
			SVT_CHECK_FILL((uint8_t *)p.b.buf + i * 64, 64, 40 + (uint32_t)i);
		n = shm_maps(NULL);
		if (without_shm)
			SVT_CHECK_EQ(n, 0);
		else
			SVT_CHECK_MSG(n == 2, "round %d: %d mappings of ring areas, expected 2 (one "
				      "connection)", round, n);
		for (int i = 0; i < RACERS; i++) {
			SVT_CHECK_OK(ibv_destroy_qp(qa[i]));
			SVT_CHECK_OK(ibv_destroy_qp(qb[i]));
		}
		SVT_CHECK_OK(pthread_barrier_destroy(&go));
		svt_pair_destroy(&p);
		SVT_CHECK_EQ(shm_maps_gone(2000), 0);
	}
}

int main(int argc, char **argv)
{
	const char *tr = getenv("SOFTVERBS_TRANSPORT");

	/* children need it too */
	without_shm = tr && (!strcmp(tr, "tcp") || !strcmp(tr, "rocev2"));
	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);
	svt_log("transport %s: %s", tr ? tr : "(default)",
		without_shm ? "checking that no shm object exists" : "checking the shm objects");
	/* before any device is opened: the probe forks */
	seccomp_missing = probe_seccomp();
	dev_shm_list(&dev_shm_before);

	timed("1 private objects", test_private_objects);
	timed("2 SIGKILL", test_sigkill);
	timed("3 single copy refused", test_single_copy_refused);
	timed("4 atomics", test_atomics);
	timed("5 first requests at once", test_first_requests);

	check_dev_shm_unchanged("at the end");
	names_free(&dev_shm_before);
	if (seccomp_missing)
		svt_skip(seccomp_missing); /* all else passed; say what did not run */
	return 0;
}
