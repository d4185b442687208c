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
	sv_mutex_lock(&ctx->lock);
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
			sv_mutex_unlock(&ctx->lock);
			return &x->ibx;
		}
	}
	if (!err && !(x = calloc(1, sizeof(*x))))
		err = ENOMEM;
	if (err) {
		sv_mutex_unlock(&ctx->lock);
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
	sv_mutex_unlock(&ctx->lock);
	return &x->ibx;
}

/*
 * The receive QPs of x whose own handles are all destroyed and which other
 * processes kept open, processes that have gone since without closing
 * them: they go now, as the kernel lets such a QP go with its last opener.
 */
struct sv_qp **sv_xrcd_hold_qps(struct sv_context *ctx, struct sv_xrcd *x, uint32_t *n)
{
	struct sv_qp **held;

	*n = 0;
	sv_mutex_lock(&ctx->lock);
	held = calloc(ctx->nqp ? ctx->nqp : 1, sizeof(*held));
	for (uint32_t i = 0; held && i < ctx->qpt_size; i++) {
		struct sv_qp *qp = ctx->qpt[i];

		if (qp && qp->xrcd == x) {
			sv_qp_get(qp);
			held[(*n)++] = qp;
		}
	}
	sv_mutex_unlock(&ctx->lock);
	return held;
}

static void reap_orphans(struct sv_context *ctx, struct sv_xrcd *x)
{
	uint32_t n;
	struct sv_qp **held = sv_xrcd_hold_qps(ctx, x, &n);

	for (uint32_t i = 0; i < n; i++) {
		struct sv_qp *qp = held[i];
		struct sv_xrc_qp *xq;
		bool orphan = false;

		sv_mutex_lock(&qp->lock);
		xq = qp->xrc;
		sv_mutex_unlock(&qp->lock);
		if (xq) {
			sv_mutex_lock(&ctx->lock);
			if (xq->creator_closed && xq->opens) {
				sv_xrc_openers_prune(qp);
				orphan = !xq->opens;
			}
			sv_mutex_unlock(&ctx->lock);
		}
		sv_qp_put(qp);
		if (orphan)
			ibv_destroy_qp(&qp->ex.qp_base);
	}
	free(held);
}

int sv_close_xrcd(struct ibv_xrcd *ibx)
{
	struct sv_xrcd *x = to_sv_xrcd(ibx);
	struct sv_context *ctx = x->ctx;

	if (x->opens == 1 && x->by_inode && sv_ref_count(&x->users))
		reap_orphans(ctx, x);
	sv_mutex_lock(&ctx->lock);
	/* the last close of a domain still in use by its QPs or SRQs: refused */
	if (x->opens == 1 && sv_ref_count(&x->users)) {
		sv_mutex_unlock(&ctx->lock);
		return EBUSY;
	}
	if (--x->opens) {
		sv_mutex_unlock(&ctx->lock);
		return 0;
	}
	sv_list_del(&x->link);
	sv_mutex_unlock(&ctx->lock);
	free(x);
	return 0;
}

/* A handle: an sv_qp that takes no work of its own (verbs/xrcd.c). */
static struct sv_qp *handle_new(struct sv_context *ctx, struct ibv_qp_open_attr *attr)
{
	struct sv_qp *h = calloc(1, sv_qp_size(1));

	if (h && !(h->xrc = calloc(1, sizeof(*h->xrc)))) {
		free(h);
		h = NULL;
	}
	if (!h)
		return NULL;
	h->ctx = ctx;
	h->ti = sv_qp_type_info(IBV_QPT_XRC_RECV);
	h->state = IBV_QPS_RESET; /* it takes no work of its own */
	h->xrcd = to_sv_xrcd(attr->xrcd);
	sv_mutex_init(&h->lock, SV_LOCK_QP);
	sv_ref_init(&h->ref, 1);
	h->ex.qp_base.context = &ctx->vctx.context;
	h->ex.qp_base.qp_context = attr->qp_context;
	h->ex.qp_base.qp_num = attr->qp_num;
	h->ex.qp_base.qp_type = IBV_QPT_XRC_RECV;
	h->ex.qp_base.state = IBV_QPS_UNKNOWN; /* as rdma-core leaves an opened QP */
	h->ex.qp_base.handle = SV_QP_HANDLE_OPENED; /* no slot of the QP table */
	pthread_mutex_init(&h->ex.qp_base.mutex, NULL);
	pthread_cond_init(&h->ex.qp_base.cond, NULL);
	return h;
}

static void handle_free(struct sv_qp *h)
{
	pthread_mutex_destroy(&h->ex.qp_base.mutex);
	pthread_cond_destroy(&h->ex.qp_base.cond);
	sv_mutex_destroy(&h->lock);
	if (h->xrc->remote)
		sv_conn_put(h->xrc->remote);
	free(h->xrc);
	free(h);
}

/*
 * A receive QP of another process of the domain's file (its number is of
 * that process's block): that process opens it for us (over shm or tcp),
 * and answers for it after (sv_xrc_ctrl_call).  No way to ask it (rocev2,
 * whose datagrams say nothing of who sent them): EOPNOTSUPP; no such QP
 * there: EINVAL.
 */
