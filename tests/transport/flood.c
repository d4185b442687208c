/*
 * A connection flood against a device's TCP listener (docs/SECURITY.md,
 * "what a peer that has not proved itself may cost").  An attacker process
 * (forked before any verbs call) opens connections to the victim's endpoint
 * and says nothing:
 *   1. 300 of them: the victim keeps at most 64 in their handshake (its
 *      open descriptors stay bounded), its engine does not spin, and a new
 *      peer (another context) connects and moves data in the middle of it;
 *   2. with the victim's descriptor limit lowered so that accept() fails
 *      with EMFILE: the engine rests its listeners instead of waking for a
 *      connection it cannot take (the process's CPU time over a second stays
 *      low), and once descriptors are free again a new peer gets in;
 *   3. the silent connections are closed when their handshake time
 *      (SOFTVERBS_HANDSHAKE_TIMEOUT_MS, 1 s here) is up.
 * Throughout, the QP pair connected before the flood keeps working.
 */
#include "sv_test.h"
#include "transport/registry.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG 256

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	SVT_CHECK_PTR(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n - 3; /* ".", ".." and the directory's own */
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6;
}

/* The attacker: for each port it reads, opens n silent connections and
 * answers with how many it made; "0" ends it. */
static void attacker(int rfd, int wfd)
{
	struct rlimit rl;
	uint32_t cmd[2];

	prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves no flood behind */
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	while (read(rfd, cmd, sizeof(cmd)) == sizeof(cmd) && cmd[0]) {
		struct sockaddr_in sa = { .sin_family = AF_INET,
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
					  .sin_port = htons((uint16_t)cmd[0]) };
		uint32_t made = 0;

		for (uint32_t i = 0; i < cmd[1]; i++) {
			int fd = socket(AF_INET, SOCK_STREAM, 0);

			if (fd < 0)
				break;
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
				close(fd);
				continue;
			}
			made++; /* kept open, silent */
		}
		if (write(wfd, &made, sizeof(made)) != sizeof(made))
			break;
	}
	_exit(0);
}

static uint32_t flood(int wfd, int rfd, uint16_t port, uint32_t n)
{
	uint32_t cmd[2] = { port, n }, made = 0;

	SVT_CHECK_EQ(write(wfd, cmd, sizeof(cmd)), (ssize_t)sizeof(cmd));
	SVT_CHECK_EQ(read(rfd, &made, sizeof(made)), (ssize_t)sizeof(made));
	return made;
}

/* A SEND from a to b (b's receive posted first) arrives whole. */
static void exchange(struct ibv_qp *a, struct ibv_cq *acq, struct ibv_mr *amr, struct ibv_qp *b,
		     struct ibv_cq *bcq, struct ibv_mr *bmr, uint32_t seed)
{
	struct ibv_wc wc;
	uint8_t *src = amr->addr, *dst = bmr->addr;

	memset(dst, 0, MSG);
	svt_fill(src, MSG, seed);
	SVT_CHECK_OK(svt_post_recv(b, seed, dst, MSG, bmr->lkey));
	SVT_CHECK_OK(svt_post_send(a, seed, IBV_WR_SEND, IBV_SEND_SIGNALED, src, MSG, amr->lkey, 0,
				   0, 0));
	svt_poll_ok(acq, 1, &wc, 20000);
	svt_poll_ok(bcq, 1, &wc, 20000);
	SVT_CHECK_FILL(dst, MSG, seed);
}

struct side {
	struct svt_dev d;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_qp *qp;
};

static void side_open(struct side *s)
{
	struct svt_qp_init qi;

	svt_dev_open(&s->d);
	s->cq = svt_create_cq(s->d.ctx, 16, NULL);
	s->mr = svt_reg_mr(s->d.pd, svt_alloc(MSG), MSG, SVT_ACCESS_ALL);
	svt_qp_init_default(&qi, IBV_QPT_RC);
	s->qp = svt_create_qp(s->d.pd, s->cq, s->cq, &qi);
}

/* Another QP of side s, on its CQ. */
static struct ibv_qp *extra_qp(struct side *s)
{
	struct svt_qp_init qi;

	svt_qp_init_default(&qi, IBV_QPT_RC);
	return svt_create_qp(s->d.pd, s->cq, s->cq, &qi);
}

