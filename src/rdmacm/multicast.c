/*
 * Multicast joins on UD ids: rdma_join_multicast(_ex), rdma_leave_multicast.
 *
 * As Linux's CM does them on a RoCE port: the group's MGID is its IPv4
 * address mapped into a GID (::ffff:a.b.c.d, RoCE v2; an IPv6 address is
 * the MGID itself).  There is no subnet manager to ask, so a join completes
 * at once: the id's QP, if it has one and the join is not send-only, is
 * attached to the group (as librdmacm does when it hands out the event),
 * and RDMA_CM_EVENT_MULTICAST_JOIN carries what a sender needs (the AH
 * attributes towards the group, QPN 0xFFFFFF, Q_Key RDMA_UDP_QKEY), with the
 * join's context as param.ud.private_data.  A failed attach gives
 * RDMA_CM_EVENT_MULTICAST_ERROR instead.  Leaving detaches the QP; so do
 * rdma_destroy_qp and rdma_destroy_id.  The groups themselves are the
 * verbs' (engine/mcast.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cm.h"

#define CM_UDP_QKEY 0x01234567u /* RDMA_UDP_QKEY */

struct cm_mcast {
	struct cm_mcast *next;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	void *context;
	bool send_only;
	bool attached; /* id->pub.qp is attached to mgid */
};

/* The MGID of a group address: 0, or EINVAL for a family without one. */
static int mgid_of(const struct sockaddr *sa, union ibv_gid *mgid)
{
	memset(mgid, 0, sizeof(*mgid));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const void *)sa;

		if (!s->sin_addr.s_addr)
			return EINVAL; /* the wildcard is no group */
		mgid->raw[10] = mgid->raw[11] = 0xff;
		memcpy(mgid->raw + 12, &s->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(mgid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return EINVAL;
}

static size_t addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static bool same_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (a->sa_family != b->sa_family)
		return false;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

/* cm_lock held */
static int join(struct cm_id *id, const struct sockaddr *addr, uint32_t flags, void *context)
{
	struct cm_mcast *mc;
	struct cm_event *ev;
	int err;

	/* as Linux's CM: bound (to an address with a device) or resolved */
	if (!id->dev || (id->state != CM_BOUND && id->state != CM_ADDR_RESOLVED))
		return EINVAL;
	if (id->pub.qp_type != IBV_QPT_UD)
		return EINVAL;
	mc = calloc(1, sizeof(*mc));
	if (!mc)
		return ENOMEM;
	err = mgid_of(addr, &mc->mgid);
	if (err) {
		free(mc);
		return err;
	}
	memcpy(&mc->addr, addr, addr_len(addr));
	mc->context = context;
	mc->send_only = flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	if (id->pub.qp && !mc->send_only) {
		err = ibv_attach_mcast(id->pub.qp, &mc->mgid, 0);
		mc->attached = !err;
	}
	ev = cm_event_new(id, err ? RDMA_CM_EVENT_MULTICAST_ERROR : RDMA_CM_EVENT_MULTICAST_JOIN,
			  -err);
	if (!ev) {
		if (mc->attached)
			ibv_detach_mcast(id->pub.qp, &mc->mgid, 0);
		free(mc);
		return ENOMEM;
	}
	struct rdma_ud_param *u = &ev->pub.param.ud;

	u->private_data = context;
	u->ah_attr.is_global = 1;
	u->ah_attr.grh.dgid = mc->mgid;
	u->ah_attr.grh.sgid_index = cm_id_gid_index(id);
	u->ah_attr.grh.hop_limit = 64;
	u->ah_attr.grh.traffic_class = id->tos;
	u->ah_attr.port_num = id->pub.port_num ? id->pub.port_num : 1;
	u->qp_num = 0xffffff;
	u->qkey = CM_UDP_QKEY;
	mc->next = id->mcasts;
	id->mcasts = mc;
	cm_event_post(ev);
	return 0;
}

int rdma_join_multicast_ex(struct rdma_cm_id *pub, struct rdma_cm_join_mc_attr_ex *attr,
			   void *context)
{
	if (!pub || !attr)
		return cm_err(EINVAL);
	/* librdmacm's checks, in its order */
	if (attr->comp_mask >= RDMA_CM_JOIN_MC_ATTR_RESERVED)
		return cm_err(ENOTSUP);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !attr->addr)
		return cm_err(EINVAL);
	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->join_flags >= RDMA_MC_JOIN_FLAG_RESERVED)
		return cm_err(EINVAL);

	struct cm_id *id = cm_id_of(pub);

	sv_mutex_lock(&cm_lock);
	int err = join(id, attr->addr, attr->join_flags, context);

	sv_mutex_unlock(&cm_lock);
	if (err)
		return cm_err(err);
	return id->sync ? cm_wait_sync(id, RDMA_CM_EVENT_MULTICAST_JOIN) : 0;
}

int rdma_join_multicast(struct rdma_cm_id *pub, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex a = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = addr,
	};

	return rdma_join_multicast_ex(pub, &a, context);
}

int rdma_leave_multicast(struct rdma_cm_id *pub, struct sockaddr *addr)
{
	if (!pub || !addr)
		return cm_err(EINVAL);
	struct cm_id *id = cm_id_of(pub);
	struct cm_mcast **at, *mc = NULL;

	sv_mutex_lock(&cm_lock);
	for (at = &id->mcasts; *at; at = &(*at)->next)
		if (same_addr((struct sockaddr *)&(*at)->addr, addr)) {
			mc = *at;
			*at = mc->next;
			break;
		}
	if (mc && mc->attached && id->pub.qp)
		ibv_detach_mcast(id->pub.qp, &mc->mgid, 0);
	sv_mutex_unlock(&cm_lock);
	if (!mc)
		return cm_err(EADDRNOTAVAIL);
	free(mc);
	return 0;
}

void cm_mcast_detach_all(struct cm_id *id, struct ibv_qp *qp)
{
	for (struct cm_mcast *mc = id->mcasts; mc; mc = mc->next)
		if (mc->attached) {
			if (qp)
				ibv_detach_mcast(qp, &mc->mgid, 0);
			mc->attached = false;
		}
}

void cm_mcast_free_all(struct cm_id *id)
{
	cm_mcast_detach_all(id, id->pub.qp);
	while (id->mcasts) {
		struct cm_mcast *mc = id->mcasts;

		id->mcasts = mc->next;
		free(mc);
	}
}
