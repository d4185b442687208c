/*
 * XRC domains (ibv_open_xrcd, ibv_close_xrcd).  As with the kernel's
 * uverbs, a domain opened with a file is the one domain of that file's
 * inode: a second open finds it (O_EXCL refuses that), an open without
 * O_CREAT finds it or fails with EAGAIN; fd -1 gives a domain of its own.
 * The inode's domain is this process's: XRC receive QPs and XRC SRQs of one
 * domain in two processes do not meet (docs/COMPATIBILITY.md).
 */
#include "verbs/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

struct ibv_xrcd *sv_open_xrcd(struct ibv_context *context, struct ibv_xrcd_init_attr *attr)
{
	struct sv_context *ctx = to_sv_ctx(context);
	struct sv_xrcd *x = NULL;
	struct stat st;
	int err = 0;

	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) ||
	    !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) ||
	    (attr->oflags & ~(O_CREAT | O_EXCL))) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->fd != -1 && fstat(attr->fd, &st)) {
		errno = EBADF;
		return NULL;
	}
	pthread_mutex_lock(&ctx->lock);
	if (attr->fd != -1) {
		for (struct sv_list *l = ctx->xrcds.next; l != &ctx->xrcds; l = l->next) {
			struct sv_xrcd *o = SV_CONTAINER_OF(l, struct sv_xrcd, link);

			if (o->by_inode && o->dev == st.st_dev && o->ino == st.st_ino) {
				x = o;
				break;
			}
		}
		if (x && (attr->oflags & O_EXCL))
			err = EINVAL; /* as uverbs: it exists, and the caller wanted a new one */
		else if (!x && !(attr->oflags & O_CREAT))
			err = EAGAIN; /* none for that file, and none to be made */
		if (x && !err) {
			x->opens++;
			pthread_mutex_unlock(&ctx->lock);
			return &x->ibx;
		}
	}
	if (!err && !(x = calloc(1, sizeof(*x))))
		err = ENOMEM;
	if (err) {
		pthread_mutex_unlock(&ctx->lock);
		errno = err;
		return NULL;
	}
	x->ctx = ctx;
	x->by_inode = attr->fd != -1;
	if (x->by_inode) {
		x->dev = st.st_dev;
		x->ino = st.st_ino;
	}
	x->opens = 1;
	sv_ref_init(&x->users, 0);
	x->ibx.context = context;
	sv_list_add_tail(&ctx->xrcds, &x->link);
	pthread_mutex_unlock(&ctx->lock);
	return &x->ibx;
}

int sv_close_xrcd(struct ibv_xrcd *ibx)
{
	struct sv_xrcd *x = to_sv_xrcd(ibx);
	struct sv_context *ctx = x->ctx;

	pthread_mutex_lock(&ctx->lock);
	/* the last close of a domain still in use by its QPs or SRQs: refused */
	if (x->opens == 1 && sv_ref_count(&x->users)) {
		pthread_mutex_unlock(&ctx->lock);
		return EBUSY;
	}
	if (--x->opens) {
		pthread_mutex_unlock(&ctx->lock);
		return 0;
	}
	sv_list_del(&x->link);
	pthread_mutex_unlock(&ctx->lock);
	free(x);
	return 0;
}
