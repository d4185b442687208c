/*
 * The port's GID table, as a RoCE port shows it for its interface, the
 * same in every process of the host (a GID is an address of the port, not
 * of a process):
 *
 *   index 0   fe80::EUI-64 of the MAC   RoCE v1
 *   index 1   fe80::EUI-64 of the MAC   RoCE v2
 *   index 2   ::ffff:IPv4               RoCE v1
 *   index 3   ::ffff:IPv4               RoCE v2
 *   index 4   the interface's IPv6      RoCE v1   } empty when it has
 *   index 5   the interface's IPv6      RoCE v2   } none (device.c)
 *   index 6 to SV_GID_TBL_LEN - 1       empty, as the unused part of a
 *                                       RoCE port's table is (verbs.h)
 *
 * An interface without a MAC (lo) stands in with 00:00:00:00:00:00,
 * fe80::200:ff:fe00:0.  What a QP on this host is reached by is (any of
 * these GIDs, QPN): the GID names the host's port, and the QPN, unique on
 * the host (src/transport/registry.c), the process and its endpoint.
 *
 * Indexes 0 to 3 reach the host's IPv4 address, whatever the transport:
 * the link-local GIDs are resolved to it (a host of ours, or a neighbour in
 * the ARP table), so that `-g 0` works on any link, lo included.  An IPv6
 * GID proper (index 4 and 5, or a peer's IPv6 address) is reached over
 * IPv6: rocev2 sends IPv6 datagrams there, tcp connects there (from our own
 * IPv6 GID's address, tcp.c); one of this host's own is its IPv4 address
 * over tcp and shm, where endpoints are named by it.
 */
#include "verbs/verbs.h"
#include "engine/engine.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

void sv_port_gid(const struct sv_device *dev, uint32_t index, union ibv_gid *gid,
		 enum ibv_gid_type *type)
{
	memset(gid, 0, sizeof(*gid));
	if (index >= 4) {
		if (dev->has_ip6)
			memcpy(gid->raw, &dev->ip6, 16);
	} else if (index < 2) {
		gid->raw[0] = 0xfe;
		gid->raw[1] = 0x80;
		gid->raw[8] = dev->mac[0] ^ 0x02; /* universal/local bit flipped */
		gid->raw[9] = dev->mac[1];
		gid->raw[10] = dev->mac[2];
		gid->raw[11] = 0xff;
		gid->raw[12] = 0xfe;
		gid->raw[13] = dev->mac[3];
		gid->raw[14] = dev->mac[4];
		gid->raw[15] = dev->mac[5];
	} else if (dev->has_ip4) {
		gid->raw[10] = 0xff;
		gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &dev->ip.s_addr, 4);
	}
	*type = index & 1 ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
}

/* A neighbour's IPv4 address by its MAC, from the kernel's ARP table. */
static bool arp_lookup(const uint8_t mac[6], struct in_addr *ip)
{
	char line[256], want[18], ipstr[64], hw[64];
	bool found = false;
	FILE *f = fopen("/proc/net/arp", "re");

	if (!f)
		return false;
	snprintf(want, sizeof(want), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2],
		 mac[3], mac[4], mac[5]);
	while (!found && fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %*s %*s %63s", ipstr, hw) == 2 && !strcasecmp(hw, want))
			found = inet_pton(AF_INET, ipstr, ip) == 1;
	fclose(f);
	return found;
}

/* The address of the host port a GID of index 0 to 3 names (ours: its
 * endpoints' address; a neighbour's: its IPv4 address), if it is one. */
static bool gid_to_port_addr(const uint8_t *g, struct in6_addr *ip)
{
	static const uint8_t v4_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	uint8_t mac[6];
	const struct sv_device *d;
	struct in_addr v4;

	if (!memcmp(g, v4_prefix, sizeof(v4_prefix))) {
		memcpy(&v4.s_addr, &g[12], 4);
		*ip = sv_ip_from_v4(v4);
		return v4.s_addr != 0;
	}
	/* link-local from a MAC: one of our interfaces, or a neighbour */
	if (g[0] != 0xfe || g[1] != 0x80 || g[2] || g[3] || g[4] || g[5] || g[6] || g[7] ||
	    g[11] != 0xff || g[12] != 0xfe)
		return false;
	mac[0] = g[8] ^ 0x02;
	mac[1] = g[9];
	mac[2] = g[10];
	mac[3] = g[13];
	mac[4] = g[14];
	mac[5] = g[15];
	d = sv_device_by_mac(mac);
	if (d) {
		*ip = d->addr; /* a port of this host: its endpoints' address */
		return true;
	}
	if (!arp_lookup(mac, &v4))
		return false;
	*ip = sv_ip_from_v4(v4);
	return true;
}

bool sv_gid_to_ip(const struct sv_context *ctx, const union ibv_gid *gid, struct in6_addr *ip)
{
	struct in6_addr a;

	if (gid_to_port_addr(gid->raw, ip))
		return true;
	/* an IPv6 unicast address (not ::, not multicast, not an IPv4-mapped
	 * 0.0.0.0) */
	memcpy(&a, gid->raw, 16);
	if (IN6_IS_ADDR_UNSPECIFIED(&a) || IN6_IS_ADDR_MULTICAST(&a) || IN6_IS_ADDR_V4MAPPED(&a))
		return false;
	/* One of this host's ports: over tcp and shm its endpoints are named
	 * by their IPv4 address, so the processes of this host reach each
	 * other by shared memory whichever GID they were given, and a packet
	 * from the peer's endpoint is from the address the QP was given.
	 * rocev2 sends the datagrams to the IPv6 address itself. */
	if (ctx->eng->mode != SV_TRANSPORT_ROCEV2) {
		const struct sv_device *d = sv_device_by_ip6(&a);

		if (d) {
			*ip = d->addr;
			return true;
		}
	}
	*ip = a;
	return true;
}
