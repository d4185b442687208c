/*
 * unit_secret: where the secret comes from, and what it costs to guess
 * (src/transport/auth.h, docs/SECURITY.md "Where the secret comes from").
 *
 *   - A secret that is set but refused fails at once, with errno EACCES:
 *     SOFTVERBS_SECRET shorter than 16 bytes, a SOFTVERBS_SECRET_FILE
 *     holding fewer than 16, and one that others can read.  ibv_open_device
 *     returns NULL, rdma_create_id -1 (before: a short SOFTVERBS_SECRET was
 *     used, with a warning).  One of exactly 16 bytes is taken.
 *   - The key of a secret a person chose goes through Argon2id over 64 MiB
 *     (SV_AUTH_KDF_MEMLIMIT), paid once, when the process first needs it:
 *     not at opening a device (a program that only lists or queries
 *     devices never pays), but at creating a QP.  What the process's peak
 *     of resident memory (VmHWM) does shows it without timing anything: it
 *     grows by less than 32 MiB at the open and by at least 60 MiB at the
 *     first QP, and not again at the second.  This host's random secret
 *     (nothing set) is hashed, not stretched: no such growth.
 *   - Two processes holding one secret, one from SOFTVERBS_SECRET and the
 *     other from SOFTVERBS_SECRET_FILE, derive the same key: an RC SEND
 *     between them arrives.  A process with another secret of the same
 *     length gets nothing through: the SEND fails with RETRY_EXC_ERR.
 *     Over rocev2 too, where no handshake refuses the peer: there the
 *     secret keys a tag in every packet (docs/SECURITY.md "RoCEv2"), and
 *     the peer drops what fails it.
 */
#include "sv_test.h"
#include "transport/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define SECRET "correct horse battery staple"
#define OTHER "correct horse battery stapler"
#define MSG 64

_Static_assert(SV_AUTH_KDF_MEMLIMIT >= 64ull << 20, "the KDF's memory, as documented");
_Static_assert(SV_AUTH_KDF_OPSLIMIT >= 5, "the KDF's passes, as documented");
_Static_assert(SV_AUTH_SECRET_MIN == 16, "the shortest secret, as documented");

/* The process's peak resident memory, in MiB. */
static long hwm_mib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	SVT_CHECK_PTR(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	fclose(f);
	SVT_CHECK(kb >= 0);
	return kb / 1024;
}

/* A file of this user holding s, with mode; its path (static). */
static const char *secret_file(const char *s, mode_t mode)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/svt-secret-XXXXXX");
	fd = mkstemp(path);
	SVT_CHECK(fd >= 0);
	SVT_CHECK_EQ(write(fd, s, strlen(s)), (ssize_t)strlen(s));
	SVT_CHECK_OK(fchmod(fd, mode));
	close(fd);
	return path;
}

/* The secret of this process, as `how` says: "env:S", "file:S", "open:S"
 * (a file others may read) or "none" (this host's random one). */
static void use_secret(const char *how)
{
	unsetenv("SOFTVERBS_SECRET");
	unsetenv("SOFTVERBS_SECRET_FILE");
	if (!strncmp(how, "env:", 4)) {
		setenv("SOFTVERBS_SECRET", how + 4, 1);
	} else if (!strncmp(how, "file:", 5)) {
		const char *p = secret_file(how + 5, 0600);

		setenv("SOFTVERBS_SECRET_FILE", p, 1);
	} else if (!strncmp(how, "open:", 5)) {
		setenv("SOFTVERBS_SECRET_FILE", secret_file(how + 5, 0644), 1);
	} else {
		SVT_CHECK(!strcmp(how, "none"));
	}
}

static void drop_secret_file(void)
{
	const char *p = getenv("SOFTVERBS_SECRET_FILE");

	if (p)
		unlink(p);
}

/* argv[0]: the secret; opening the device and creating an rdma_cm id fail
 * with EACCES. */
static int refused(int rfd, int wfd, int argc, char **argv)
{
	struct ibv_device **list;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = NULL;
	int n = 0;

	(void)rfd;
	(void)wfd;
	SVT_CHECK_EQ(argc, 1);
	use_secret(argv[0]);
	list = ibv_get_device_list(&n);
	SVT_CHECK(list && n > 0);
	errno = 0;
	SVT_CHECK_MSG(ibv_open_device(list[0]) == NULL, "a device opened with the secret %s",
		      argv[0]);
	SVT_CHECK_EQ(errno, EACCES);
	ibv_free_device_list(list);
	ch = rdma_create_event_channel();
	SVT_CHECK_PTR(ch);
	errno = 0;
	SVT_CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), -1);
	SVT_CHECK_EQ(errno, EACCES);
	rdma_destroy_event_channel(ch);
	drop_secret_file();
	return 0;
}

/* argv[0]: the secret; the KDF shows in the peak memory at the first QP
 * only, and only for a secret a person chose. */
static int kdf(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	bool chosen;
	long m0, m1, m2, m3;

	(void)rfd;
	(void)wfd;
	SVT_CHECK_EQ(argc, 1);
	use_secret(argv[0]);
	chosen = strcmp(argv[0], "none") != 0;
	m0 = hwm_mib();
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 4, NULL);

	m1 = hwm_mib();
	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *a = svt_create_qp(d.pd, cq, cq, &qi);

	m2 = hwm_mib();
	struct ibv_qp *b = svt_create_qp(d.pd, cq, cq, &qi);

	m3 = hwm_mib();
	svt_log("%s: peak memory %ld MiB, after the open %ld, the first QP %ld, the second %ld",
		argv[0], m0, m1, m2, m3);
	SVT_CHECK_MSG(m1 - m0 < 32, "opening the device grew the peak by %ld MiB", m1 - m0);
	if (chosen)
		SVT_CHECK_MSG(m2 - m1 >= 60, "no Argon2id over 64 MiB at the first QP (%ld MiB)",
			      m2 - m1);
	else
		SVT_CHECK_MSG(m2 - m1 < 32, "the random secret was stretched (%ld MiB)", m2 - m1);
	SVT_CHECK_MSG(m3 - m2 < 32, "the key was derived again (%ld MiB)", m3 - m2);
	SVT_CHECK_OK(ibv_destroy_qp(a));
	SVT_CHECK_OK(ibv_destroy_qp(b));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	drop_secret_file();
	return 0;
}

