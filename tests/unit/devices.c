/*
 * unit_devices: device list, open/close, query_device(_ex), query_port,
 * GIDs and P_Keys, and errors for invalid ports/indices.
 */
#include "sv_test.h"

#include <fcntl.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

static void test_device_list(void)
{
	int num = -1;
	struct ibv_device **list = ibv_get_device_list(&num);
	bool found = false;

	SVT_CHECK_PTR(list);
	SVT_CHECK_GE(num, 1);
	SVT_CHECK(list[num] == NULL); /* NULL-terminated */
	for (int i = 0; i < num; i++) {
		const char *name = ibv_get_device_name(list[i]);

		SVT_CHECK_PTR(name);
		SVT_CHECK_GT(strlen(name), 0);
		if (strcmp(name, svt_device_name()) == 0) {
			found = true;
			/* RoCE-like device: a CA speaking the IB transport. */
			SVT_CHECK_EQ(list[i]->node_type, IBV_NODE_CA);
			SVT_CHECK_EQ(list[i]->transport_type,
				     IBV_TRANSPORT_IB);
		}
	}
	SVT_CHECK_MSG(found, "device %s not in the list", svt_device_name());

	/*
	 * Devices of loopback interfaces come after all the others, so that a
	 * program taking the first device gets one that reaches other hosts.
	 */
	bool seen_loopback = false;

	for (int i = 0; i < num; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ifreq ifr = { 0 };
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

		SVT_CHECK_GE(fd, 0);
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name + 3); /* sv_<ifname> */
		SVT_CHECK_MSG(ioctl(fd, SIOCGIFFLAGS, &ifr) == 0, "no interface %s", ifr.ifr_name);
		close(fd);
		if (ifr.ifr_flags & IFF_LOOPBACK)
			seen_loopback = true;
		else
			SVT_CHECK_MSG(!seen_loopback, "%s listed after a loopback device", name);
	}

	/* The list may be NULL-checked and freed; num may be NULL. */
	struct ibv_device **l2 = ibv_get_device_list(NULL);

	SVT_CHECK_PTR(l2);
	ibv_free_device_list(l2);
	ibv_free_device_list(list);
}

