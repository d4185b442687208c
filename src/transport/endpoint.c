/*
 * Endpoint addresses, and the GID-shaped form the HELLO carries them in.
 * An opened device's endpoint (where its transports listen) is written
 *
 *   fe80:0000:0000:0000:5356:PPPP:AABB:CCDD
 *
 * a link-local-style prefix, the marker 0x5356 ("SV"), the listener's TCP
 * port PPPP and the IPv4 address AA.BB.CC.DD.  It is not a GID of the port
 * (those are the interface's addresses, verbs/gid.c): it once was GID
 * index 0, and the form stayed in the HELLO.  The codec lives with the
 * transports, which are what the address reaches; the engine says it in
 * its HELLO, and a connection learns its peer from it.
 */
#include "transport/transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void sv_gid_encode(union ibv_gid *gid, const struct in6_addr *ip, uint16_t port)
{
	struct in_addr v4 = sv_ip_v4(ip);

	if (!sv_ip_is_v4(ip)) {
		/* an interface with IPv6 only: the address itself (the HELLO
		 * carries the port beside it, from_port) */
		memcpy(gid->raw, ip, 16);
		return;
	}
	memset(gid, 0, sizeof(*gid));
	gid->raw[0] = 0xfe;
	gid->raw[1] = 0x80;
	gid->raw[8] = 0x53;
	gid->raw[9] = 0x56;
	gid->raw[10] = (uint8_t)(port >> 8);
	gid->raw[11] = (uint8_t)port;
	memcpy(&gid->raw[12], &v4.s_addr, 4);
}

bool sv_gid_decode(const union ibv_gid *gid, struct sv_endpoint_addr *out)
{
	struct in_addr v4;

	if (gid->raw[0] != 0xfe || gid->raw[1] != 0x80 || gid->raw[8] != 0x53 ||
	    gid->raw[9] != 0x56)
		return false;
	out->port = (uint16_t)((gid->raw[10] << 8) | gid->raw[11]);
	memcpy(&v4.s_addr, &gid->raw[12], 4);
	out->ip = sv_ip_from_v4(v4);
	return out->port != 0;
}

bool sv_endpoint_ip6(const struct in6_addr *ip, bool link_local, struct in6_addr *ip6,
		     uint32_t *scope)
{
	struct ifaddrs *ifs;
	const char *name = NULL;
	struct in_addr v4 = sv_ip_v4(ip);
	bool found = false;

	if (getifaddrs(&ifs))
		return false;
	for (const struct ifaddrs *i = ifs; i && !name; i = i->ifa_next) {
		const struct sockaddr *sa = i->ifa_addr;

		if (sa && sv_ip_is_v4(ip) && sa->sa_family == AF_INET &&
		    ((const struct sockaddr_in *)sa)->sin_addr.s_addr == v4.s_addr)
			name = i->ifa_name;
		if (sa && !sv_ip_is_v4(ip) && sa->sa_family == AF_INET6 &&
		    sv_ip_eq(&((const struct sockaddr_in6 *)sa)->sin6_addr, ip))
			name = i->ifa_name;
	}
	for (const struct ifaddrs *i = ifs; i && name && !found; i = i->ifa_next) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)i->ifa_addr;

		if (!s6 || s6->sin6_family != AF_INET6 || strcmp(i->ifa_name, name) ||
		    IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) ||
		    IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) != link_local)
			continue;
		*ip6 = s6->sin6_addr;
		*scope = link_local ? if_nametoindex(name) : 0;
		found = true;
	}
	freeifaddrs(ifs);
	return found;
}

const char *sv_ip_str(const struct in6_addr *a, char buf[SV_IP_STRLEN])
{
	struct in_addr v4 = sv_ip_v4(a);

	if (sv_ip_is_v4(a))
		inet_ntop(AF_INET, &v4, buf, SV_IP_STRLEN);
	else
		inet_ntop(AF_INET6, a, buf, SV_IP_STRLEN);
	return buf;
}


void sv_endpoint_unix_name(struct sockaddr_un *sa, socklen_t *len, const char *kind,
			   const struct in6_addr *ip, uint16_t port)
{
	char ipbuf[SV_IP_STRLEN];
	int n;

	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	sv_ip_str(ip, ipbuf);
	/* sun_path[0] = 0: abstract namespace, scoped to the network namespace,
	 * gone with the process */
	n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "softverbs-%s/%s:%u", kind, ipbuf,
		     port);
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int sv_endpoint_unix_listen(const char *kind, const struct in6_addr *ip, uint16_t port)
{
	struct sockaddr_un sa;
	socklen_t sl;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	sv_endpoint_unix_name(&sa, &sl, kind, ip, port);
	if (bind(fd, (struct sockaddr *)&sa, sl) || listen(fd, 512)) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

bool sv_endpoint_unix_ours(int fd)
{
	struct ucred cr = { .uid = (uid_t)-1 };
	socklen_t l = sizeof(cr);

	if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) && cr.uid == getuid())
		return true;
	sv_warn_limited("an endpoint's unix socket is held by another user (uid %d): "
			"nothing is passed to it",
			(int)cr.uid);
	return false;
}
