/* Device, port, GID and P_Key queries: the device model of BRIEF §4. */
#include "verbs/verbs.h"
#include "engine/engine.h"
#include "engine/stats.h"

#include <errno.h>
#include <net/if.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * The answers below depend on the device, not on an opened context, so the
 * file-system view of the devices (sysfs.c) is made from the same functions.
 */
void sv_device_attr(const struct sv_device *dev, struct ibv_device_attr *a)
{
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "softverbs-0.1.0");
	a->node_guid = dev->guid;
	a->sys_image_guid = dev->guid;
	a->max_mr_size = SV_MAX_MR_SIZE;
	a->page_size_cap = 0xfffff000; /* any power of two from 4 KiB */
	a->vendor_id = SV_VENDOR_ID;
	a->vendor_part_id = 1;
	a->hw_ver = 1;
	a->max_qp = SV_MAX_QP;
	a->max_qp_wr = SV_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_CURR_QP_STATE_MOD |
			      IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_SRQ_RESIZE |
			      IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
	a->max_mw = SV_MAX_MR; /* windows and regions share the key table */
	a->max_sge = SV_MAX_SGE;
	a->max_sge_rd = SV_MAX_SGE;
	a->max_cq = SV_MAX_CQ;
	a->max_cqe = SV_MAX_CQE;
	a->max_mr = SV_MAX_MR;
	a->max_pd = SV_MAX_PD;
	a->max_qp_rd_atom = SV_MAX_QP_RD_ATOM;
	a->max_ee_rd_atom = 0;
	a->max_res_rd_atom = SV_MAX_QP_RD_ATOM * SV_MAX_QP;
	a->max_qp_init_rd_atom = SV_MAX_QP_RD_ATOM;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = SV_MAX_AH;
	/* UD multicast (engine/mcast.c); the limits are a context's */
	a->max_mcast_grp = SV_MCAST_MAX_GRP;
	a->max_mcast_qp_attach = SV_MCAST_MAX_QP_ATTACH;
	a->max_total_mcast_qp_attach = SV_MCAST_MAX_TOTAL;
	a->max_srq = SV_MAX_SRQ;
	a->max_srq_wr = SV_MAX_SRQ_WR;
	a->max_srq_sge = SV_MAX_SGE;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *device_attr)
{
	if (!context || !device_attr)
		return EINVAL;
	sv_device_attr(to_sv_ctx(context)->dev, device_attr);
	return 0;
}

/*
 * The kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE (rdma/ib_user_ioctl_verbs.h
 * since Linux 6.2), which Debian 12's rdma-core headers predate.
 */
#define SV_DEVICE_CAP_ATOMIC_WRITE (1ULL << 40)

static int sv_query_device_ex(struct ibv_context *context,
			      const struct ibv_query_device_ex_input *input,
			      struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ibv_device_attr_ex a;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(a.orig_attr))
		return EINVAL;
	memset(&a, 0, sizeof(a));
	sv_device_attr(to_sv_ctx(context)->dev, &a.orig_attr);
	/* the same flags, and those only the 64-bit field can carry */
	a.device_cap_flags_ex = a.orig_attr.device_cap_flags | SV_DEVICE_CAP_ATOMIC_WRITE;
	/* on-demand MRs: every MR behaves so (nothing is pinned), and the
	 * implicit kind (the whole address space, verbs/mr.c) is offered */
	a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
	a.odp_caps.per_transport_caps.rc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	a.odp_caps.per_transport_caps.uc_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
		IBV_ODP_SUPPORT_SRQ_RECV;
	a.odp_caps.per_transport_caps.ud_odp_caps =
		IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
	/* XRC sends as RC does and receives through XRC SRQs only (no RECV) */
	a.xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			 IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	a.max_dm_size = 0;
	a.phys_port_cnt_ex = 1;
	memcpy(attr, &a, SV_MIN(attr_size, sizeof(a)));
	return 0;
}

/*
 * The port's active MTU.  A stream carries packets of any MTU, so 4096;
 * under rocev2 each packet is one IP datagram on the interface, sent with
 * DF, so the largest IB MTU whose packets fit the interface's MTU with
 * their headers (IPv4 20, UDP 8, the longest IB headers and the ICRC: 80
 * in all, as rxe reckons): 1024 on an Ethernet link of 1500.
 */
static enum ibv_mtu port_mtu(const struct sv_device *d)
{
	struct ifreq ifr = { 0 };
	int fd, mtu = 0;
	enum ibv_mtu m = SV_PORT_MTU;