static void test_open_close(void)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_device *dev = NULL;

	SVT_CHECK_PTR(list);
	for (int i = 0; i < num; i++)
		if (strcmp(ibv_get_device_name(list[i]), svt_device_name()) == 0)
			dev = list[i];
	SVT_CHECK_PTR(dev);

	struct ibv_context *c1 = ibv_open_device(dev);
	struct ibv_context *c2 = ibv_open_device(dev);

	SVT_CHECK_PTR(c1);
	SVT_CHECK_PTR(c2);
	SVT_CHECK(c1 != c2);
	SVT_CHECK(c1->device == dev);
	SVT_CHECK_GE(c1->async_fd, 0);
	SVT_CHECK_GE(fcntl(c1->async_fd, F_GETFD), 0); /* a real fd */
	SVT_CHECK_GE(c1->num_comp_vectors, 1);

	/* Contexts outlive the device list (ibv_get_device_list(3)). */
	ibv_free_device_list(list);
	struct ibv_device_attr da;

	SVT_CHECK_OK(ibv_query_device(c1, &da));

	/* A GID names the port, not a context: the same table in both,
	 * link-local v1/v2 then IPv4-mapped v1/v2 (issue 11) */
	union ibv_gid g1, g2;
	struct ibv_port_attr pa;

	SVT_CHECK_OK(ibv_query_port(c1, 1, &pa));
	SVT_CHECK_EQ(pa.gid_tbl_len, 16); /* 6 filled, the rest empty (below) */
	for (int i = 0; i < 4; i++) {
		struct ibv_gid_entry e;

		SVT_CHECK_OK(ibv_query_gid(c1, 1, i, &g1));
		SVT_CHECK_OK(ibv_query_gid(c2, 1, i, &g2));
		SVT_CHECK_MEM(&g1, &g2, sizeof(g1));
		SVT_CHECK_OK(ibv_query_gid_ex(c1, 1, (uint32_t)i, &e, 0));
		SVT_CHECK_MEM(&e.gid, &g1, sizeof(g1));
		SVT_CHECK_EQ(e.gid_type, i & 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1);
		if (i < 2) {
			SVT_CHECK(g1.raw[0] == 0xfe && g1.raw[1] == 0x80 && g1.raw[11] == 0xff &&
				  g1.raw[12] == 0xfe);
		} else {
			SVT_CHECK(g1.raw[10] == 0xff && g1.raw[11] == 0xff && g1.raw[0] == 0);
		}
	}
	/* then the interface's IPv6 address, v1/v2, or two empty entries:
	 * zeros from ibv_query_gid, ENODATA from ibv_query_gid_ex */
	for (int i = 4; i < 6; i++) {
		struct ibv_gid_entry e;
		static const uint8_t zero[16];
		int r = ibv_query_gid_ex(c1, 1, (uint32_t)i, &e, 0);

		SVT_CHECK_OK(ibv_query_gid(c1, 1, i, &g1));
		SVT_CHECK_OK(ibv_query_gid(c2, 1, i, &g2));
		SVT_CHECK_MEM(&g1, &g2, sizeof(g1));
		if (r == 0) {
			SVT_CHECK_MEM(&e.gid, &g1, sizeof(g1));
			SVT_CHECK_EQ(e.gid_type, i & 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1);
			/* an IPv6 address proper: not link-local, not IPv4-mapped */
			SVT_CHECK(memcmp(g1.raw, zero, 16) != 0);
			SVT_CHECK(!(g1.raw[0] == 0xfe && (g1.raw[1] & 0xc0) == 0x80));
			SVT_CHECK(!(g1.raw[10] == 0xff && g1.raw[11] == 0xff && g1.raw[0] == 0));
		} else {
			SVT_CHECK_EQ(r, ENODATA);
			SVT_CHECK_MEM(g1.raw, zero, 16);
		}
	}
	SVT_CHECK_EQ(ibv_query_gid(c1, 1, pa.gid_tbl_len, &g1), -1);

	SVT_CHECK_OK(ibv_close_device(c2));
	SVT_CHECK_OK(ibv_close_device(c1));

	/* Open/close repeatedly: nothing accumulates that makes it fail. */
	for (int i = 0; i < 20; i++) {
		struct ibv_context *c = svt_open_context();
		SVT_CHECK_OK(ibv_close_device(c));
	}
}

static void test_query_device(struct ibv_context *ctx)
{
	struct ibv_device_attr a;

	memset(&a, 0, sizeof(a));
	SVT_CHECK_OK(ibv_query_device(ctx, &a));
	SVT_CHECK_EQ(a.phys_port_cnt, 1);
	SVT_CHECK_GT(a.max_mr_size, 0);
	SVT_CHECK_NE(a.page_size_cap, 0);
	SVT_CHECK_GT(a.max_qp, 0);
	SVT_CHECK_GT(a.max_qp_wr, 0);
	SVT_CHECK_GT(a.max_sge, 1);
	SVT_CHECK_GT(a.max_cq, 0);
	SVT_CHECK_GT(a.max_cqe, 0);
	SVT_CHECK_GT(a.max_mr, 0);
	SVT_CHECK_GT(a.max_pd, 0);
	SVT_CHECK_GT(a.max_qp_rd_atom, 0);
	SVT_CHECK_GT(a.max_qp_init_rd_atom, 0);
	SVT_CHECK_GT(a.max_res_rd_atom, 0);
	SVT_CHECK_GT(a.max_srq, 0);
	SVT_CHECK_GT(a.max_srq_wr, 0);
	SVT_CHECK_GT(a.max_srq_sge, 0);
	SVT_CHECK_GT(a.max_ah, 0);
	SVT_CHECK_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
	SVT_CHECK_GT(strnlen(a.fw_ver, sizeof(a.fw_ver)), 0);

	/* query_device_ex: orig_attr matches query_device. */
	struct ibv_device_attr_ex ax;

	memset(&ax, 0, sizeof(ax));
	SVT_CHECK_OK(ibv_query_device_ex(ctx, NULL, &ax));
	SVT_CHECK_EQ(ax.orig_attr.max_qp, a.max_qp);
	SVT_CHECK_EQ(ax.orig_attr.max_qp_wr, a.max_qp_wr);
	SVT_CHECK_EQ(ax.orig_attr.max_sge, a.max_sge);
	SVT_CHECK_EQ(ax.orig_attr.max_cqe, a.max_cqe);
	SVT_CHECK_EQ(ax.orig_attr.atomic_cap, a.atomic_cap);
	SVT_CHECK_EQ(ax.orig_attr.phys_port_cnt, 1);
	SVT_CHECK_EQ(ax.orig_attr.max_mr_size, a.max_mr_size);
	SVT_CHECK_EQ(ax.orig_attr.node_guid, a.node_guid);

	/* The device's GUID is reported consistently. */
	struct ibv_device **list = ibv_get_device_list(NULL);

	SVT_CHECK_PTR(list);
	for (int i = 0; list[i]; i++)
		if (strcmp(ibv_get_device_name(list[i]), svt_device_name()) == 0)
			SVT_CHECK_EQ(ibv_get_device_guid(list[i]), a.node_guid);
	ibv_free_device_list(list);
}

