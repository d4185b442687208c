/*
 * What the verbs files share among themselves, on top of the objects
 * (engine/objects.h) and the engine's services (engine/engine.h).
 */
#ifndef SV_VERBS_H
#define SV_VERBS_H

#include "engine/objects.h"

/* rdma-core's (infiniband/driver.h, not installed by Debian); src/abi/compat.c */
const char *ibv_get_sysfs_path(void);

/* query.c: the answers of ibv_query_device/port/gid, per device (sysfs.c uses them too) */
void sv_device_attr(const struct sv_device *dev, struct ibv_device_attr *a);
struct sv_device;
void sv_port_attr(const struct sv_device *d, struct ibv_port_attr *p);
/* ctx may be NULL; EINVAL past the table, ENODATA for an empty entry */
int sv_gid_entry(const struct sv_device *dev, const struct sv_context *ctx, uint32_t index,
		 struct ibv_gid_entry *e);

/*
 * gid.c: the port's GID table (the same in every process) and what a GID
 * names.  The table is longer than what fills it, as a RoCE port's is
 * (rxe's has 1024 entries): indexes SV_GID_FILLED and up are always empty,
 * so a program looking for an unused index finds one.  16 keeps the sysfs
 * view (three files an entry, sysfs.c) small, and sgid_index, 8 bits,
 * can still name an index past the table.
 */
#define SV_GID_TBL_LEN 16
#define SV_GID_FILLED 6
void sv_port_gid(const struct sv_device *dev, uint32_t index, union ibv_gid *gid,
		 enum ibv_gid_type *type);
/* The address of the host port a GID names (ours or a neighbour's): IPv4
 * (IPv4-mapped) for indexes 0 to 3, IPv6 for an IPv6 GID where ctx's
 * transport is rocev2; false for a GID that names none (gid.c). */
bool sv_gid_to_ip(const struct sv_context *ctx, const union ibv_gid *gid, struct in6_addr *ip);
/* device.c: the device of the interface with this MAC, or NULL */
const struct sv_device *sv_device_by_mac(const uint8_t mac[6]);
/* The device of this host whose GID table shows IPv6 address ip6, if any. */
const struct sv_device *sv_device_by_ip6(const struct in6_addr *ip6);

/*
 * Per-context object counts enforce the device limits: reserve before
 * creating (false: the limit is reached, fail with ENOMEM), release on
 * destroy or on a failed creation.
 */
bool sv_ctx_reserve(struct sv_context *ctx, uint32_t *count, uint32_t max);
void sv_ctx_release(struct sv_context *ctx, uint32_t *count);

/* Remove the completions of QP qpn from the CQ (its lock held: none can be added). */
void sv_cq_clean(struct sv_cq *cq, uint32_t qpn);

uint32_t sv_mtu_bytes(enum ibv_mtu mtu);

/* Receive rings of QPs and SRQs (recv_queue.c); the owner's lock held. */
int sv_rq_init(struct sv_rq *rq, uint32_t max_wr, uint32_t max_sge); /* 0 or ENOMEM */
void sv_rq_free(struct sv_rq *rq);
int sv_rq_post(struct sv_rq *rq, const struct ibv_recv_wr *wr);     /* 0, EINVAL, ENOMEM */
/* New capacity max_wr, the posted WRs kept in order: 0, EINVAL (they would
 * not fit) or ENOMEM (the ring is unchanged). */
int sv_rq_resize(struct sv_rq *rq, uint32_t max_wr);

/* ibv_qp.handle of an ibv_open_qp handle (a QP's is its slot in ctx->qpt) */
#define SV_QP_HANDLE_OPENED UINT32_MAX
/* verbs/xrcd.c: the XRC receive QPs of x, each with a reference (*n of
 * them; free the array).  Taken under ctx->lock, which the caller must
 * not hold, and let go before any QP's lock is taken (the lock order). */
struct sv_qp **sv_xrcd_hold_qps(struct sv_context *ctx, struct sv_xrcd *x, uint32_t *n);
/* verbs/xrcd.c: the QP a handle names (an ibv_open_qp handle's XRC
 * receive QP; any other QP itself) */
struct sv_qp *sv_qp_named(struct sv_qp *qp);
/* verbs/xrcd.c, ibv_destroy_qp: closes an XRC receive QP's handle when it
 * has others (*handled); returns the QP to destroy now that its last
 * handle went, or NULL */
struct sv_qp *sv_xrc_qp_close(struct sv_qp *qp, bool *handled);
/* verbs/xrcd.c: ibv_modify_qp and ibv_query_qp of a handle of another
 * process's XRC receive QP (qp->xrc->remote), asked of that process */
int sv_xrc_remote_modify(struct sv_qp *h, struct ibv_qp_attr *attr, int mask);
int sv_xrc_remote_query(struct sv_qp *h, struct ibv_qp_attr *attr,
			struct ibv_qp_init_attr *init_attr);

#endif
