/*
 * Data movement between scatter/gather lists and packets.  Every byte that
 * crosses an SGE goes through sv_mr_translate(), so key, PD, bounds and
 * access flags are checked on every access, local or remote.
 */
#ifndef SV_DMA_H
#define SV_DMA_H

#include "engine/objects.h"
#include <sys/uio.h>

/* Map an IBV_WC-style failure of a local SGE access. */
enum ibv_wc_status sv_mem_err_to_local_status(enum sv_mem_err e);

/* Check every SGE of a list (key, PD, bounds, access) without moving data. */
enum sv_mem_err sv_sgl_check(struct sv_context *ctx, struct sv_pd *pd, const struct ibv_sge *sge,
			     uint32_t nsge, unsigned int access);
/* The same, the MR read lock held. */
enum sv_mem_err sv_sgl_check_locked(struct sv_context *ctx, struct sv_pd *pd,
				    const struct ibv_sge *sge, uint32_t nsge, unsigned int access);

/*
 * Describe bytes [off, off+len) of an SGE list as iovecs into local memory
 * (the MR read lock must be held while they are used).  gpu[i] is the CUDA
 * context of a piece in GPU memory (which only the driver may touch), NULL
 * for host memory.  Returns the number of iovecs, or -1 with *err set.
 */
int sv_sgl_iov(struct sv_context *ctx, struct sv_pd *pd, const struct ibv_sge *sge, uint32_t nsge,
	       uint64_t off, uint64_t len, unsigned int access, struct iovec *iov, sv_cu_ctx *gpu,
	       int maxiov, enum sv_mem_err *err);

struct sv_gpu_sink;
/* Copy len bytes from src into an SGE list at byte offset off; pieces in GPU
 * memory go through *sink when one is given (engine/gpu.h: in place at its
 * next fence), else are copied at once.  src_gpu: src is GPU memory of that
 * context (a peer's, opened here), copied through *sink, which is then required. */
enum sv_mem_err sv_sgl_copy_in(struct sv_context *ctx, struct sv_pd *pd, const struct ibv_sge *sge,
			       uint32_t nsge, uint64_t off, const void *src, uint64_t len,
			       struct sv_gpu_sink **sink, sv_cu_ctx src_gpu);

/* Copy bytes [off, off+len) of an SGE list out to dst (host memory); the
 * MR read lock is held by the caller. */
enum sv_mem_err sv_sgl_copy_out(struct sv_context *ctx, struct sv_pd *pd,
				const struct ibv_sge *sge, uint32_t nsge, uint64_t off, void *dst,
				uint64_t len);

/*
 * The HCA's own accesses to application memory (placing a WRITE's payload).
 * Kept in one named place: like a NIC's DMA, they race with the application
 * by design, and race detectors are told so (tests/tsan.supp).  False: the
 * application unmapped part of dst (common/fault_guard.h); the operation
 * fails, the process goes on.
 *
 * The last byte lands last, as a NIC's DMA writes a payload in address
 * order: programs wait for a WRITE by spinning on the last byte of their
 * buffer (perftest's ib_write_lat, dtest -D, MPI's eager RDMA) and then
 * read the rest.  memcpy keeps no such order (a copy of a few KiB by
 * glibc's rep movsb path was seen with its first 64 bytes landing after the
 * last one; unit_peer_mem).  A payload placed in pieces (an SGL, packets) is
 * placed piece after piece.
 */
bool sv_dma_write(void *dst, const void *src, size_t len);

/* The same without the order of the last byte (a READ's responses, placed
 * in the requester's own memory). */
bool sv_dma_copy(void *dst, const void *src, size_t len);

/* The same, into memory that may be GPU memory of gpu (NULL: host), or out
 * of it (sv_dma_read); SV_MEM_FAULT where the driver fails or host memory
 * is not mapped. */
enum sv_mem_err sv_dma_place(sv_cu_ctx gpu, void *dst, const void *src, size_t len);
enum sv_mem_err sv_dma_read(sv_cu_ctx gpu, void *dst, const void *src, size_t len);

/* Each piece of host memory in iov[0..n) (gpu[i] NULL) can be read: memory
 * that goes to the kernel or to a peer by reference, to be read later. */
bool sv_iov_readable(const struct iovec *iov, const sv_cu_ctx *gpu, int n);

/* Total length of an SGE list. */
uint64_t sv_sgl_len(const struct ibv_sge *sge, uint32_t nsge);

#endif