static struct ibv_qp *open_remote(struct sv_context *ctx, struct ibv_qp_open_attr *attr,
				  struct sv_xrcd *x)
{
	struct sv_conn *c = sv_xrc_conn_to(ctx, attr->qp_num);
	struct sv_qp *h;
	int err;

	if (!c) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	err = sv_xrc_ctrl_call(ctx, c, SV_XRC_CTRL_OPEN, attr->qp_num, x, 0, NULL);
	if (!err && !(h = handle_new(ctx, attr)))
		err = ENOMEM;
	if (err) {
		if (err == ENOMEM && !sv_xrc_ctrl_call(ctx, c, SV_XRC_CTRL_CLOSE, attr->qp_num, x,
						       0, NULL))
			err = ENOMEM; /* (opened, and closed again) */
		sv_conn_put(c);
		errno = err;
		return NULL;
	}
	h->xrc->remote = c;
	return &h->ex.qp_base;
}

int sv_xrc_remote_modify(struct sv_qp *h, struct ibv_qp_attr *attr, int mask)
{
	int err = sv_xrc_ctrl_call(h->ctx, h->xrc->remote, SV_XRC_CTRL_MODIFY,
				   h->ex.qp_base.qp_num, h->xrcd, mask, attr);

	if (!err && (mask & IBV_QP_STATE))
		h->ex.qp_base.state = attr->qp_state;
	return err;
}

int sv_xrc_remote_query(struct sv_qp *h, struct ibv_qp_attr *attr,
			struct ibv_qp_init_attr *init_attr)
{
	int err = sv_xrc_ctrl_call(h->ctx, h->xrc->remote, SV_XRC_CTRL_QUERY,
				   h->ex.qp_base.qp_num, h->xrcd, 0, attr);

	if (err)
		return err;
	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_context = h->ex.qp_base.qp_context;
	init_attr->qp_type = IBV_QPT_XRC_RECV;
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
	if (x->by_inode && !sv_qpn_ours(ctx, attr->qp_num))
		return open_remote(ctx, attr, x);
	real = sv_qp_lookup(ctx, attr->qp_num);
	if (!real || !real->ti->xrc || !real->ti->receives || real->xrcd != x ||
	    (real->xrc && real->xrc->alias_of)) {
		if (real)
			sv_qp_put(real);
		errno = EINVAL; /* no XRC receive QP of that number in the domain */
		return NULL;
	}
	h = handle_new(ctx, attr);
	sv_mutex_lock(&real->lock);
	if (!real->xrc)
		real->xrc = calloc(1, sizeof(*real->xrc));
	sv_mutex_unlock(&real->lock);
	if (!h || !real->xrc) {
		if (h)
			handle_free(h);
		sv_qp_put(real);
		errno = ENOMEM;
		return NULL;
	}
	h->xrc->alias_of = real;
	sv_mutex_lock(&ctx->lock);
	real->xrc->opens++;
	sv_mutex_unlock(&ctx->lock);
	sv_qp_put(real); /* the handle's open count keeps it */
	return &h->ex.qp_base;
}

struct sv_qp *sv_qp_named(struct sv_qp *qp)
{
	/* (a QP's own xrc the responder may be making: not looked at) */
	return qp->ex.qp_base.handle == SV_QP_HANDLE_OPENED && qp->xrc->alias_of
		       ? qp->xrc->alias_of
		       : qp;
}

struct sv_qp *sv_xrc_qp_close(struct sv_qp *qp, bool *handled)
{
	struct sv_context *ctx = qp->ctx;
	struct sv_qp *real = NULL;

	struct sv_xrc_qp *x;

	*handled = false;
	sv_mutex_lock(&qp->lock); /* the responder may make qp->xrc */
	x = qp->xrc;
	sv_mutex_unlock(&qp->lock);
	if (!x)
		return NULL;
	if (x->remote) {
		/* another process's QP: it closes its open of it */
		sv_xrc_ctrl_call(ctx, x->remote, SV_XRC_CTRL_CLOSE, qp->ex.qp_base.qp_num, qp->xrcd, 0,
				 NULL);
		handle_free(qp);
		*handled = true;
		return NULL;
	}
	sv_mutex_lock(&ctx->lock);
	sv_xrc_openers_prune(qp); /* other processes' handles, of processes gone */
	if (x->alias_of) {
		real = x->alias_of;
		if (--real->xrc->opens || !real->xrc->creator_closed)
			real = NULL; /* other handles, or its creator's, keep it */
		*handled = true;
	} else if (x->opens) {
		x->creator_closed = true; /* the opened handles keep it */
		*handled = true;
	}
	sv_mutex_unlock(&ctx->lock);
	if (*handled && !x->alias_of) {
		/* events name a QP by its creator's handle, which is gone */
		sv_mutex_lock(&qp->lock);
		x->no_events = true;
		sv_mutex_unlock(&qp->lock);
		sv_async_forget(ctx, &qp->async);
	}
	if (x->alias_of)
		handle_free(qp);
	return real;
}
