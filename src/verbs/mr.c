/*
 * Memory regions and the key table (its lookups, on every access, are the
 * engine's: src/engine/mr_table.c).  lkey == rkey (as in Soft-RoCE); a key
 * is 32 random bits (struct sv_mr_table), so no key tells anything of
 * another and a stale key names nothing.
 * Registration checks that the range is mapped (mincore), so unmapped memory
 * fails as it does with a real HCA's pinning.
 */
#include "verbs/verbs.h"
#include "engine/mem_export.h"
#include "engine/mem_share.h" /* sv_share_put */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define VALID_ACCESS                                                                       \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |       \
	 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |           \
	 IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

static int check_access(unsigned int access)
{
	if (access & ~VALID_ACCESS)
		return EINVAL;
	/* remote write/atomic imply the HCA writes: local write is required */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE))
		return EINVAL;
	/* ZERO_BASED marks a region addressed from 0 (ibv_reg_mr_iova with
	 * iova 0 makes it so; the flag itself changes no address, as on rxe),
	 * to which no window may be bound.  ON_DEMAND needs nothing of its
	 * own: no MR is pinned, every access goes to the pages mapped at that
	 * moment, faulted in as they are touched */
	return 0;
}

/* Is [addr, addr+len) entirely mapped in this process? */
static bool range_mapped(void *addr, size_t len)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t start = (uintptr_t)addr & ~((uintptr_t)pg - 1);
	uintptr_t end = ((uintptr_t)addr + len + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
	size_t npages = (end - start) / (size_t)pg;
	unsigned char vec[256];

	/* mincore fails with ENOMEM on any unmapped page; walk in chunks */
	for (size_t off = 0; off < npages; off += sizeof(vec)) {
		size_t n = SV_MIN(sizeof(vec), npages - off);

		if (mincore((void *)(start + off * (size_t)pg), n * (size_t)pg, vec))
			return false;
	}
	return true;
}

/*
 * Is [addr, addr+len) writable?  A real HCA pins pages for writing when the
 * MR may be written (LOCAL_WRITE), which fails on read-only mappings; the
 * mapping table says the same thing here.
 */
static bool range_writable(void *addr, size_t len)
{
	uintptr_t need = (uintptr_t)addr, end = (uintptr_t)addr + len;
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512];
	bool ok = false;

	if (!f)
		return true; /* no /proc: cannot tell, trust the caller */
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char perms[5];

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3)
			continue;
		if (hi <= need)
			continue;
		if (lo > need || perms[1] != 'w')
			break; /* a hole or a read-only piece */
		need = hi;
		if (need >= end) {
			ok = true;
			break;
		}
	}
	fclose(f);
	return ok;
}

/*
 * The range a registration names: CUDA device memory (GPUDirect RDMA: the
 * driver moves its bytes; *gpu says whose it is), or host memory that must
 * be mapped, and writable where the HCA may write it.  0 or an errno.
 */
static int check_range(void *addr, size_t length, unsigned int access, struct sv_cuda_range *gpu)
{
	int dev = sv_cuda_device_range(addr, length, gpu);

	if (dev < 0)
		return EFAULT; /* device memory, but past its allocation */
	if (dev > 0) {
		const struct sv_cuda_driver *d = sv_cuda();
		unsigned int one = 1;

		/* as nvidia-peermem asks: the application's own copies into
		 * this memory finish before they return, so data it wrote
		 * is there when it posts the work request that sends it */
		(void)d->PointerSetAttribute(&one, SV_CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
					     (sv_cu_ptr)(uintptr_t)addr);
		return 0;
	}
	if (!range_mapped(addr, length))
		return EFAULT;
	if ((access & IBV_ACCESS_LOCAL_WRITE) && !range_writable(addr, length))
		return EFAULT;
	return 0;
}

/*
 * Implicit on-demand paging: (NULL, SIZE_MAX) with ON_DEMAND names the whole
 * address space, as on mlx5.  Nothing is mapped or checked at registration:
 * each access reaches whatever is mapped at that address then, and one that
 * finds nothing fails that operation (the fault guard, common/fault_guard.h:
 * LOC_PROT_ERR here, a remote access error at a peer), as it would on
 * memory an application unmapped under an ordinary MR.
 */
static bool implicit_range(const void *addr, size_t length)
{
	return !addr && length == SIZE_MAX;
}

/* What lets another process of this host open GPU memory (NULL: host
 * memory, or memory the driver cannot share, which is then staged). */
static struct sv_gpu_export *gpu_export(const struct sv_cuda_range *gpu, void *addr)
{
	struct sv_gpu_export *gx;