static void test_query_port(struct ibv_context *ctx)
{
	struct ibv_port_attr p;

	memset(&p, 0, sizeof(p));
	SVT_CHECK_OK(ibv_query_port(ctx, 1, &p));
	SVT_CHECK_EQ(p.state, IBV_PORT_ACTIVE);
	SVT_CHECK_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
	SVT_CHECK_EQ(p.phys_state, 5); /* LinkUp */
	SVT_CHECK_EQ(p.active_mtu, IBV_MTU_4096);
	SVT_CHECK_GE(p.max_mtu, p.active_mtu);
	SVT_CHECK_GE(p.gid_tbl_len, 1);
	SVT_CHECK_GE(p.pkey_tbl_len, 1);
	SVT_CHECK_GT(p.max_msg_sz, 0);
	SVT_CHECK_EQ(p.lid, 0); /* Ethernet: no LIDs */
	SVT_CHECK_NE(p.active_speed, 0);
	SVT_CHECK_NE(p.active_width, 0);
	SVT_CHECK(ibv_port_state_str(p.state) != NULL);

	/* Invalid ports fail and report an errno value. */
	SVT_CHECK_RC(ibv_query_port(ctx, 2, &p), EINVAL);
	SVT_CHECK_RC(ibv_query_port(ctx, 0, &p), EINVAL);
	SVT_CHECK_RC(ibv_query_port(ctx, 255, &p), EINVAL);
}

/* rdma-core's (IBVERBS_PRIVATE_34, infiniband/driver.h, which Debian does not install) */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);

/*
 * The table is longer than what fills it, as a RoCE port's (issue 34):
 * indexes 6 to gid_tbl_len - 1 are empty, as Linux answers an empty entry
 * (ibv_query_gid: a zero GID and 0; ibv_query_gid_ex: ENODATA;
 * ibv_query_gid_type: 0, type 0), and the index past the table is an error
 * (-1, EINVAL, -1).  ibv_query_gid_table lists only the filled ones.
 */
static void test_empty_gids(struct ibv_context *ctx)
{
	static const uint8_t zero[16];
	struct ibv_port_attr p;
	struct ibv_gid_entry e, tab[64];
	union ibv_gid gid;
	ssize_t n;
	int type;

	SVT_CHECK_OK(ibv_query_port(ctx, 1, &p));
	SVT_CHECK_GT(p.gid_tbl_len, 6);
	SVT_CHECK_LE(p.gid_tbl_len, 64);
	for (int i = 6; i < p.gid_tbl_len; i++) {
		memset(&gid, 0xa5, sizeof(gid));
		SVT_CHECK_OK(ibv_query_gid(ctx, 1, i, &gid));
		SVT_CHECK_MEM(gid.raw, zero, 16);
		SVT_CHECK_EQ(ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0), ENODATA);
		type = -1;
		SVT_CHECK_OK(ibv_query_gid_type(ctx, 1, (unsigned int)i, &type));
		SVT_CHECK_EQ(type, 0);
	}
	SVT_CHECK_EQ(ibv_query_gid(ctx, 1, p.gid_tbl_len, &gid), -1);
	SVT_CHECK_EQ(ibv_query_gid_ex(ctx, 1, (uint32_t)p.gid_tbl_len, &e, 0), EINVAL);
	errno = 0;
	SVT_CHECK_EQ(ibv_query_gid_type(ctx, 1, (unsigned int)p.gid_tbl_len, &type), -1);
	SVT_CHECK_EQ(errno, EINVAL);
	type = -1;
	SVT_CHECK_OK(ibv_query_gid_type(ctx, 1, 3, &type));
	SVT_CHECK_EQ(type, 1); /* IPv4-mapped, RoCE v2 */

	n = ibv_query_gid_table(ctx, tab, 64, 0);
	SVT_CHECK_GE(n, 4);
	SVT_CHECK_LE(n, 6);
	for (ssize_t i = 0; i < n; i++)
		SVT_CHECK_LT(tab[i].gid_index, 6);
}

