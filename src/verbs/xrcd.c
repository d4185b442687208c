/*
 * XRC domains (ibv_open_xrcd, ibv_close_xrcd) and the handles ibv_open_qp
 * makes of their XRC receive QPs.  As with the kernel's uverbs, a domain
 * opened with a file is the one domain of that file's inode: a second open
 * finds it (O_EXCL refuses that), an open without O_CREAT finds it or fails
 * with EAGAIN; fd -1 gives a domain of its own.  Other processes that open
 * the same file have their own sv_xrcd of it, and their XRC receive QPs
 * reach our XRC SRQs of it through engine/xrc_relay.c.
 */
#include "verbs/verbs.h"
#include "engine/engine.h"
#include "engine/xrc_relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
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

/*
 * ibv_open_qp: another handle of an XRC receive QP of this context, in the
 * domain given.  As on a kernel's shared XRC QP, every handle may modify,
 * query and destroy it, and the QP lives until the last handle (its
 * creator's included) is destroyed.  A handle is an sv_qp of its own (so
 * that whatever the application passes it to finds a QP that takes no
 * work: ibv_post_send and ibv_post_recv refuse it) whose xrc->alias_of
 * names the QP; ibv_modify_qp, ibv_query_qp and ibv_destroy_qp follow that.
 */
struct ibv_qp *sv_open_qp(struct ibv_context *context, struct ibv_qp_open_attr *attr)
{
	struct sv_context *ctx = to_sv_ctx(context);
	const uint32_t need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	struct sv_qp *real, *h;
	struct sv_xrcd *x;

	if (!attr) {
		errno = EINVAL;
		return NULL;
	}
	if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) {
		errno = EOPNOTSUPP; /* as rdma-core's ibv_cmd_open_qp */
		return NULL;
	}
	if ((attr->comp_mask & need) != need || !attr->xrcd || attr->xrcd->context != context ||
	    attr->qp_type != IBV_QPT_XRC_RECV) {
		errno = EINVAL;
		return NULL;
	}
	x = to_sv_xrcd(attr->xrcd);
	real = sv_qp_lookup(ctx, attr->qp_num);
	if (!real || !real->ti->xrc || !real->ti->receives || real->xrcd != x ||
	    (real->xrc && real->xrc->alias_of)) {
		if (real)
			sv_qp_put(real);
		/* a QP is memory and threads of the process that made it: one
		 * of another process (of this domain's file, maybe) cannot be
		 * opened here (docs/COMPATIBILITY.md §1.7a); none at all of
		 * that number in the domain: EINVAL, as the kernel says */
		errno = x->by_inode && (attr->qp_num < ctx->qpn_base ||
					attr->qp_num - ctx->qpn_base >= SV_QPN_BLOCK)
				? EOPNOTSUPP
				: EINVAL;
		return NULL;
	}
	h = calloc(1, sv_qp_size(1));
	if (h)
		h->xrc = calloc(1, sizeof(*h->xrc));
	pthread_mutex_lock(&real->lock);
	if (!real->xrc)
		real->xrc = calloc(1, sizeof(*real->xrc));
	pthread_mutex_unlock(&real->lock);
	if (!h || !h->xrc || !real->xrc) {
		if (h)
			free(h->xrc);
		free(h);
		sv_qp_put(real);
		errno = ENOMEM;
		return NULL;
	}
	h->ctx = ctx;
	h->ti = real->ti;
	h->state = IBV_QPS_RESET; /* it takes no work of its own */
	pthread_mutex_init(&h->lock, NULL);
	sv_ref_init(&h->ref, 1);
	h->xrc->alias_of = real;
	h->ex.qp_base.context = context;
	h->ex.qp_base.qp_context = attr->qp_context;
	h->ex.qp_base.qp_num = real->ex.qp_base.qp_num;
	h->ex.qp_base.qp_type = IBV_QPT_XRC_RECV;
	h->ex.qp_base.state = IBV_QPS_UNKNOWN; /* as rdma-core leaves an opened QP */
	h->ex.qp_base.handle = UINT32_MAX;     /* no slot of the QP table */
	pthread_mutex_init(&h->ex.qp_base.mutex, NULL);
	pthread_cond_init(&h->ex.qp_base.cond, NULL);
	pthread_mutex_lock(&ctx->lock);
	real->xrc->opens++;
	pthread_mutex_unlock(&ctx->lock);
	sv_qp_put(real); /* the handle's open count keeps it */
	return &h->ex.qp_base;
}

struct sv_qp *sv_qp_named(struct sv_qp *qp)
{
	return qp->xrc && qp->xrc->alias_of ? qp->xrc->alias_of : qp;
}

struct sv_qp *sv_xrc_qp_close(struct sv_qp *qp, bool *handled)
{
	struct sv_context *ctx = qp->ctx;
	struct sv_qp *real = NULL;

	struct sv_xrc_qp *x;

	*handled = false;
	pthread_mutex_lock(&qp->lock); /* the responder may make qp->xrc */
	x = qp->xrc;
	pthread_mutex_unlock(&qp->lock);
	if (!x)
		return NULL;
	pthread_mutex_lock(&ctx->lock);
	if (x->alias_of) {
		real = x->alias_of;
		if (--real->xrc->opens || !real->xrc->creator_closed)
			real = NULL; /* other handles, or its creator's, keep it */
		*handled = true;
	} else if (x->opens) {
		x->creator_closed = true; /* the opened handles keep it */
		*handled = true;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (x->alias_of) {
		pthread_mutex_destroy(&qp->ex.qp_base.mutex);
		pthread_cond_destroy(&qp->ex.qp_base.cond);
		pthread_mutex_destroy(&qp->lock);
		free(qp->xrc);
		free(qp);
	}
	return real;
}