	if (!gpu->ctx || !(gx = calloc(1, sizeof(*gx))))
		return NULL;
	if (sv_cuda_export(gpu->ctx, addr, &gx->h, &gx->off)) {
		free(gx);
		return NULL;
	}
	gx->ordinal = gpu->ordinal;
	return gx;
}

static struct sv_mr *mr_create(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
			       unsigned int access)
{
	struct sv_context *ctx;
	struct sv_cuda_range gpu = { 0 };
	struct sv_mr *mr;
	int err;

	if (!ibpd) {
		errno = EINVAL;
		return NULL;
	}
	ctx = to_sv_ctx(ibpd->context);
	access &= ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE;
	err = check_access(access);
	if (implicit_range(addr, length)) {
		/* the whole address space: on demand, addressed by itself */
		if (!err && (!(access & IBV_ACCESS_ON_DEMAND) || iova))
			err = EINVAL;
	} else {
		if (!err && (!length || length > SV_MAX_MR_SIZE || !addr))
			err = EINVAL;
		if (!err)
			err = check_range(addr, length, access, &gpu);
	}
	if (err) {
		errno = err;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	mr->pd = to_sv_pd(ibpd);
	mr->vaddr = addr;
	mr->len = length;
	mr->iova = iova;
	mr->access = access;
	mr->gpu = gpu.ctx;
	mr->gx = gpu_export(&gpu, addr);
	mr->ext = implicit_range(addr, length) ? NULL
						: sv_export_share(ctx, addr, length, access, gpu.ctx);

	sv_arwlock_wrlock(&ctx->mrs.lock);
	if (sv_key_insert(&ctx->mrs, mr)) {
		sv_arwlock_wrunlock(&ctx->mrs.lock);
		sv_share_put(mr->ext);
		free(mr->gx);
		free(mr);
		errno = ENOMEM;
		return NULL;
	}
	mr->ibmr.context = ibpd->context;
	mr->ibmr.pd = ibpd;
	mr->ibmr.addr = addr;
	mr->ibmr.length = length;
	mr->ibmr.handle = mr->ibmr.lkey >> 8;
	/* a peer of this host connected while this MR was being made: it was
	 * not in the table that sv_export_share_all went through */
	if (!mr->ext && !implicit_range(addr, length))
		mr->ext = sv_export_share(ctx, addr, length, access, gpu.ctx);
	sv_export_mr(ctx, mr);
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	sv_ref_get(&mr->pd->users);
	return mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct sv_mr *mr = mr_create(pd, addr, length, (uint64_t)(uintptr_t)addr, (unsigned)access);

	return mr ? &mr->ibmr : NULL;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct sv_mr *mr = mr_create(pd, addr, length, iova, access);

	return mr ? &mr->ibmr : NULL;
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				 int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

/* The size of a dma-buf, from its fdinfo; 0 where the kernel does not say. */
static uint64_t dmabuf_size(int fd)
{
	char path[64], line[128];
	unsigned long long sz = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "size: %llu", &sz) == 1)
			break;
	fclose(f);
	return sz;
}

/*
 * A dma-buf exported by CUDA (cuMemGetHandleForAddressRange).  User space
 * cannot map such a buffer itself, so the region is found the way NCCL,
 * UCX and libfabric register one: iova is the GPU address of byte `offset`
 * of the buffer, and that address must be device memory of this process
 * for the whole length.  Without CUDA in the process: EOPNOTSUPP for any
 * fd, -1 included (NCCL reads that as "no dma-buf support" and anything
 * else as support).
 */
struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
				 int fd, int access)
{
	struct sv_cuda_range r;
	struct stat st;
	uint64_t size;
	struct sv_mr *mr;
	int dev;

	if (!sv_cuda()) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!pd || fd < 0 || fstat(fd, &st)) {
		errno = pd ? EBADF : EINVAL;
		return NULL;
	}
	size = dmabuf_size(fd);
	if (!length || (size && (offset > size || length > size - offset))) {
		errno = EINVAL;
		return NULL;
	}
	dev = sv_cuda_device_range((void *)(uintptr_t)iova, length, &r);
	if (dev <= 0) {
		errno = dev < 0 ? EFAULT : EINVAL; /* not GPU memory of ours */
		return NULL;
	}
	mr = mr_create(pd, (void *)(uintptr_t)iova, length, iova, (unsigned int)access);
	if (!mr)
		return NULL;
	mr->ibmr.addr = (void *)(uintptr_t)offset; /* as rdma-core reports it */
	return &mr->ibmr;
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
	struct sv_mr *mr;
	struct sv_context *ctx;
	bool exported;

	if (!ibmr)
		return EINVAL;
	mr = to_sv_mr(ibmr);
	ctx = to_sv_ctx(ibmr->context);
	/* the write lock waits out any engine access in progress */
	sv_arwlock_wrlock(&ctx->mrs.lock);
	if (mr->nmw) {
		/* memory windows are bound to it (ibv_dereg_mr(3)) */
		sv_arwlock_wrunlock(&ctx->mrs.lock);
		return EBUSY;
	}
	exported = sv_export_mr_revoke(ctx, mr); /* peers first: they check no key table of ours */
	sv_key_remove(&ctx->mrs, mr);
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	/* the accesses peers began before are over, the lock no longer held
	 * (nothing of ours waits on them meanwhile) */
	if (exported)
		sv_export_quiesce(ctx);
	sv_ref_put(&mr->pd->users);
	sv_share_put(mr->ext);
	free(mr->gx);
	free(mr);
	return 0;
}