	if (!d || sv_transport_mode() != SV_TRANSPORT_ROCEV2)
		return SV_PORT_MTU;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", d->ifname);
	if (fd >= 0 && !ioctl(fd, SIOCGIFMTU, &ifr))
		mtu = ifr.ifr_mtu;
	if (fd >= 0)
		close(fd);
	if (mtu <= 0)
		return SV_PORT_MTU;
	while (m > IBV_MTU_256 && sv_mtu_bytes(m) + 80 > (uint32_t)mtu)
		m--;
	return m;
}

void sv_port_attr(const struct sv_device *d, struct ibv_port_attr *p)
{
	memset(p, 0, sizeof(*p));
	p->state = IBV_PORT_ACTIVE;
	p->max_mtu = SV_PORT_MTU;
	p->active_mtu = port_mtu(d);
	p->gid_tbl_len = SV_GID_TBL_LEN;
	p->port_cap_flags = 0;
	p->max_msg_sz = SV_MAX_MSG_SIZE;
	p->bad_pkey_cntr = 0;
	p->qkey_viol_cntr = 0;
	p->pkey_tbl_len = 1;
	p->lid = 0;
	p->sm_lid = 0;
	p->lmc = 0;
	p->max_vl_num = 1;
	p->sm_sl = 0;
	p->subnet_timeout = 0;
	p->init_type_reply = 0;
	p->active_width = 2;  /* 4X */
	p->active_speed = 32; /* EDR: nominal, a software device has no line rate */
	p->phys_state = 5;    /* LinkUp */
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
	p->flags = 0;
	p->port_cap_flags2 = 0;
}

/*
 * The port's two counters.  P_Keys are never violated (one partition, every
 * P_Key is 0xffff): bad_pkey_cntr stays 0.  qkey_viol_cntr counts UD
 * datagrams dropped for a wrong Q_Key by every live context of the device
 * (this user's, on this host), as hw_counters/qkey_violations in the sysfs
 * view and `softverbs stat` show it; saturating at 2^32 - 1 (not at 0xffff
 * as an InfiniBand port's 16-bit counter would).
 */
static uint32_t port_qkey_violations(struct sv_context *ctx)
{
	uint64_t n = sv_stats_device_counter(ctx, SV_QPC_QKEY_VIOL);

	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
		    struct _compat_ibv_port_attr *port_attr)
{
	struct ibv_port_attr a;

	if (!context || !port_attr || port_num != 1)
		return EINVAL;
	sv_port_attr(to_sv_ctx(context)->dev, &a);
	a.qkey_viol_cntr = port_qkey_violations(to_sv_ctx(context));
	/* the legacy struct is today's ibv_port_attr up to (not including) flags */
	memcpy(port_attr, &a, offsetof(struct ibv_port_attr, flags));
	return 0;
}

static int sv_query_port(struct ibv_context *context, uint8_t port_num,
			 struct ibv_port_attr *port_attr, size_t len)
{
	struct ibv_port_attr a;

	if (port_num != 1 || !port_attr)
		return EINVAL;
	sv_port_attr(to_sv_ctx(context)->dev, &a);
	a.qkey_viol_cntr = port_qkey_violations(to_sv_ctx(context));
	memcpy(port_attr, &a, SV_MIN(len, sizeof(a)));
	return 0;
}

/* GID table entry index of the device's port 1 (gid.c: the same in every process). */
int sv_gid_entry(const struct sv_device *dev, const struct sv_context *ctx, uint32_t index,
		 struct ibv_gid_entry *e)
{
	enum ibv_gid_type type;

	(void)ctx;
	if (index >= SV_GID_TBL_LEN)
		return EINVAL; /* past the table, as Linux's rdma_get_gid_attr */
	if (index >= SV_GID_FILLED || (index >= 4 && !dev->has_ip6) ||
	    (index >= 2 && index < 4 && !dev->has_ip4))
		return ENODATA; /* an empty entry */
	memset(e, 0, sizeof(*e));
	sv_port_gid(dev, index, &e->gid, &type);
	e->gid_index = index;
	e->port_num = 1;
	e->gid_type = type;
	e->ndev_ifindex = (uint32_t)dev->ifindex;
	return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
	struct ibv_gid_entry e;

	if (!context || !gid || port_num != 1 || index < 0 || index >= SV_GID_TBL_LEN)
		return -1; /* rdma-core returns -1 here */
	/* an empty entry reads as zeros, as in rdma-core */
	if (sv_gid_entry(to_sv_ctx(context)->dev, to_sv_ctx(context), (uint32_t)index, &e))
		memset(&e, 0, sizeof(e));
	*gid = e.gid;
	return 0;
}