static void side_close(struct side *s)
{
	void *buf = s->mr->addr;

	SVT_CHECK_OK(ibv_destroy_qp(s->qp));
	SVT_CHECK_OK(ibv_dereg_mr(s->mr));
	SVT_CHECK_OK(ibv_destroy_cq(s->cq));
	svt_dev_close(&s->d);
	free(buf);
}

int main(void)
{
	int to_att[2], from_att[2];
	struct side v, p, q, r;
	struct rlimit rl, low;
	pid_t pid;

	svt_watchdog(120);
	setenv("SOFTVERBS_PORT", "0", 1); /* the endpoint's own port */
	setenv("SOFTVERBS_TRANSPORT", "tcp", 1);
	setenv("SOFTVERBS_HANDSHAKE_TIMEOUT_MS", "1000", 1);
	SVT_CHECK_OK(pipe(to_att));
	SVT_CHECK_OK(pipe(from_att));
	pid = fork();
	SVT_CHECK(pid >= 0);
	if (pid == 0)
		attacker(to_att[0], from_att[1]);

	side_open(&v);
	side_open(&p);
	svt_qp_link(v.qp, &v.d.gid, p.qp, &p.d.gid, NULL);
	exchange(p.qp, p.cq, p.mr, v.qp, v.cq, v.mr, 1);
	uint16_t port = sv_qpn_port(v.qp->qp_num);
	int base = open_fds();

	/* 1. the cap on handshakes */
	double c0 = cpu_s();
	uint32_t made = flood(to_att[1], from_att[0], port, 300);

	svt_log("attacker: %u connections made", made);
	SVT_CHECK_GE(made, 100);
	svt_sleep_ms(300);
	int during = open_fds();

	svt_log("victim: %d descriptors before the flood, %d during it", base, during);
	SVT_CHECK_LE(during, base + 64 + 8);
	side_open(&q); /* a new peer: its connection must get through */
	struct ibv_qp *vq = extra_qp(&v);

	svt_qp_link(q.qp, &q.d.gid, vq, &v.d.gid, NULL);
	exchange(q.qp, q.cq, q.mr, vq, v.cq, v.mr, 2);
	exchange(vq, v.cq, v.mr, q.qp, q.cq, q.mr, 3);
	SVT_CHECK_OK(ibv_destroy_qp(vq));
	side_close(&q);
	exchange(p.qp, p.cq, p.mr, v.qp, v.cq, v.mr, 4);
	svt_log("phase 1: %.2f s of CPU", cpu_s() - c0);

	/* 2. out of descriptors: the listeners rest */
	getrlimit(RLIMIT_NOFILE, &rl);
	low = rl;
	low.rlim_cur = (rlim_t)open_fds() + 4;
	SVT_CHECK_OK(setrlimit(RLIMIT_NOFILE, &low));
	made = flood(to_att[1], from_att[0], port, 200);
	svt_sleep_ms(200);
	c0 = cpu_s();
	svt_sleep_ms(1000);
	double spent = cpu_s() - c0;

	svt_log("phase 2: %u more connections; %.3f s of CPU in the next second", made, spent);
	SVT_CHECK_MSG(spent < 0.3, "the engine spun at EMFILE: %.3f s of CPU in 1 s", spent);
	SVT_CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
	exchange(p.qp, p.cq, p.mr, v.qp, v.cq, v.mr, 5);

	/* 3. silent connections are closed when their time is up */
	svt_sleep_ms(2500);
	int after = open_fds();

	svt_log("victim: %d descriptors once the handshakes timed out", after);
	SVT_CHECK_LE(after, base + 8);
	side_open(&r);
	vq = extra_qp(&v);
	svt_qp_link(r.qp, &r.d.gid, vq, &v.d.gid, NULL);
	exchange(r.qp, r.cq, r.mr, vq, v.cq, v.mr, 6);
	SVT_CHECK_OK(ibv_destroy_qp(vq));
	side_close(&r);
	exchange(v.qp, v.cq, v.mr, p.qp, p.cq, p.mr, 7);

	uint32_t end[2] = { 0, 0 };

	SVT_CHECK_EQ(write(to_att[1], end, sizeof(end)), (ssize_t)sizeof(end));
	waitpid(pid, NULL, 0);
	side_close(&p);
	side_close(&v);
	return 0;
}