static void test_gids(struct ibv_context *ctx)
{
	struct ibv_port_attr p;
	union ibv_gid gid, zero;

	memset(&zero, 0, sizeof(zero));
	SVT_CHECK_OK(ibv_query_port(ctx, 1, &p));
	SVT_CHECK_OK(ibv_query_gid(ctx, 1, 0, &gid));
	SVT_CHECK_MSG(memcmp(&gid, &zero, sizeof(gid)) != 0, "GID 0 is zero");

	/* Out of range: ibv_query_gid returns -1 on error. */
	SVT_CHECK_FAILS(ibv_query_gid(ctx, 1, p.gid_tbl_len, &gid));
	SVT_CHECK_FAILS(ibv_query_gid(ctx, 2, 0, &gid));

	/* ibv_query_gid_ex agrees with ibv_query_gid. */
	struct ibv_gid_entry e;
	union ibv_gid g0;

	SVT_CHECK_OK(ibv_query_gid(ctx, 1, 0, &g0));
	memset(&e, 0xa5, sizeof(e));
	SVT_CHECK_OK(ibv_query_gid_ex(ctx, 1, 0, &e, 0));
	SVT_CHECK_MEM(&e.gid, &g0, sizeof(g0));
	SVT_CHECK_EQ(e.gid_index, 0);
	SVT_CHECK_EQ(e.port_num, 1);
	SVT_CHECK_MSG(e.gid_type == IBV_GID_TYPE_ROCE_V1 ||
			      e.gid_type == IBV_GID_TYPE_ROCE_V2,
		      "Ethernet link layer but gid_type %u", e.gid_type);
	SVT_CHECK_FAILS(ibv_query_gid_ex(ctx, 2, 0, &e, 0));

	/* ibv_query_gid_table: at least GID 0, first entry matches. */
	struct ibv_gid_entry tab[16];
	ssize_t n = ibv_query_gid_table(ctx, tab, 16, 0);

	SVT_CHECK_GE(n, 1);
	SVT_CHECK_LE(n, p.gid_tbl_len);
	bool seen = false;

	for (ssize_t i = 0; i < n; i++) {
		SVT_CHECK_EQ(tab[i].port_num, 1);
		if (tab[i].gid_index == 0) {
			SVT_CHECK_MEM(&tab[i].gid, &g0, sizeof(g0));
			seen = true;
		}
	}
	SVT_CHECK_MSG(seen, "GID index 0 missing from ibv_query_gid_table");
	/* Too small an array is an error, not an overflow. */
	if (n > 1)
		SVT_CHECK_LT(ibv_query_gid_table(ctx, tab, 1, 0), 0);
}

static void test_pkeys(struct ibv_context *ctx)
{
	struct ibv_port_attr p;
	__be16 pkey = 0;

	SVT_CHECK_OK(ibv_query_port(ctx, 1, &p));
	SVT_CHECK_OK(ibv_query_pkey(ctx, 1, 0, &pkey));
	SVT_CHECK_EQ(pkey, 0xffff); /* default full-membership P_Key */
	SVT_CHECK_FAILS(ibv_query_pkey(ctx, 1, p.pkey_tbl_len, &pkey));
	SVT_CHECK_FAILS(ibv_query_pkey(ctx, 2, 0, &pkey));
	SVT_CHECK_EQ(ibv_get_pkey_index(ctx, 1, 0xffff), 0);
}

int main(void)
{
	svt_watchdog(50);
	test_device_list();
	test_open_close();

	struct ibv_context *ctx = svt_open_context();

	test_query_device(ctx);
	test_query_port(ctx);
	test_gids(ctx);
	test_empty_gids(ctx);
	test_pkeys(ctx);
	SVT_CHECK_OK(ibv_close_device(ctx));
	return 0;
}