/* argv[0]: the secret; an RC QP that receives one SEND from the parent (or,
 * with argv[1] "refused", never does). */
static int peer(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_qp_init qi;
	struct svt_conn c;
	struct svt_peer_info me, them;
	struct ibv_wc wc;

	SVT_CHECK(argc >= 1);
	use_secret(argv[0]);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 4, NULL);
	uint8_t *buf = svt_alloc(MSG);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, MSG, SVT_ACCESS_ALL);

	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);

	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	svt_send_info(wfd, &me);
	svt_recv_info(rfd, &them);
	svt_conn_default(&c, IBV_QPT_RC);
	svt_qp_connect(qp, &c, &them.gid, them.qpn);
	SVT_CHECK_OK(svt_post_recv(qp, 1, buf, MSG, mr->lkey));
	svt_sync_send(wfd, 'R');
	if (argc > 1 && !strcmp(argv[1], "refused")) {
		SVT_CHECK_EQ(svt_sync_recv(rfd, 20000), 'Q');
		SVT_CHECK_EQ(ibv_poll_cq(cq, 1, &wc), 0); /* nothing arrived */
	} else {
		svt_poll_ok(cq, 1, &wc, 10000);
		SVT_CHECK_EQ(wc.byte_len, MSG);
		SVT_CHECK_FILL(buf, MSG, 5);
		SVT_CHECK_EQ(svt_sync_recv(rfd, 20000), 'Q');
	}
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	free(buf);
	drop_secret_file();
	return 0;
}

/* One SEND from this process (secret SOFTVERBS_SECRET=SECRET, set by main)
 * to a child holding `theirs`; whether it arrived. */
static bool send_to(struct svt_dev *d, struct ibv_cq *cq, const char *theirs)
{
	char *args[] = { (char *)theirs, strcmp(theirs, "file:" SECRET) ? "refused" : "ok", NULL };
	struct svt_child ch;
	struct svt_qp_init qi;
	struct svt_conn c;
	struct svt_peer_info me, them;
	struct ibv_wc wc;
	uint8_t *buf = svt_alloc(MSG);
	struct ibv_mr *mr = svt_reg_mr(d->pd, buf, MSG, SVT_ACCESS_ALL);

	svt_spawn(&ch, "peer", args);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	struct ibv_qp *qp = svt_create_qp(d->pd, cq, cq, &qi);

	memset(&me, 0, sizeof(me));
	me.gid = d->gid;
	me.qpn = qp->qp_num;
	svt_recv_info(ch.rfd, &them);
	svt_send_info(ch.wfd, &me);
	svt_conn_default(&c, IBV_QPT_RC);
	c.timeout = 14; /* 67 ms, 2 retries: a refused peer fails the SEND soon */
	c.retry_cnt = 2;
	svt_qp_connect(qp, &c, &them.gid, them.qpn);
	SVT_CHECK_EQ(svt_sync_recv(ch.rfd, 20000), 'R');
	svt_fill(buf, MSG, 5);
	SVT_CHECK_OK(svt_post_send(qp, 7, IBV_WR_SEND, IBV_SEND_SIGNALED, buf, MSG, mr->lkey, 0,
				   0, 0));
	wc = svt_poll_one(cq);
	svt_sync_send(ch.wfd, 'Q');
	SVT_CHECK_EQ(svt_child_wait(&ch, 20000), 0);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	svt_log("a SEND to a peer with the secret %s: %s", theirs, ibv_wc_status_str(wc.status));
	SVT_CHECK(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_RETRY_EXC_ERR);
	return wc.status == IBV_WC_SUCCESS;
}

static void run(const char *role, const char *arg)
{
	char *args[] = { (char *)arg, NULL };
	struct svt_child ch;

	svt_spawn(&ch, role, args);
	SVT_CHECK_MSG(svt_child_wait(&ch, 30000) == 0, "%s with the secret %s failed", role, arg);
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = {
		{ "refused", refused }, { "kdf", kdf }, { "peer", peer }, { NULL, NULL }
	};
	struct svt_dev d;

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(60);

	run("refused", "env:fifteen bytes!!");
	run("refused", "file:fifteen bytes!!");
	run("refused", "open:" SECRET);
	svt_log("refused, EACCES: a 15-byte secret, in SOFTVERBS_SECRET and in a file; a file "
		"others can read");

	run("kdf", "env:exactly 16 bytes"); /* 16 bytes: taken */
	run("kdf", "none");
	svt_log("Argon2id over 64 MiB at the first QP for a chosen secret, not at the open; "
		"none for the random one");

	use_secret("env:" SECRET);
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 4, NULL);

	SVT_CHECK_MSG(send_to(&d, cq, "file:" SECRET),
		      "SOFTVERBS_SECRET and SOFTVERBS_SECRET_FILE with one secret did not connect");
	SVT_CHECK_MSG(!send_to(&d, cq, "env:" OTHER), "another secret connected");
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	return 0;
}