/*
 * rdma-core private: *type uses the sysfs numbering (0 IB/RoCE v1, 1 RoCE
 * v2).  An empty entry is type 0 and no error, as rdma-core answers it
 * (ibv_devinfo -v asks every index of the table); past the table -1.
 */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type)
{
	struct ibv_gid_entry e;
	int err;

	if (!context || !type || port_num != 1) {
		errno = EINVAL;
		return -1;
	}
	err = sv_gid_entry(to_sv_ctx(context)->dev, to_sv_ctx(context), index, &e);
	if (err == EINVAL) {
		errno = EINVAL;
		return -1;
	}
	*type = !err && e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
	return 0;
}

int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry e;

	if (!context || !entry || flags || entry_size < sizeof(e))
		return EINVAL;
	int err;

	if (port_num != 1)
		return EINVAL;
	/* ENODATA for an empty entry, EINVAL past the table */
	err = sv_gid_entry(to_sv_ctx(context)->dev, to_sv_ctx(context), gid_index, &e);
	if (err)
		return err;
	memcpy(entry, &e, sizeof(e));
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	if (!context || flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	struct sv_context *ctx = to_sv_ctx(context);
	struct ibv_gid_entry e;
	size_t n = 0;

	for (uint32_t i = 0; i < SV_GID_TBL_LEN; i++) {
		if (sv_gid_entry(ctx->dev, ctx, i, &e))
			continue; /* empty: not listed */
		if (n == max_entries)
			return -EINVAL; /* the table does not fit */
		/* entries are entry_size apart: the caller's struct may have grown */
		memcpy((char *)entries + n * entry_size, &e, sizeof(e));
		n++;
	}
	return (ssize_t)n;
}

int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index, __be16 *pkey)
{
	if (!context || !pkey || port_num != 1 || index != 0)
		return -1;
	*pkey = 0xffff; /* the default P_Key, full membership */
	return 0;
}

int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	if (!context || port_num != 1)
		return -1;
	return pkey == 0xffff ? 0 : -1;
}

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
				uint8_t eth_mac[6], uint16_t *vid)
{
	(void)context;
	(void)attr;
	/* no Ethernet framing exists underneath; report a null L2 address */
	memset(eth_mac, 0, 6);
	if (vid)
		*vid = 0xffff;
	return 0;
}

/* context ops reached through the header's inline functions */
int sv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
struct ibv_mw *sv_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int sv_dealloc_mw(struct ibv_mw *mw);
int sv_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *mw_bind);
int sv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags,
		 struct ibv_sge *sg_list, uint32_t num_sge);
int sv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int sv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
int sv_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);
int sv_req_notify_cq(struct ibv_cq *cq, int solicited_only);
struct ibv_cq_ex *sv_create_cq_ex(struct ibv_context *context, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *sv_create_qp_ex(struct ibv_context *context, struct ibv_qp_init_attr_ex *attr);
struct ibv_srq *sv_create_srq_ex(struct ibv_context *context, struct ibv_srq_init_attr_ex *attr);
int sv_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_xrcd *sv_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr);
int sv_close_xrcd(struct ibv_xrcd *xrcd);
struct ibv_qp *sv_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr);
int sv_modify_cq(struct ibv_cq *cq, struct ibv_modify_cq_attr *attr);

void sv_context_fill_ops(struct sv_context *ctx)
{
	struct verbs_context *v = &ctx->vctx;

	v->context.ops.post_send = sv_post_send;
	v->context.ops.alloc_mw = sv_alloc_mw;
	v->context.ops.dealloc_mw = sv_dealloc_mw;
	v->context.ops.bind_mw = sv_bind_mw;
	v->context.ops.post_recv = sv_post_recv;
	v->context.ops.post_srq_recv = sv_post_srq_recv;
	v->context.ops.poll_cq = sv_poll_cq;
	v->context.ops.req_notify_cq = sv_req_notify_cq;
	v->query_port = sv_query_port;
	v->query_device_ex = sv_query_device_ex;
	v->advise_mr = sv_advise_mr;
	v->create_cq_ex = sv_create_cq_ex;
	v->create_qp_ex = sv_create_qp_ex;
	v->create_srq_ex = sv_create_srq_ex;
	v->get_srq_num = sv_get_srq_num;
	v->open_xrcd = sv_open_xrcd;
	v->close_xrcd = sv_close_xrcd;
	v->open_qp = sv_open_qp;
	v->modify_cq = sv_modify_cq;
}
