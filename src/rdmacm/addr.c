/*
 * Socket addresses of either family, as the CM keeps them in an id's
 * route.addr (a sockaddr_storage: sockaddr_in or sockaddr_in6).
 *
 * What a program passes is taken as the kernel's CM takes it: AF_INET and
 * AF_INET6 (AF_IB and anything else: EAFNOSUPPORT).  An IPv4-mapped IPv6
 * address (::ffff:a.b.c.d) is that IPv4 address: it names no IPv6
 * interface address, and a connection that reaches a dual-stack listener
 * from IPv4 shows up in that form, while the kernel's CM reports such a
 * request's addresses as AF_INET (cma_save_ip4_info).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "rdmacm/cm.h"

socklen_t cm_sa_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

void cm_sa_from_any(struct sockaddr_storage *out, const struct sockaddr *in)
{
	memset(out, 0, sizeof(*out));
	if (in->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)in;

		if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
			struct sockaddr_in *s = (struct sockaddr_in *)out;

			s->sin_family = AF_INET;
			s->sin_port = s6->sin6_port;
			memcpy(&s->sin_addr, &s6->sin6_addr.s6_addr[12], 4);
			return;
		}
	}
	memcpy(out, in, cm_sa_len(in));
}

int cm_sa_take(const struct sockaddr *sa, struct sockaddr_storage *out)
{
	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return EAFNOSUPPORT;
	cm_sa_from_any(out, sa);
	return 0;
}

bool cm_sa_is_any(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* 127.0.0.0/8 and ::1, which the kernel's CM binds like the wildcard */
bool cm_sa_is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) ==
		       IN_LOOPBACKNET;
	return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

bool cm_sa_is_linklocal(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

void cm_sa_set_loopback(struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else
		((struct sockaddr_in6 *)sa)->sin6_addr = in6addr_loopback;
}

void cm_sa_set_addr(struct sockaddr *sa, const struct sockaddr *from)
{
	if (sa->sa_family == AF_INET) {
		((struct sockaddr_in *)sa)->sin_addr = ((const struct sockaddr_in *)from)->sin_addr;
	} else {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
		const struct sockaddr_in6 *f6 = (const struct sockaddr_in6 *)from;

		s6->sin6_addr = f6->sin6_addr;
		s6->sin6_scope_id = f6->sin6_scope_id;
	}
}

/* What rdma_ip2gid makes of an address: a RoCE GID. */
void cm_gid_of_sa(const struct sockaddr *sa, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	if (sa->sa_family == AF_INET) {
		gid->raw[10] = gid->raw[11] = 0xff;
		memcpy(&gid->raw[12], &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else if (sa->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}
}

/* "a.b.c.d", "x::y" or "fe80::y%ifname", for messages */
const char *cm_sa_str(const struct sockaddr *sa, char *buf, size_t len)
{
	const void *a = sa->sa_family == AF_INET6
		? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
		: (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
	char ifname[IF_NAMESIZE];

	if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
	    !inet_ntop(sa->sa_family, a, buf, (socklen_t)len)) {
		snprintf(buf, len, "(family %d)", sa->sa_family);
		return buf;
	}
	if (cm_sa_is_linklocal(sa) && ((const struct sockaddr_in6 *)sa)->sin6_scope_id &&
	    if_indextoname(((const struct sockaddr_in6 *)sa)->sin6_scope_id, ifname)) {
		size_t n = strlen(buf);

		snprintf(buf + n, len - n, "%%%s", ifname);
	}
	return buf;
}
