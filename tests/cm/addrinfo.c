/*
 * cm_addrinfo: the call forms of rdma_getaddrinfo(3), as rdma-core's
 * librdmacm answers them (librdmacm/addrinfo.c).
 *   - node + service: the destination, RC over RDMA_PS_TCP by default; with
 *     hints->ai_qp_type UD the port space is RDMA_PS_UDP
 *   - service only with RAI_PASSIVE: the source is the wildcard address and
 *     the port, flags say passive
 *   - neither node nor service, the addresses in the hints only (what
 *     libfabric's verbs provider passes): ai_src_addr only, ai_dst_addr
 *     only, both; the answer holds copies (same bytes, its own memory) and
 *     the hints' flags, QP type and port space
 *   - node + service with hints->ai_src_addr: the source is copied from the
 *     hints when the name gave none (active side), ignored when it did
 *     (passive side)
 *   - errors: RAI_NUMERICHOST with a host name is getaddrinfo's EAI_NONAME
 *     (returned as is); an unknown service name too; res NULL, or node,
 *     service and hints all NULL: -1/EINVAL; an address family other than
 *     IPv4, IPv6 or AF_IB: -1/EAFNOSUPPORT; rdma_freeaddrinfo(NULL) is safe
 *   - the answers work: a passive one is bound and listened on, an active
 *     one resolves to it
 * Ports 20560-20569.
 */
#include "cm_test.h"

#include <arpa/inet.h>
#include <netdb.h>

#define PORT_NAME 20560
#define PORT_PASSIVE 20561
#define PORT_USE 20562
#define PORT_USE_S "20562"

/* The answer is one IPv4 address: ip:port in *sa, of length len. */
static void check_sin_at(const char *file, int line, const struct sockaddr *sa, socklen_t len,
			 const char *ip, uint16_t port)
{
	if (!sa)
		svt_fail_at(file, line, "address missing, expected %s:%u", ip, port);
	if (len != sizeof(struct sockaddr_in) || sa->sa_family != AF_INET)
		svt_fail_at(file, line, "address of family %d, length %u: expected IPv4",
			    sa->sa_family, (unsigned)len);
	const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;
	char got[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &sin->sin_addr, got, sizeof(got));
	if (strcmp(got, ip) || ntohs(sin->sin_port) != port)
		svt_fail_at(file, line, "address %s:%u, expected %s:%u", got,
			    ntohs(sin->sin_port), ip, port);
}
#define check_sin(sa, len, ip, port) check_sin_at(__FILE__, __LINE__, sa, len, ip, port)

/* *copy is a copy of *orig: same length and bytes, not the same memory. */
static void check_copy_at(const char *file, int line, const struct sockaddr *copy,
			  socklen_t copy_len, const struct sockaddr *orig, socklen_t orig_len)
{
	if (!copy)
		svt_fail_at(file, line, "address from the hints missing in the answer");
	if (copy == orig)
		svt_fail_at(file, line, "the answer points at the hints' address, not at a copy "
			    "(rdma_freeaddrinfo would free the caller's memory)");
	if (copy_len != orig_len)
		svt_fail_at(file, line, "copy of length %u, the hints' is %u", (unsigned)copy_len,
			    (unsigned)orig_len);
	svt_check_mem_at(file, line, copy, orig, orig_len);
}
#define check_copy(c, cl, o, ol) check_copy_at(__FILE__, __LINE__, c, cl, o, ol)

static struct rdma_addrinfo *getai_at(const char *file, int line, const char *node,
				      const char *service, const struct rdma_addrinfo *hints)
{
	struct rdma_addrinfo *res = NULL;

	errno = 0;
	int ret = rdma_getaddrinfo(node, service, hints, &res);

	if (ret)
		svt_fail_at(file, line, "rdma_getaddrinfo(%s, %s): %d (%s), errno %d", node, service,
			    ret, ret < -1 ? gai_strerror(ret) : "", errno);
	if (!res)
		svt_fail_at(file, line, "rdma_getaddrinfo returned 0 and no answer");
	/* softverbs devices are IPv4 with one address each: one answer */
	if (res->ai_next)
		svt_fail_at(file, line, "more than one answer");
	return res;
}
#define getai(node, service, hints) getai_at(__FILE__, __LINE__, node, service, hints)

