/*
 * rdma_getaddrinfo: getaddrinfo(3) for RDMA endpoints.  As rdma-core's, a
 * name is resolved in the hints' family (IPv4, IPv6, or either) to
 * getaddrinfo's first answer, as the source (RAI_PASSIVE) or the
 * destination of a connection.
 *
 * The call forms are rdma-core's: a node and/or a service, resolved with
 * getaddrinfo; or neither, with the addresses already in the hints (what
 * libfabric's verbs provider passes), which are then copied as they are.
 * Either way the hints' source address is carried into the answer when the
 * name did not give one, and flags, QP type and port space come from the
 * hints, or else from the socket type and protocol getaddrinfo reports.
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cm.h"

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src,
		     socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return ENOMEM;
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

/* The getaddrinfo hints that the RDMA hints imply. */
static void to_ai_hints(struct addrinfo *h, const struct rdma_addrinfo *hints)
{
	memset(h, 0, sizeof(*h));
	/* AF_IB names are IP addresses looked up in any family (rdma-core's
	 * AF_IB form, RAI_FAMILY, is not offered here) */
	if (hints->ai_family != AF_IB)
		h->ai_family = hints->ai_family;
	if (hints->ai_flags & RAI_PASSIVE)
		h->ai_flags |= AI_PASSIVE;
	if (hints->ai_flags & RAI_NUMERICHOST)
		h->ai_flags |= AI_NUMERICHOST;
	if (hints->ai_qp_type == IBV_QPT_UD)
		h->ai_socktype = SOCK_DGRAM;
	else if (hints->ai_qp_type)
		h->ai_socktype = SOCK_STREAM;
	/* the protocol follows the port space; RDMA_PS_IB carries both kinds */
	if (hints->ai_port_space == RDMA_PS_TCP)
		h->ai_protocol = IPPROTO_TCP;
	else if (hints->ai_port_space == RDMA_PS_UDP || hints->ai_port_space == RDMA_PS_IPOIB)
		h->ai_protocol = IPPROTO_UDP;
	else if (hints->ai_port_space == RDMA_PS_IB && h->ai_socktype)
		h->ai_protocol = h->ai_socktype == SOCK_DGRAM ? IPPROTO_UDP : IPPROTO_TCP;
	if (!h->ai_socktype && !h->ai_protocol)
		h->ai_socktype = SOCK_STREAM; /* one answer per address, not one per socket type */
}

/*
 * Resolve node/service and fill the answer from the first result, as
 * rdma-core does.  Returns 0, a getaddrinfo code (negative) or an errno
 * value.
 */
static int resolve_name(const char *node, const char *service, const struct rdma_addrinfo *hints,
			struct rdma_addrinfo *r)
{
	struct addrinfo h, *ai, *a;
	int ret;

	to_ai_hints(&h, hints);
	ret = getaddrinfo(node, service, &h, &ai);
	if (ret)
		return ret; /* a getaddrinfo code (negative), as rdma-core returns it */
	/* AF_INET or AF_INET6: getaddrinfo was asked for no other family */
	for (a = ai; a && a->ai_family != AF_INET && a->ai_family != AF_INET6; a = a->ai_next)
		;
	if (!a) {
		freeaddrinfo(ai);
		return EADDRNOTAVAIL;
	}
	r->ai_flags = hints->ai_flags & RAI_PASSIVE; /* as rdma-core: the rest were for the lookup */
	r->ai_family = a->ai_family;
	r->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type
			: a->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
	r->ai_port_space = hints->ai_port_space ? hints->ai_port_space
			   : a->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP;
	if (hints->ai_flags & RAI_PASSIVE)
		ret = copy_addr(&r->ai_src_addr, &r->ai_src_len, a->ai_addr, a->ai_addrlen);
	else
		ret = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, a->ai_addr, a->ai_addrlen);
	freeaddrinfo(ai);
	return ret;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo no_hints;
	struct rdma_addrinfo *r;
	int ret = 0;

	if (!res || (!node && !service && !hints))
		return cm_err(EINVAL);
	if (!hints)
		hints = &no_hints;
	if (hints->ai_family && hints->ai_family != AF_INET && hints->ai_family != AF_INET6 &&
	    hints->ai_family != AF_IB)
		return cm_err(EAFNOSUPPORT);
	r = calloc(1, sizeof(*r));
	if (!r)
		return cm_err(ENOMEM);
	if (node || service) {
		ret = resolve_name(node, service, hints, r);
	} else {
		/* the addresses are in the hints: take them as they are */
		r->ai_flags = hints->ai_flags;
		r->ai_family = hints->ai_family;
		r->ai_qp_type = hints->ai_qp_type;
		r->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_addr && hints->ai_dst_len)
			ret = copy_addr(&r->ai_dst_addr, &r->ai_dst_len, hints->ai_dst_addr,
					hints->ai_dst_len);
	}
	if (!ret && !r->ai_src_addr && hints->ai_src_addr && hints->ai_src_len)
		ret = copy_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr,
				hints->ai_src_len);
	if (ret) {
		rdma_freeaddrinfo(r);
		return ret < 0 ? ret : cm_err(ret);
	}
	if (!r->ai_family && (r->ai_src_addr || r->ai_dst_addr))
		r->ai_family = (r->ai_src_addr ? r->ai_src_addr : r->ai_dst_addr)->sa_family;
	*res = r;
	return 0;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}