/*
 * The keys stay what they were, as on Soft-RoCE (and on hardware when it can
 * change an MR in place): the peers that hold the rkey keep using it, and the
 * new access flags, PD and translation decide every access made with it once
 * this returns (the table's write lock waits out the accesses in progress).
 *
 * Errors as rdma-core reports them: what libibverbs checks itself fails with
 * IBV_REREG_MR_ERR_INPUT and EINVAL; what the kernel refuses (no flags, a bad
 * PD, access flags, unmapped memory) with IBV_REREG_MR_ERR_CMD and its errno.
 * Either way nothing changes.
 */
int ibv_rereg_mr(struct ibv_mr *ibmr, int flags, struct ibv_pd *pd, void *addr, size_t length,
		 int access)
{
	struct sv_mr *mr;
	struct sv_context *ctx;
	struct sv_pd *npd;
	struct sv_cuda_range gpu = { 0 };
	struct sv_extent *next, *prev;
	bool exported;
	unsigned int nacc;
	void *naddr;
	size_t nlen;
	int err;

	if (!ibmr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	mr = to_sv_mr(ibmr);
	ctx = to_sv_ctx(ibmr->context);
	npd = (flags & IBV_REREG_MR_CHANGE_PD) ? (pd ? to_sv_pd(pd) : NULL) : mr->pd;
	/* optional-range bits may be ignored, as at registration */
	nacc = (flags & IBV_REREG_MR_CHANGE_ACCESS) ?
		       (unsigned int)access & ~(unsigned int)IBV_ACCESS_OPTIONAL_RANGE : mr->access;
	naddr = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? addr : mr->vaddr;
	nlen = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) ? length : mr->len;
	err = check_access(nacc);
	if (!flags || !npd || npd->ibpd.context != ibmr->context)
		err = EINVAL;
	else if (implicit_range(naddr, nlen) && !err)
		err = (nacc & IBV_ACCESS_ON_DEMAND) ? 0 : EINVAL; /* it stays implicit */
	else if (nlen > SV_MAX_MR_SIZE)
		err = EINVAL;
	else if (!err)
		err = check_range(naddr, nlen, nacc, &gpu);
	if (err) {
		errno = err;
		return IBV_REREG_MR_ERR_CMD;
	}

	/* the new range's pages are shared before the table changes (the
	 * copy may take a while, and stores into the range wait for it) */
	next = implicit_range(naddr, nlen) ? NULL : sv_export_share(ctx, naddr, nlen, nacc, gpu.ctx);
	sv_arwlock_wrlock(&ctx->mrs.lock);
	if (mr->nmw) {
		/* windows bound to it name its old range and PD (rxe refuses too) */
		sv_arwlock_wrunlock(&ctx->mrs.lock);
		sv_share_put(next);
		errno = EBUSY;
		return IBV_REREG_MR_ERR_CMD;
	}
	exported = sv_export_mr_revoke(ctx, mr);
	prev = mr->ext;
	mr->ext = next;
	if (npd != mr->pd) {
		sv_ref_put(&mr->pd->users);
		sv_ref_get(&npd->users);
		mr->pd = npd;
		ibmr->pd = &npd->ibpd;
	}
	mr->access = nacc;
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		free(mr->gx);
		mr->gx = gpu_export(&gpu, naddr);
		mr->gpu = gpu.ctx;
		mr->vaddr = naddr;
		mr->iova = (uint64_t)(uintptr_t)naddr;
		mr->len = nlen;
		ibmr->addr = naddr;
		ibmr->length = nlen;
	}
	sv_export_mr(ctx, mr);
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	if (exported)
		sv_export_quiesce(ctx); /* as at deregistration */
	sv_share_put(prev);
	return 0;
}