static void test_node_service(void)
{
	struct rdma_addrinfo hints, *res;
	char port[8];

	snprintf(port, sizeof(port), "%u", PORT_NAME);
	/* no hints: an RC endpoint on the TCP port space, towards node:service */
	res = getai("127.0.0.1", port, NULL);
	SVT_CHECK_EQ(res->ai_family, AF_INET);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	SVT_CHECK_EQ(res->ai_flags & RAI_PASSIVE, 0);
	check_sin(res->ai_dst_addr, res->ai_dst_len, "127.0.0.1", PORT_NAME);
	SVT_CHECK(res->ai_src_addr == NULL && res->ai_src_len == 0);
	rdma_freeaddrinfo(res);

	/* a host name resolves (ai_family AF_INET: the same answer from rdma-core) */
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	res = getai("localhost", port, &hints);
	check_sin(res->ai_dst_addr, res->ai_dst_len, "127.0.0.1", PORT_NAME);
	rdma_freeaddrinfo(res);

	/* a UD QP type in the hints gives the UDP port space */
	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_UD;
	res = getai("127.0.0.1", port, &hints);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_UD);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_UDP);
	check_sin(res->ai_dst_addr, res->ai_dst_len, "127.0.0.1", PORT_NAME);
	rdma_freeaddrinfo(res);

	/* the hints' QP type and port space are kept as they are */
	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_port_space = RDMA_PS_UDP;
	res = getai("127.0.0.1", port, &hints);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_UD);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_UDP);
	rdma_freeaddrinfo(res);
	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_RC;
	hints.ai_port_space = RDMA_PS_TCP;
	res = getai("127.0.0.1", port, &hints);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	rdma_freeaddrinfo(res);
}

static void test_passive(void)
{
	struct rdma_addrinfo hints, *res;
	char port[8];

	snprintf(port, sizeof(port), "%u", PORT_PASSIVE);
	/* service only, passive: the wildcard address to bind to */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	res = getai(NULL, port, &hints);
	SVT_CHECK(res->ai_flags & RAI_PASSIVE);
	SVT_CHECK_EQ(res->ai_family, AF_INET);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	check_sin(res->ai_src_addr, res->ai_src_len, "0.0.0.0", PORT_PASSIVE);
	SVT_CHECK(res->ai_dst_addr == NULL && res->ai_dst_len == 0);
	rdma_freeaddrinfo(res);

	/* node and service, passive: that address is the source */
	res = getai("127.0.0.1", port, &hints);
	SVT_CHECK(res->ai_flags & RAI_PASSIVE);
	check_sin(res->ai_src_addr, res->ai_src_len, "127.0.0.1", PORT_PASSIVE);
	SVT_CHECK(res->ai_dst_addr == NULL);
	rdma_freeaddrinfo(res);
}

/* node NULL, service NULL: the addresses come from the hints only */
static void test_hints_only(void)
{
	struct sockaddr_in src = cmt_sin("127.0.0.1", 20563);
	struct sockaddr_in dst = cmt_sin("127.0.0.2", 20564);
	struct rdma_addrinfo hints, *res;

	/* the source only (a passive endpoint, libfabric's fi_getinfo with a src_addr) */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_family = AF_INET;
	hints.ai_qp_type = IBV_QPT_RC;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	res = getai(NULL, NULL, &hints);
	check_copy(res->ai_src_addr, res->ai_src_len, hints.ai_src_addr, hints.ai_src_len);
	SVT_CHECK(res->ai_dst_addr == NULL && res->ai_dst_len == 0);
	SVT_CHECK_EQ(res->ai_flags, RAI_PASSIVE | RAI_NUMERICHOST);
	SVT_CHECK_EQ(res->ai_family, AF_INET);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	rdma_freeaddrinfo(res);

	/* the destination only, in the UDP port space */
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_INET;
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_port_space = RDMA_PS_UDP;
	hints.ai_dst_addr = (struct sockaddr *)&dst;
	hints.ai_dst_len = sizeof(dst);
	res = getai(NULL, NULL, &hints);
	check_copy(res->ai_dst_addr, res->ai_dst_len, hints.ai_dst_addr, hints.ai_dst_len);
	SVT_CHECK(res->ai_src_addr == NULL && res->ai_src_len == 0);
	SVT_CHECK_EQ(res->ai_flags, 0);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_UD);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_UDP);
	rdma_freeaddrinfo(res);

	/*
	 * Both, and no family in the hints (libfabric's active endpoint).
	 * rdma-core copies the hints' family (0); softverbs names the
	 * addresses' family: either is accepted.
	 */
	memset(&hints, 0, sizeof(hints));
	hints.ai_qp_type = IBV_QPT_RC;
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	hints.ai_dst_addr = (struct sockaddr *)&dst;
	hints.ai_dst_len = sizeof(dst);
	res = getai(NULL, NULL, &hints);
	check_copy(res->ai_src_addr, res->ai_src_len, hints.ai_src_addr, hints.ai_src_len);
	check_copy(res->ai_dst_addr, res->ai_dst_len, hints.ai_dst_addr, hints.ai_dst_len);
	SVT_CHECK_MSG(res->ai_family == 0 || res->ai_family == AF_INET, "ai_family %d",
		      res->ai_family);
	SVT_CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
	SVT_CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
	/* copies: changing the caller's addresses afterwards changes nothing */
	src.sin_port = 0;
	dst.sin_port = 0;
	check_sin(res->ai_src_addr, res->ai_src_len, "127.0.0.1", 20563);
	check_sin(res->ai_dst_addr, res->ai_dst_len, "127.0.0.2", 20564);
	rdma_freeaddrinfo(res);
}

