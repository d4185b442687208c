/* Address handles (UD): the peer host is decoded from the GID (gid.c). */
#include "verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct sv_endpoint_addr peer;
	struct sv_context *ctx;
	struct sv_ah *ah;
	struct ibv_gid_entry src;
	bool mcast = attr && sv_gid_is_mcast(&attr->grh.dgid); /* a group (engine/mcast.c) */
	int err;

	/* RoCE addressing: the GID names the peer's host port, any filled
	 * index of ours is a valid source; the QPN of each work request names
	 * the process (its endpoint's port, transport/registry.h) */
	memset(&peer, 0, sizeof(peer));
	if (!pd || !attr || !attr->is_global || (attr->port_num && attr->port_num != 1) ||
	    (!mcast && !sv_gid_to_ip(to_sv_ctx(pd->context), &attr->grh.dgid, &peer.ip))) {
		errno = EINVAL;
		return NULL;
	}
	ctx = to_sv_ctx(pd->context);
	/* an empty source entry is ENODATA, one past the table EINVAL, as
	 * Linux's rdma_create_user_ah answers them */
	err = sv_gid_entry(ctx->dev, ctx, attr->grh.sgid_index, &src);
	if (err) {
		errno = err;
		return NULL;
	}
	if (!sv_ctx_reserve(ctx, &ctx->nah, SV_MAX_AH)) {
		errno = ENOMEM;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah) {
		sv_ctx_release(ctx, &ctx->nah);
		errno = ENOMEM;
		return NULL;
	}
	sv_ref_init(&ah->ref, 1); /* the application's */
	ah->attr = *attr;
	ah->peer = peer;
	ah->mcast = mcast;
	ah->pd = to_sv_pd(pd);
	sv_mutex_init(&ah->lock, SV_LOCK_AH);
	ah->ibah.context = pd->context;
	ah->ibah.pd = pd;
	sv_ref_get(&ah->pd->users);
	return &ah->ibah;
}

int ibv_destroy_ah(struct ibv_ah *ibah)
{
	struct sv_ah *ah = to_sv_ah(ibah);
	struct sv_context *ctx = to_sv_ctx(ibah->context);

	sv_ctx_release(ctx, &ctx->nah);
	/* UD work requests still queued with it keep it until they leave */
	sv_ah_put(ah);
	return 0;
}

int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
			struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	static const uint32_t prefer[SV_GID_FILLED] = { 3, 1, 5, 2, 0, 4 }; /* RoCE v2 first */
	int sgid = -1;

	if (!context || !wc || !grh || !ah_attr || port_num != 1)
		return -1;
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return -1; /* RoCE-style addressing always needs the GRH */
	/* our GID the packet was sent to: the GRH's destination, in our table */
	for (uint32_t k = 0; k < SV_GID_FILLED && sgid < 0; k++) {
		struct ibv_gid_entry e;

		if (sv_gid_entry(to_sv_ctx(context)->dev, NULL, prefer[k], &e))
			continue; /* empty */
		if (!memcmp(&e.gid, &grh->dgid, sizeof(e.gid)))
			sgid = (int)prefer[k];
	}
	if (sgid < 0)
		return -1;
	ah_attr->is_global = 1;
	/* reply to the sender: its GID is the GRH's source */
	ah_attr->grh.dgid = grh->sgid;
	ah_attr->grh.sgid_index = (uint8_t)sgid;
	ah_attr->grh.hop_limit = 0xff;
	ah_attr->grh.traffic_class = 0;
	ah_attr->grh.flow_label = 0;
	return 0;
}

struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
				     uint8_t port_num)
{
	struct ibv_ah_attr attr;

	if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr)) {
		errno = EINVAL;
		return NULL;
	}
	return ibv_create_ah(pd, &attr);
}