/*
 * ibv_advise_mr: prefetching ranges of on-demand MRs populates their pages
 * now (MADV_POPULATE_READ/WRITE), so the first access does not fault them
 * in.  Errors as ibv_advise_mr(3) gives them, and then nothing is done.
 */
int sv_advise_mr(struct ibv_pd *ibpd, enum ibv_advise_mr_advice advice, uint32_t flags,
		 struct ibv_sge *sg, uint32_t nsge)
{
	struct sv_context *ctx;
	unsigned int need = 0;
	int err = 0;

	if (!ibpd || (flags & ~(uint32_t)IB_UVERBS_ADVISE_MR_FLAG_FLUSH) || (nsge && !sg))
		return EINVAL;
	if (advice == IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE)
		need = IBV_ACCESS_LOCAL_WRITE;
	else if (advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH &&
		 advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	ctx = to_sv_ctx(ibpd->context);
	/* held until the pages are populated: no MR can go meanwhile */
	sv_mr_read_lock(ctx);
	for (uint32_t i = 0; i < nsge && !err; i++) {
		struct sv_mr *mr = sv_key_entry(ctx, sg[i].lkey);
		uint8_t *p;

		if (mr && mr->kind == SV_KEY_MR && !(mr->access & IBV_ACCESS_ON_DEMAND))
			err = EINVAL; /* advice is for on-demand MRs */
		else if (sv_mr_translate(ctx, sg[i].lkey, to_sv_pd(ibpd), sg[i].addr, sg[i].length,
					 need, &p, NULL))
			err = EFAULT; /* a bad key, a range beyond the MR, or no write access */
	}
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
	for (uint32_t i = 0; i < nsge && !err && advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
	     i++) {
		uint8_t *p;
		uintptr_t a;

		/* checked above; the range is the MR's mapping (its iova may differ) */
		(void)sv_mr_translate(ctx, sg[i].lkey, to_sv_pd(ibpd), sg[i].addr, sg[i].length,
				      need, &p, NULL);
		a = (uintptr_t)p & ~(uintptr_t)4095;
		/* a kernel without populate advice: nothing to do ahead */
		(void)madvise((void *)a, (uintptr_t)p + sg[i].length - a,
			      need ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
	}
#endif
	sv_mr_read_unlock(ctx);
	return err;
}

/*
 * Memory windows share the key table with the MRs: a window's key names its
 * entry by its upper 24 bits, and a bind changes only the low eight.  Type 1 windows
 * are bound with ibv_bind_mw, type 2 with an IBV_WR_BIND_MW work request;
 * both binds execute in order on the send queue (sv_mw_bind).
 */
struct ibv_mw *sv_alloc_mw(struct ibv_pd *ibpd, enum ibv_mw_type type)
{
	struct sv_context *ctx;
	struct sv_mw *mw;

	if (!ibpd || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
		errno = EINVAL;
		return NULL;
	}
	ctx = to_sv_ctx(ibpd->context);
	mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	mw->key.kind = SV_KEY_MW;
	mw->key.pd = to_sv_pd(ibpd);
	mw->key.ibmw = &mw->ibmw;
	sv_arwlock_wrlock(&ctx->mrs.lock);
	if (sv_key_insert(&ctx->mrs, &mw->key)) {
		sv_arwlock_wrunlock(&ctx->mrs.lock);
		free(mw);
		errno = ENOMEM;
		return NULL;
	}
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	mw->ibmw.context = ibpd->context;
	mw->ibmw.pd = ibpd;
	mw->ibmw.rkey = mw->key.ibmr.rkey;
	mw->ibmw.handle = mw->key.ibmr.lkey >> 8;
	mw->ibmw.type = type;
	sv_ref_get(&mw->key.pd->users);
	return &mw->ibmw;
}

/* A window bound still may go: it stops answering at once (as rxe). */
int sv_dealloc_mw(struct ibv_mw *ibmw)
{
	struct sv_mw *mw = SV_CONTAINER_OF(ibmw, struct sv_mw, ibmw);
	struct sv_context *ctx = to_sv_ctx(ibmw->context);

	sv_arwlock_wrlock(&ctx->mrs.lock);
	if (mw->key.mw_mr)
		mw->key.mw_mr->nmw--;
	sv_key_remove(&ctx->mrs, &mw->key);
	sv_arwlock_wrunlock(&ctx->mrs.lock);
	sv_ref_put(&mw->key.pd->users);
	free(mw);
	return 0;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t mr_handle)
{
	(void)pd;
	(void)mr_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *context, uint32_t dm_handle)
{
	(void)context;
	(void)dm_handle;
	errno = EOPNOTSUPP;
	return NULL;
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}