/* a name and a source address in the hints */
static void test_name_and_src_hint(void)
{
	struct sockaddr_in src = cmt_sin("127.0.0.1", 20565);
	struct rdma_addrinfo hints, *res;

	/* active: the destination from the name, the source copied from the hints */
	memset(&hints, 0, sizeof(hints));
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	res = getai("127.0.0.1", "20566", &hints);
	check_sin(res->ai_dst_addr, res->ai_dst_len, "127.0.0.1", 20566);
	check_copy(res->ai_src_addr, res->ai_src_len, hints.ai_src_addr, hints.ai_src_len);
	rdma_freeaddrinfo(res);

	/* passive: the name is the source; the hints' source is not used */
	hints.ai_flags = RAI_PASSIVE;
	res = getai("127.0.0.1", "20567", &hints);
	check_sin(res->ai_src_addr, res->ai_src_len, "127.0.0.1", 20567);
	SVT_CHECK(res->ai_dst_addr == NULL);
	rdma_freeaddrinfo(res);
}

static void test_errors(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	int ret;

	/*
	 * RAI_NUMERICHOST with a host name: getaddrinfo refuses it, and its
	 * code (negative, for gai_strerror) is what rdma_getaddrinfo returns,
	 * as rdma-core's does.
	 */
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	ret = rdma_getaddrinfo("localhost", "1", &hints, &res);
	SVT_CHECK_MSG(ret == EAI_NONAME, "RAI_NUMERICHOST with a name: %d (%s), expected %d (%s)",
		      ret, ret < -1 ? gai_strerror(ret) : strerror(errno), EAI_NONAME,
		      gai_strerror(EAI_NONAME));
	SVT_CHECK(res == NULL);
	/* a service name that does not exist: a getaddrinfo code too */
	ret = rdma_getaddrinfo("127.0.0.1", "no-such-service-softverbs", NULL, &res);
	SVT_CHECK_MSG(ret < -1, "unknown service: %d, expected a getaddrinfo code", ret);
	SVT_CHECK(res == NULL);

	/* nowhere to put the answer */
	SVT_CHECK_CM_ERRNO(rdma_getaddrinfo("127.0.0.1", "1", NULL, NULL), EINVAL);
	/* nothing to resolve */
	SVT_CHECK_CM_ERRNO(rdma_getaddrinfo(NULL, NULL, NULL, &res), EINVAL);
	SVT_CHECK(res == NULL);

	/* a family that is not an RDMA address family, with a name or without */
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNIX;
	SVT_CHECK_CM_ERRNO(rdma_getaddrinfo("127.0.0.1", "1", &hints, &res), EAFNOSUPPORT);
	SVT_CHECK_CM_ERRNO(rdma_getaddrinfo(NULL, NULL, &hints, &res), EAFNOSUPPORT);
	SVT_CHECK(res == NULL);

	rdma_freeaddrinfo(NULL); /* like free(NULL) */
}

/* The answers are what rdma_bind_addr and rdma_resolve_addr take. */
static void test_answers_work(void)
{
	struct rdma_addrinfo hints, *pas, *act;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listener, *id;
	struct rdma_cm_event *ev;

	SVT_CHECK_PTR(ch);
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	pas = getai("127.0.0.1", PORT_USE_S, &hints);
	act = getai("127.0.0.1", PORT_USE_S, NULL);

	SVT_CHECK_CM(rdma_create_id(ch, &listener, NULL, pas->ai_port_space));
	SVT_CHECK_CM(rdma_bind_addr(listener, pas->ai_src_addr));
	SVT_CHECK_CM(rdma_listen(listener, 4));
	SVT_CHECK_EQ(ntohs(rdma_get_src_port(listener)), PORT_USE);

	SVT_CHECK_CM(rdma_create_id(ch, &id, NULL, act->ai_port_space));
	SVT_CHECK_CM(rdma_resolve_addr(id, act->ai_src_addr, act->ai_dst_addr, 2000));
	ev = cmt_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	SVT_CHECK(ev->id == id);
	rdma_ack_cm_event(ev);
	SVT_CHECK_EQ(ntohs(rdma_get_dst_port(id)), PORT_USE);

	SVT_CHECK_CM(rdma_destroy_id(id));
	SVT_CHECK_CM(rdma_destroy_id(listener));
	rdma_freeaddrinfo(pas);
	rdma_freeaddrinfo(act);
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	svt_watchdog(25);
	test_node_service();
	test_passive();
	test_hints_only();
	test_name_and_src_hint();
	test_errors();
	test_answers_work();
	return 0;
}
