/* Scatter/gather list walking; see dma.h. */
#include "engine/dma.h"
#include "engine/copier.h"
#include "engine/gpu.h"
#include "common/fault_guard.h"

#include <string.h>

enum ibv_wc_status sv_mem_err_to_local_status(enum sv_mem_err e)
{
	return e == SV_MEM_OK ? IBV_WC_SUCCESS : IBV_WC_LOC_PROT_ERR;
}

/* A long copy in host memory has a second core's help (copier.h). */
bool sv_dma_write(void *dst, const void *src, size_t len)
{
	return sv_copier_copy(dst, src, len, true);
}

bool sv_dma_copy(void *dst, const void *src, size_t len)
{
	return sv_copier_copy(dst, src, len, false);
}

enum sv_mem_err sv_dma_place(sv_cu_ctx gpu, void *dst, const void *src, size_t len)
{
	if (!gpu)
		return sv_dma_write(dst, src, len) ? SV_MEM_OK : SV_MEM_FAULT;
	return sv_cuda_copy(gpu, dst, src, len) ? SV_MEM_FAULT : SV_MEM_OK;
}

enum sv_mem_err sv_dma_read(sv_cu_ctx gpu, void *dst, const void *src, size_t len)
{
	if (!gpu)
		return sv_dma_copy(dst, src, len) ? SV_MEM_OK : SV_MEM_FAULT;
	return sv_cuda_copy(gpu, dst, src, len) ? SV_MEM_FAULT : SV_MEM_OK;
}

bool sv_iov_readable(const struct iovec *iov, const sv_cu_ctx *gpu, int n)
{
	for (int i = 0; i < n; i++)
		if (!gpu[i] && !sv_probe_guarded(iov[i].iov_base, iov[i].iov_len))
			return false;
	return true;
}

uint64_t sv_sgl_len(const struct ibv_sge *sge, uint32_t nsge)
{
	uint64_t t = 0;

	for (uint32_t i = 0; i < nsge; i++)
		t += sge[i].length;
	return t;
}

enum sv_mem_err sv_sgl_check_locked(struct sv_context *ctx, struct sv_pd *pd,
				    const struct ibv_sge *sge, uint32_t nsge, unsigned int access)
{
	enum sv_mem_err e = SV_MEM_OK;
	uint8_t *p;

	for (uint32_t i = 0; i < nsge && e == SV_MEM_OK; i++)
		if (sge[i].length)
			e = sv_mr_translate(ctx, sge[i].lkey, pd, sge[i].addr, sge[i].length,
					    access, &p, NULL);
	return e;
}

enum sv_mem_err sv_sgl_check(struct sv_context *ctx, struct sv_pd *pd, const struct ibv_sge *sge,
			     uint32_t nsge, unsigned int access)
{
	enum sv_mem_err e;

	sv_mr_read_lock(ctx);
	e = sv_sgl_check_locked(ctx, pd, sge, nsge, access);
	sv_mr_read_unlock(ctx);
	return e;
}

int sv_sgl_iov(struct sv_context *ctx, struct sv_pd *pd, const struct ibv_sge *sge, uint32_t nsge,
	       uint64_t off, uint64_t len, unsigned int access, struct iovec *iov, sv_cu_ctx *gpu,
	       int maxiov, enum sv_mem_err *err)
{
	int n = 0;

	*err = SV_MEM_OK;
	for (uint32_t i = 0; i < nsge && len; i++) {
		uint64_t l = sge[i].length, take;
		uint8_t *p;

		if (off >= l) {
			off -= l;
			continue;
		}
		take = SV_MIN(l - off, len);
		if (n == maxiov) {
			*err = SV_MEM_BOUNDS;
			return -1;
		}
		*err = sv_mr_translate(ctx, sge[i].lkey, pd, sge[i].addr + off, take, access, &p,
				       &gpu[n]);
		if (*err)
			return -1;
		iov[n].iov_base = p;
		iov[n].iov_len = take;
		n++;
		len -= take;
		off = 0;
	}
	if (len) {
		*err = SV_MEM_BOUNDS; /* the list is shorter than asked */
		return -1;
	}
	return n;
}

enum sv_mem_err sv_sgl_copy_in(struct sv_context *ctx, struct sv_pd *pd, const struct ibv_sge *sge,
			       uint32_t nsge, uint64_t off, const void *src, uint64_t len,
			       struct sv_gpu_sink **sink, sv_cu_ctx src_gpu)
{
	struct iovec iov[SV_MAX_SGE];
	sv_cu_ctx gpu[SV_MAX_SGE];
	enum sv_mem_err e;
	const uint8_t *s = src;
	int n;

	if (!len)
		return SV_MEM_OK;
	sv_mr_read_lock(ctx);
	n = sv_sgl_iov(ctx, pd, sge, nsge, off, len, IBV_ACCESS_LOCAL_WRITE, iov, gpu, SV_MAX_SGE,
		       &e);
	for (int i = 0; i < n && !e; i++) {
		if (src_gpu)
			e = sv_gpu_sink_copy(sink, src_gpu, iov[i].iov_base, s, iov[i].iov_len);
		else if (gpu[i] && sink)
			e = sv_gpu_sink_put(sink, gpu[i], iov[i].iov_base, s, iov[i].iov_len);
		else
			e = sv_dma_place(gpu[i], iov[i].iov_base, s, iov[i].iov_len);
		s += iov[i].iov_len;
	}
	sv_mr_read_unlock(ctx);
	return e;
}

enum sv_mem_err sv_sgl_copy_out(struct sv_context *ctx, struct sv_pd *pd,
				const struct ibv_sge *sge, uint32_t nsge, uint64_t off, void *dst,
				uint64_t len)
{
	struct iovec iov[SV_MAX_SGE];
	sv_cu_ctx gpu[SV_MAX_SGE];
	enum sv_mem_err e;
	uint8_t *d = dst;
	int n;

	if (!len)
		return SV_MEM_OK;
	n = sv_sgl_iov(ctx, pd, sge, nsge, off, len, 0, iov, gpu, SV_MAX_SGE, &e);
	for (int i = 0; i < n && !e; i++) {
		e = sv_dma_read(gpu[i], d, iov[i].iov_base, iov[i].iov_len);
		d += iov[i].iov_len;
	}
	return e;
}
