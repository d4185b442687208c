/*
 * Multicast groups of a context: which UD QPs are attached to which
 * multicast GID (ibv_attach_mcast), and the delivery of a datagram sent to
 * a group (destination QPN 0xFFFFFF) to each of them.  The group itself, on
 * the wire, is a connection of the multicast transport
 * (src/transport/mcast.c): joined while any QP of the context is attached,
 * so that every attached QP anywhere gets its copy, the sender's own QP
 * included (multicast loopback, as the IBA has it).
 *
 * As with Linux's verbs: only UD QPs; the GID must be a multicast one; the
 * LID is not looked at on a RoCE port; attaching a QP again is a no-op;
 * detaching one that is not attached is EINVAL; a QP that is still
 * attached cannot be destroyed (EBUSY).  Limits as query_device reports
 * them: SV_MCAST_MAX_GRP groups, SV_MCAST_MAX_QP_ATTACH QPs a group (ENOMEM
 * beyond).
 */
#include "engine/engine.h"
#include "engine/stats.h"
#include "wire/wire.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

/* ctx->mcast.lock held */
static struct sv_mcg *find(struct sv_mcg_table *t, const union ibv_gid *gid)
{
	for (int i = 0; i < t->ngroups; i++)
		if (!memcmp(t->g[i].mgid.raw, gid->raw, 16))
			return &t->g[i];
	return NULL;
}

/* ctx->mcast.lock held: drop an entry with no QP left, and its connection
 * reference (the engine keeps the connection for sending). */
static void drop_group(struct sv_mcg_table *t, struct sv_mcg *g)
{
	(void)sv_conn_group_join(g->conn, false);
	sv_conn_put(g->conn);
	*g = t->g[--t->ngroups];
}

int sv_mcg_attach(struct sv_qp *qp, const union ibv_gid *gid)
{
	struct sv_context *ctx = qp->ctx;
	struct sv_mcg_table *t = &ctx->mcast;
	uint32_t qpn = qp->ex.qp_base.qp_num;
	struct sv_mcg *g;
	int err = 0;

	if (qp->ex.qp_base.qp_type != IBV_QPT_UD || !sv_gid_is_mcast(gid))
		return EINVAL;
	sv_mutex_lock(&t->lock);
	g = find(t, gid);
	if (g)
		for (int i = 0; i < g->nqp; i++)
			if (g->qpn[i] == qpn)
				goto out; /* attached already */
	if (t->total >= SV_MCAST_MAX_TOTAL || (g && g->nqp >= SV_MCAST_MAX_QP_ATTACH) ||
	    (!g && t->ngroups >= SV_MCAST_MAX_GRP)) {
		err = ENOMEM;
		goto out;
	}
	if (!g) {
		struct sv_conn *c = sv_engine_conn_mcast(ctx->eng, gid, &err);

		if (!c)
			goto out;
		if ((err = -sv_conn_group_join(c, true))) {
			sv_conn_put(c);
			goto out;
		}
		g = &t->g[t->ngroups++];
		memset(g, 0, sizeof(*g));
		g->mgid = *gid;
		g->conn = c;
	}
	g->qpn[g->nqp++] = qpn;
	t->total++;
	qp->mcast_attached++;
out:
	sv_mutex_unlock(&t->lock);
	return err;
}

int sv_mcg_detach(struct sv_qp *qp, const union ibv_gid *gid)
{
	struct sv_mcg_table *t = &qp->ctx->mcast;
	uint32_t qpn = qp->ex.qp_base.qp_num;
	struct sv_mcg *g;
	int err = EINVAL;

	sv_mutex_lock(&t->lock);
	g = find(t, gid);
	for (int i = 0; g && i < g->nqp; i++) {
		if (g->qpn[i] != qpn)
			continue;
		g->qpn[i] = g->qpn[--g->nqp];
		t->total--;
		qp->mcast_attached--;
		if (!g->nqp)
			drop_group(t, g);
		err = 0;
		break;
	}
	sv_mutex_unlock(&t->lock);
	return err;
}

bool sv_mcg_busy(struct sv_qp *qp)
{
	struct sv_mcg_table *t = &qp->ctx->mcast;
	bool busy;

	sv_mutex_lock(&t->lock);
	busy = qp->mcast_attached > 0;
	sv_mutex_unlock(&t->lock);
	return busy;
}

void sv_mcg_deliver(struct sv_conn *conn, const struct sv_opcode_info *op, uint8_t *hdr,
		      const uint8_t *payload, uint32_t plen)
{
	struct sv_context *ctx = conn->eng->ctx;
	struct sv_mcg_table *t = &ctx->mcast;
	uint32_t qpn[SV_MCAST_MAX_QP_ATTACH];
	struct sv_mcg *g;
	int n = 0;

	sv_mutex_lock(&t->lock);
	g = find(t, sv_conn_group(conn));
	if (g) {
		n = g->nqp;
		memcpy(qpn, g->qpn, sizeof(*qpn) * (size_t)n);
	}
	sv_mutex_unlock(&t->lock);
	/* each attached QP gets the datagram as if sent to it alone, but for
	 * the sender itself when it asked not to (BLOCK_SELF_MCAST_LB) */
	const struct sv_deth *deth = (const void *)(hdr + op->off_deth);
	struct in6_addr own = ctx->dev->addr;
	bool ours = sv_ip_eq(&conn->peer.ip, &own);

	for (int i = 0; i < n; i++) {
		struct sv_qp *qp = sv_qp_lookup(ctx, qpn[i]);

		if (!qp)
			continue;
		if (qp->mcast_no_self && ours && op->off_deth &&
		    (ntohl(deth->sqpn) & SV_PSN_MASK) == qpn[i]) {
			sv_qp_put(qp);
			continue;
		}
		sv_mutex_lock(&qp->lock);
		sv_stat_rx(ctx, qp, plen);
		sv_responder_rx(qp, conn, op, hdr, payload, plen, NULL);
		sv_mutex_unlock(&qp->lock);
		sv_qp_put(qp);
	}
	if (!n)
		sv_stat_rx(ctx, NULL, plen);
}

void sv_mcg_table_fini(struct sv_context *ctx)
{
	struct sv_mcg_table *t = &ctx->mcast;

	while (t->ngroups)
		drop_group(t, &t->g[t->ngroups - 1]);
	sv_mutex_destroy(&t->lock);
}
