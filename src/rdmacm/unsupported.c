/*
 * What librdmacm exports and softverbs does not implement yet.  Each entry
 * fails cleanly with the errno docs/COMPATIBILITY.md lists, changing nothing:
 * rsockets with ENOSYS until they are built over the verbs.
 */
#include <errno.h>
#include <rdma/rsocket.h>

#include "rdmacm/cm.h"

/* ---- rsockets: not implemented ---- */

#define RS_ENOSYS(type) \
	do { errno = ENOSYS; return (type)-1; } while (0)

int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	RS_ENOSYS(int);
}
int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	(void)s, (void)addr, (void)len;
	RS_ENOSYS(int);
}
int rlisten(int s, int backlog)
{
	(void)s, (void)backlog;
	RS_ENOSYS(int);
}
int raccept(int s, struct sockaddr *addr, socklen_t *len)
{
	(void)s, (void)addr, (void)len;
	RS_ENOSYS(int);
}
int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	(void)s, (void)addr, (void)len;
	RS_ENOSYS(int);
}
int rshutdown(int s, int how)
{
	(void)s, (void)how;
	RS_ENOSYS(int);
}
int rclose(int s)
{
	(void)s;
	RS_ENOSYS(int);
}
ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	(void)s, (void)buf, (void)len, (void)flags;
	RS_ENOSYS(ssize_t);
}
ssize_t rrecvfrom(int s, void *buf, size_t len, int flags, struct sockaddr *src, socklen_t *alen)
{
	(void)s, (void)buf, (void)len, (void)flags, (void)src, (void)alen;
	RS_ENOSYS(ssize_t);
}
ssize_t rrecvmsg(int s, struct msghdr *msg, int flags)
{
	(void)s, (void)msg, (void)flags;
	RS_ENOSYS(ssize_t);
}
ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	(void)s, (void)buf, (void)len, (void)flags;
	RS_ENOSYS(ssize_t);
}
ssize_t rsendto(int s, const void *buf, size_t len, int flags, const struct sockaddr *to, socklen_t tl)
{
	(void)s, (void)buf, (void)len, (void)flags, (void)to, (void)tl;
	RS_ENOSYS(ssize_t);
}
ssize_t rsendmsg(int s, const struct msghdr *msg, int flags)
{
	(void)s, (void)msg, (void)flags;
	RS_ENOSYS(ssize_t);
}
ssize_t rread(int s, void *buf, size_t count)
{
	(void)s, (void)buf, (void)count;
	RS_ENOSYS(ssize_t);
}
ssize_t rreadv(int s, const struct iovec *iov, int iovcnt)
{
	(void)s, (void)iov, (void)iovcnt;
	RS_ENOSYS(ssize_t);
}
ssize_t rwrite(int s, const void *buf, size_t count)
{
	(void)s, (void)buf, (void)count;
	RS_ENOSYS(ssize_t);
}
ssize_t rwritev(int s, const struct iovec *iov, int iovcnt)
{
	(void)s, (void)iov, (void)iovcnt;
	RS_ENOSYS(ssize_t);
}
int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	(void)fds, (void)nfds, (void)timeout;
	RS_ENOSYS(int);
}
int rselect(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *timeout)
{
	(void)nfds, (void)r, (void)w, (void)e, (void)timeout;
	RS_ENOSYS(int);
}
int rgetpeername(int s, struct sockaddr *addr, socklen_t *len)
{
	(void)s, (void)addr, (void)len;
	RS_ENOSYS(int);
}
int rgetsockname(int s, struct sockaddr *addr, socklen_t *len)
{
	(void)s, (void)addr, (void)len;
	RS_ENOSYS(int);
}
int rsetsockopt(int s, int level, int optname, const void *optval, socklen_t optlen)
{
	(void)s, (void)level, (void)optname, (void)optval, (void)optlen;
	RS_ENOSYS(int);
}
int rgetsockopt(int s, int level, int optname, void *optval, socklen_t *optlen)
{
	(void)s, (void)level, (void)optname, (void)optval, (void)optlen;
	RS_ENOSYS(int);
}
int rfcntl(int s, int cmd, ...)
{
	(void)s, (void)cmd;
	RS_ENOSYS(int);
}
off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)s, (void)buf, (void)len, (void)prot, (void)flags, (void)offset;
	RS_ENOSYS(off_t);
}
int riounmap(int s, void *buf, size_t len)
{
	(void)s, (void)buf, (void)len;
	RS_ENOSYS(int);
}
size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	(void)s, (void)buf, (void)count, (void)offset, (void)flags;
	RS_ENOSYS(size_t);
}
