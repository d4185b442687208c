/*
 * unit_ud_parked: a UD QP destroyed while it waits for room on another
 * endpoint's connection.
 *
 * A UD QP sends through the connection of each AH, not one of its own.
 * When that connection is congested (its peer stopped reading), the QP
 * parks on the connection's waiter list.  Destroying the QP must take it off
 * that list: otherwise, once the peer reads again, the drained connection
 * reschedules the freed QP (a use after free that ASan reports).
 *
 * The peer is a child process (its own device, a UD QP) that the test stops
 * with SIGSTOP; the parent sends 4 KiB datagrams until its send queue stops
 * completing (parked), destroys the QP, lets the child go on (SIGCONT), gives
 * the connection time to drain, and checks that the child and a new QP still
 * work.  Then the same with the AH destroyed instead of the QP: the
 * datagrams waiting with it still go out and complete, successfully.
 */
#include "sv_test.h"

#include <signal.h>
#include <unistd.h>

#define MSG 4096
#define SQ 256
#define MAX_POSTS 16384 /* 64 MiB: far above every queue on the way */

static int sink(int rfd, int wfd, int argc, char **argv)
{
	struct svt_dev d;
	struct svt_peer_info me;
	struct svt_qp_init qi;

	(void)argc;
	(void)argv;
	svt_dev_open(&d);
	struct ibv_cq *cq = svt_create_cq(d.ctx, 16, NULL);

	svt_qp_init_default(&qi, IBV_QPT_UD);
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);

	svt_qp_connect(qp, NULL, NULL, 0);
	memset(&me, 0, sizeof(me));
	me.gid = d.gid;
	me.qpn = qp->qp_num;
	svt_send_info(wfd, &me);
	/* no receives: every datagram that arrives is dropped, once read */
	SVT_CHECK_EQ(svt_sync_recv(rfd, 50000), 'Q');
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	svt_dev_close(&d);
	return 0;
}

/* Send 4 KiB datagrams until completions stop for 300 ms with WRs
 * outstanding: the QP is parked on the AH's connection (the peer stopped). */
static void fill_until_parked(struct ibv_qp *qp, struct ibv_cq *cq, char *buf, struct ibv_mr *mr,
			      struct ibv_ah *ah, const struct svt_peer_info *peer,
			      const struct svt_conn *conn, int *posted, int *done)
{
	uint64_t quiet_since = svt_now_ms();
	struct ibv_wc wc[64];
	int start = *posted;

	while (*posted - start < MAX_POSTS) {
		while (*posted - *done < SQ && *posted - start < MAX_POSTS) {
			SVT_CHECK_OK(svt_post_ud_send(qp, (uint64_t)*posted, IBV_SEND_SIGNALED, buf,
						      MSG, mr->lkey, ah, peer->qpn, conn->qkey));
			(*posted)++;
		}
		int n = ibv_poll_cq(cq, 64, wc);

		SVT_CHECK(n >= 0);
		for (int i = 0; i < n; i++)
			SVT_CHECK_WC_OK(wc[i]);
		*done += n;
		if (n > 0)
			quiet_since = svt_now_ms();
		else if (svt_now_ms() - quiet_since > 300)
			break;
	}
	svt_log("peer stopped: %d datagrams posted, %d completed, %d waiting", *posted, *done,
		*posted - *done);
	SVT_CHECK_MSG(*posted - *done > 0, "the send queue never stalled (%d posted)", *posted);
}

int main(int argc, char **argv)
{
	static const struct svt_child_role roles[] = { { "sink", sink }, { NULL, NULL } };
	struct svt_child c;
	struct svt_dev d;
	struct svt_peer_info peer;
	struct svt_qp_init qi;
	struct svt_conn conn;
	struct ibv_ah_attr aa;
	struct ibv_wc wc[64];

	svt_child_dispatch(argc, argv, roles);
	svt_watchdog(50);
	svt_spawn(&c, "sink", NULL);
	svt_dev_open(&d);
	svt_recv_info(c.rfd, &peer);

	struct ibv_cq *cq = svt_create_cq(d.ctx, 2 * SQ, NULL);

	svt_qp_init_default(&qi, IBV_QPT_UD);
	qi.cap.max_send_wr = SQ;
	struct ibv_qp *qp = svt_create_qp(d.pd, cq, cq, &qi);

	svt_qp_connect(qp, NULL, NULL, 0);
	svt_conn_default(&conn, IBV_QPT_UD);
	svt_ah_attr(&aa, &peer.gid, &conn);
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);

	SVT_CHECK(ah != NULL);
	char *buf = svt_alloc(MSG);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, MSG, SVT_ACCESS_ALL);

	/* The connection exists and works before the peer stops. */
	SVT_CHECK_OK(svt_post_ud_send(qp, 0, IBV_SEND_SIGNALED, buf, MSG, mr->lkey, ah,
				      peer.qpn, conn.qkey));
	svt_poll_ok(cq, 1, wc, 10000);

	svt_child_kill(&c, SIGSTOP);
	int posted = 1, done = 1;

	fill_until_parked(qp, cq, buf, mr, ah, &peer, &conn, &posted, &done);

	/* Destroy the parked QP, then let the connection drain. */
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	svt_child_kill(&c, SIGCONT);
	svt_sleep_ms(500);

	/* The context still works: a new QP sends to the same peer. */
	qp = svt_create_qp(d.pd, cq, cq, &qi);
	svt_qp_connect(qp, NULL, NULL, 0);
	while (ibv_poll_cq(cq, 64, wc) > 0)
		; /* the destroyed QP's completions, if any */
	SVT_CHECK_OK(svt_post_ud_send(qp, 99, IBV_SEND_SIGNALED, buf, MSG, mr->lkey, ah,
				      peer.qpn, conn.qkey));
	svt_poll_ok(cq, 1, wc, 10000);
	SVT_CHECK_EQ(wc[0].wr_id, 99);

	/* An AH destroyed while datagrams that name it wait: they still go
	 * out and complete (a NIC's WQE carries its own copy of the address). */
	struct ibv_ah *ah2 = ibv_create_ah(d.pd, &aa);

	SVT_CHECK(ah2 != NULL);
	svt_child_kill(&c, SIGSTOP);
	posted = done = 0;
	fill_until_parked(qp, cq, buf, mr, ah2, &peer, &conn, &posted, &done);
	SVT_CHECK_OK(ibv_destroy_ah(ah2));
	svt_child_kill(&c, SIGCONT);
	while (done < posted) {
		int n = posted - done < 64 ? posted - done : 64;

		svt_poll_ok(cq, n, wc, 20000);
		done += n;
	}

	svt_sync_send(c.wfd, 'Q');
	SVT_CHECK_EQ(svt_child_wait(&c, 20000), 0);
	SVT_CHECK_OK(ibv_destroy_qp(qp));
	SVT_CHECK_OK(ibv_destroy_ah(ah));
	SVT_CHECK_OK(ibv_dereg_mr(mr));
	SVT_CHECK_OK(ibv_destroy_cq(cq));
	free(buf);
	svt_dev_close(&d);
	return 0;
}
