/*
 * rocev2_agent: a verbs program driven line by line on stdin, for the RoCEv2
 * wire tests (rocev2_capture.sh / rocev2_pcap.py, rocev2_inject.py), which
 * run it in network namespaces and say what to post, with which opcode, on
 * which QP, and look at the completions and the memory themselves.
 *
 *   rocev2_agent DEVICE
 *
 * One PD, one CQ (send and receive), one 1 MiB buffer registered with
 * LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC.  Every command
 * answers with lines of its own and then one line "ok ..." or "err ...":
 *
 *   info                         ok gid=GID(index 3) addr=0x.. rkey=0x..
 *   qp rc|uc|ud                  ok idx=N qpn=0x..     (UD: RTS, qkey 0x11111111;
 *                                                       RC/UC: INIT)
 *   connect IDX DQPN RQPSN DGID SQPSN MTU   RTR and RTS (DQPN, PSNs in hex or
 *                                dec; DGID an IPv6/IPv4-mapped address; MTU bytes)
 *   recv IDX OFF LEN WRID        a receive of LEN bytes at buffer offset OFF
 *   post IDX OP key=value...     OP: send send_imm write write_imm read cas faa;
 *                                keys: off len wrid raddr rkey imm cmp swap add
 *                                ah (DGID) dqpn qkey (UD)
 *   poll N MS                    up to N completions within MS ms, each a line
 *                                "wc wrid= status= opcode= len= imm= qpn= src_qp= flags=",
 *                                then ok n=K
 *   peek OFF LEN                 ok HEX
 *   poke OFF HEX
 *   quit
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define BUF_SIZE (1u << 20)
#define MAX_QPS 16
#define UD_QKEY 0x11111111u

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_mr *mr;
static unsigned char *buf;
static struct ibv_qp *qps[MAX_QPS];
static int nqps;

static void die(const char *what)
{
	fprintf(stderr, "rocev2_agent: %s: %s\n", what, strerror(errno));
	exit(2);
}

static uint64_t num(const char *s)
{
	return strtoull(s, NULL, 0);
}

static int parse_gid(const char *s, union ibv_gid *gid)
{
	struct in_addr a4;

	if (inet_pton(AF_INET6, s, gid->raw) == 1)
		return 0;
	if (inet_pton(AF_INET, s, &a4) == 1) {
		memset(gid->raw, 0, 10);
		gid->raw[10] = gid->raw[11] = 0xff;
		memcpy(gid->raw + 12, &a4, 4);
		return 0;
	}
	return -1;
}

static enum ibv_mtu mtu_enum(int bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	default: return IBV_MTU_1024;
	}
}

static struct ibv_qp *qp_at(const char *s)
{
	int i = atoi(s);

	return i >= 0 && i < nqps ? qps[i] : NULL;
}

static void cmd_qp(const char *type)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 64, .max_recv_wr = 64,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	struct ibv_qp *qp;

	if (!strcmp(type, "rc"))
		ia.qp_type = IBV_QPT_RC;
	else if (!strcmp(type, "uc"))
		ia.qp_type = IBV_QPT_UC;
	else if (!strcmp(type, "ud"))
		ia.qp_type = IBV_QPT_UD;
	else {
		printf("err type\n");
		return;
	}
	if (nqps == MAX_QPS || !(qp = ibv_create_qp(pd, &ia))) {
		printf("err create_qp %s\n", strerror(errno));
		return;
	}
	if (ia.qp_type == IBV_QPT_UD) {
		a.qkey = UD_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				    (ia.qp_type == IBV_QPT_RC ? IBV_ACCESS_REMOTE_ATOMIC : 0);
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	if (ibv_modify_qp(qp, &a, mask)) {
		printf("err init %s\n", strerror(errno));
		return;
	}
	if (ia.qp_type == IBV_QPT_UD) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) {
			printf("err rtr %s\n", strerror(errno));
			return;
		}
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
			printf("err rts %s\n", strerror(errno));
			return;
		}
	}
	qps[nqps] = qp;
	printf("ok idx=%d qpn=0x%06x\n", nqps++, qp->qp_num);
}

static void cmd_connect(char **t, int n)
{
	struct ibv_qp *qp;
	struct ibv_qp_attr a = { 0 };
	int mask;

	if (n < 7 || !(qp = qp_at(t[1]))) {
		printf("err usage\n");
		return;
	}
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu_enum(atoi(t[6]));
	a.dest_qp_num = (uint32_t)num(t[2]);
	a.rq_psn = (uint32_t)num(t[3]);
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.grh.hop_limit = 64;
	if (parse_gid(t[4], &a.ah_attr.grh.dgid)) {
		printf("err gid\n");
		return;
	}
	mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	if (ibv_modify_qp(qp, &a, mask)) {
		printf("err rtr %s\n", strerror(errno));
		return;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = (uint32_t)num(t[5]);
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	if (ibv_modify_qp(qp, &a, mask)) {
		printf("err rts %s\n", strerror(errno));
		return;
	}
	printf("ok\n");
}

static void cmd_recv(char **t, int n)
{
	struct ibv_qp *qp;
	struct ibv_sge sge;
	struct ibv_recv_wr wr = { 0 }, *bad;

	if (n < 5 || !(qp = qp_at(t[1]))) {
		printf("err usage\n");
		return;
	}
	sge.addr = (uintptr_t)buf + num(t[2]);
	sge.length = (uint32_t)num(t[3]);
	sge.lkey = mr->lkey;
	wr.wr_id = num(t[4]);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	if (ibv_post_recv(qp, &wr, &bad))
		printf("err post_recv %s\n", strerror(errno));
	else
		printf("ok\n");
}

static struct ibv_ah *ah_for(const char *g)
{
	static struct { char gid[64]; struct ibv_ah *ah; } cache[8];
	static int ncache;
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };
	int i;

	for (i = 0; i < ncache; i++)
		if (!strcmp(cache[i].gid, g))
			return cache[i].ah;
	if (ncache == 8 || parse_gid(g, &a.grh.dgid))
		return NULL;
	a.grh.sgid_index = 3;
	a.grh.hop_limit = 64;
	cache[ncache].ah = ibv_create_ah(pd, &a);
	if (!cache[ncache].ah)
		return NULL;
	snprintf(cache[ncache].gid, sizeof(cache[ncache].gid), "%s", g);
	return cache[ncache++].ah;
}

static void cmd_post(char **t, int n)
{
	struct ibv_qp *qp;
	struct ibv_sge sge = { .lkey = 0 };
	struct ibv_send_wr wr = { 0 }, *bad;
	const char *op;
	uint64_t off = 0, len = 0, raddr = 0, cmp = 0, swap = 0, add = 0;
	uint32_t rkey = 0, imm = 0, dqpn = 0, qkey = UD_QKEY;
	const char *ah = NULL;
	int i;

	if (n < 3 || !(qp = qp_at(t[1]))) {
		printf("err usage\n");
		return;
	}
	op = t[2];
	for (i = 3; i < n; i++) {
		char *v = strchr(t[i], '=');

		if (!v) {
			printf("err arg %s\n", t[i]);
			return;
		}
		*v++ = 0;
		if (!strcmp(t[i], "off")) off = num(v);
		else if (!strcmp(t[i], "len")) len = num(v);
		else if (!strcmp(t[i], "wrid")) wr.wr_id = num(v);
		else if (!strcmp(t[i], "raddr")) raddr = num(v);
		else if (!strcmp(t[i], "rkey")) rkey = (uint32_t)num(v);
		else if (!strcmp(t[i], "imm")) imm = (uint32_t)num(v);
		else if (!strcmp(t[i], "cmp")) cmp = num(v);
		else if (!strcmp(t[i], "swap")) swap = num(v);
		else if (!strcmp(t[i], "add")) add = num(v);
		else if (!strcmp(t[i], "ah")) ah = v;
		else if (!strcmp(t[i], "dqpn")) dqpn = (uint32_t)num(v);
		else if (!strcmp(t[i], "qkey")) qkey = (uint32_t)num(v);
		else {
			printf("err key %s\n", t[i]);
			return;
		}
	}
	sge.addr = (uintptr_t)buf + off;
	sge.length = (uint32_t)len;
	sge.lkey = mr->lkey;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.imm_data = htonl(imm);
	if (!strcmp(op, "send")) wr.opcode = IBV_WR_SEND;
	else if (!strcmp(op, "send_imm")) wr.opcode = IBV_WR_SEND_WITH_IMM;
	else if (!strcmp(op, "write")) wr.opcode = IBV_WR_RDMA_WRITE;
	else if (!strcmp(op, "write_imm")) wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	else if (!strcmp(op, "read")) wr.opcode = IBV_WR_RDMA_READ;
	else if (!strcmp(op, "cas")) wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	else if (!strcmp(op, "faa")) wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	else {
		printf("err op %s\n", op);
		return;
	}
	if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		sge.length = 8;
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? add : cmp;
		wr.wr.atomic.swap = swap;
	} else if (qp->qp_type == IBV_QPT_UD) {
		if (!ah || !(wr.wr.ud.ah = ah_for(ah))) {
			printf("err ah\n");
			return;
		}
		wr.wr.ud.remote_qpn = dqpn;
		wr.wr.ud.remote_qkey = qkey;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	if (ibv_post_send(qp, &wr, &bad))
		printf("err post_send %s\n", strerror(errno));
	else
		printf("ok\n");
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void cmd_poll(char **t, int n)
{
	int want = n > 1 ? atoi(t[1]) : 1, got = 0;
	double end = now_ms() + (n > 2 ? atoi(t[2]) : 2000);
	struct ibv_wc wc;

	while (got < want && now_ms() < end) {
		int r = ibv_poll_cq(cq, 1, &wc);

		if (r < 0) {
			printf("err poll_cq\n");
			return;
		}
		if (r == 0) {
			struct timespec ts = { 0, 200000 };

			nanosleep(&ts, NULL);
			continue;
		}
		got++;
		printf("wc wrid=%" PRIu64 " status=%d opcode=%d len=%u imm=0x%08x qpn=0x%06x "
		       "src_qp=0x%06x flags=%d\n", wc.wr_id, wc.status, wc.opcode, wc.byte_len,
		       ntohl(wc.imm_data), wc.qp_num, wc.src_qp, wc.wc_flags);
	}
	printf("ok n=%d\n", got);
}

static void cmd_peek(char **t, int n)
{
	uint64_t off, len, i;

	if (n < 3 || (off = num(t[1])) + (len = num(t[2])) > BUF_SIZE) {
		printf("err usage\n");
		return;
	}
	printf("ok ");
	for (i = 0; i < len; i++)
		printf("%02x", buf[off + i]);
	printf("\n");
}

static void cmd_poke(char **t, int n)
{
	uint64_t off, i, len;

	if (n < 3 || (len = strlen(t[2]) / 2) + (off = num(t[1])) > BUF_SIZE) {
		printf("err usage\n");
		return;
	}
	for (i = 0; i < len; i++) {
		unsigned v;

		sscanf(t[2] + 2 * i, "%2x", &v);
		buf[off + i] = (unsigned char)v;
	}
	printf("ok\n");
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	static char line[65536];
	int i, n;

	if (argc != 2) {
		fprintf(stderr, "usage: rocev2_agent DEVICE\n");
		return 2;
	}
	if (!(list = ibv_get_device_list(&n)))
		die("ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
			break;
	if (i == n) {
		fprintf(stderr, "rocev2_agent: no device %s\n", argv[1]);
		return 2;
	}
	if (!(ctx = ibv_open_device(list[i])))
		die("ibv_open_device");
	ibv_free_device_list(list);
	if (!(pd = ibv_alloc_pd(ctx)) || !(cq = ibv_create_cq(ctx, 256, NULL, NULL, 0)))
		die("pd/cq");
	if (posix_memalign((void **)&buf, 4096, BUF_SIZE))
		die("memalign");
	memset(buf, 0, BUF_SIZE);
	mr = ibv_reg_mr(pd, buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		die("ibv_reg_mr");
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");

	while (fgets(line, sizeof(line), stdin)) {
		char *t[24], *save = NULL, *s;

		n = 0;
		for (s = strtok_r(line, " \t\n", &save); s && n < 24; s = strtok_r(NULL, " \t\n", &save))
			t[n++] = s;
		if (!n)
			continue;
		if (!strcmp(t[0], "info")) {
			union ibv_gid gid;
			char g[INET6_ADDRSTRLEN];

			if (ibv_query_gid(ctx, 1, 3, &gid)) {
				printf("err query_gid\n");
				continue;
			}
			inet_ntop(AF_INET6, gid.raw, g, sizeof(g));
			printf("ok gid=%s addr=0x%" PRIxPTR " rkey=0x%x\n", g, (uintptr_t)buf, mr->rkey);
		} else if (!strcmp(t[0], "qp") && n == 2) {
			cmd_qp(t[1]);
		} else if (!strcmp(t[0], "connect")) {
			cmd_connect(t, n);
		} else if (!strcmp(t[0], "recv")) {
			cmd_recv(t, n);
		} else if (!strcmp(t[0], "post")) {
			cmd_post(t, n);
		} else if (!strcmp(t[0], "poll")) {
			cmd_poll(t, n);
		} else if (!strcmp(t[0], "peek")) {
			cmd_peek(t, n);
		} else if (!strcmp(t[0], "poke")) {
			cmd_poke(t, n);
		} else if (!strcmp(t[0], "quit")) {
			break;
		} else {
			printf("err unknown %s\n", t[0]);
		}
	}
	for (i = 0; i < nqps; i++)
		ibv_destroy_qp(qps[i]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
