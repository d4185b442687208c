/*
 * rdma_getaddrinfo: getaddrinfo(3) for RDMA endpoints.  softverbs devices are
 * IPv4, so the answer is the first IPv4 address, as the source (RAI_PASSIVE)
 * or the destination of a connection, with the QP type and port space the
 * hints ask for (RC over RDMA_PS_TCP unless told otherwise).
 */
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm/cm.h"

static struct sockaddr *dup_addr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *out = malloc(len);

	if (out)
		memcpy(out, sa, len);
	return out;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct addrinfo h = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai, *a;
	struct rdma_addrinfo *r;
	int ret;

	if (!res || (!node && !service))
		return cm_err(EINVAL);
	if (hints && hints->ai_family && hints->ai_family != AF_INET && hints->ai_family != AF_INET6)
		return cm_err(EAFNOSUPPORT);
	if (hints && (hints->ai_flags & RAI_PASSIVE))
		h.ai_flags |= AI_PASSIVE;
	if (hints && (hints->ai_flags & RAI_NUMERICHOST))
		h.ai_flags |= AI_NUMERICHOST;
	ret = getaddrinfo(node, service, &h, &ai);
	if (ret)
		return ret; /* a getaddrinfo code, as rdma-core returns it (gai_strerror applies) */
	for (a = ai; a && a->ai_family != AF_INET; a = a->ai_next)
		;
	r = calloc(1, sizeof(*r));
	if (!a || !r) {
		freeaddrinfo(ai);
		free(r);
		return cm_err(a ? ENOMEM : EADDRNOTAVAIL);
	}
	r->ai_flags = hints ? hints->ai_flags : 0;
	r->ai_family = AF_INET;
	r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	if (hints && hints->ai_port_space)
		r->ai_port_space = hints->ai_port_space;
	else
		r->ai_port_space = r->ai_qp_type == IBV_QPT_UD ? RDMA_PS_UDP : RDMA_PS_TCP;
	if (r->ai_flags & RAI_PASSIVE) {
		r->ai_src_addr = dup_addr(a->ai_addr, a->ai_addrlen);
		r->ai_src_len = a->ai_addrlen;
	} else {
		r->ai_dst_addr = dup_addr(a->ai_addr, a->ai_addrlen);
		r->ai_dst_len = a->ai_addrlen;
		if (hints && hints->ai_src_addr && hints->ai_src_len) {
			r->ai_src_addr = dup_addr(hints->ai_src_addr, hints->ai_src_len);
			r->ai_src_len = hints->ai_src_len;
		}
	}
	freeaddrinfo(ai);
	if (!r->ai_src_addr && !r->ai_dst_addr) {
		rdma_freeaddrinfo(r);
		return cm_err(ENOMEM);
	}
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
