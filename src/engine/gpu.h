/*
 * GPU memory in the data path (GPUDirect RDMA without a NIC).  The CPU
 * never touches CUDA device memory: bytes move through the driver on
 * softverbs' own stream (common/cuda.c).  What leaves in packets is staged
 * first, a window of up to SV_GPU_STAGE bytes at a time copied out in one
 * go, so that one driver copy serves many packets; atomics on GPU memory
 * are read-modify-write under one process-wide lock.
 */
#ifndef SV_GPU_H
#define SV_GPU_H

#include "engine/objects.h"
#include "wire/wire.h"

#define SV_GPU_STAGE (1u << 20)

/*
 * A host window onto bytes [off, off+len) of one message: a send WQE's
 * payload, or the memory a READ answers from.  `owner`/`tag` name the
 * message; a window is refilled when a packet falls outside it.
 */
struct sv_gpu_stage {
	uint8_t *buf;
	sv_cu_ctx pinned; /* the context it was page-locked in, if it was */
	uintptr_t owner;
	uint64_t tag;
	uint64_t off, len;
};

/* Is any piece GPU memory? */
static inline bool sv_gpu_any(const sv_cu_ctx *gpu, int n)
{
	for (int i = 0; i < n; i++)
		if (gpu[i])
			return true;
	return false;
}

/* The window over [off, off+len) of message (owner, tag) if the stage holds it, else NULL. */
uint8_t *sv_gpu_stage_find(struct sv_gpu_stage *st, uintptr_t owner, uint64_t tag, uint64_t off,
			   uint64_t len);
/* Make the stage (allocated at first use, *pst) hold message (owner, tag)
 * from off for up to SV_GPU_STAGE bytes of `total`; returns its buffer for
 * the caller to fill, or NULL without memory. */
uint8_t *sv_gpu_stage_claim(struct sv_gpu_stage **pst, sv_cu_ctx gpu, uintptr_t owner,
			    uint64_t tag, uint64_t off, uint64_t total);
void sv_gpu_stage_forget(struct sv_gpu_stage *st); /* its contents are stale */
void sv_gpu_stage_free(struct sv_gpu_stage **pst);

/*
 * Bytes bound for GPU memory from incoming packets (a WRITE's payload, a
 * SEND's or a READ response's scattered into GPU buffers) are not copied
 * one packet at a time, which would cost the driver's whole latency per
 * MTU: they go into a page-locked ring, and consecutive packets for
 * consecutive addresses become one copy, started when the run ends, a
 * quarter megabyte has gathered, or the ring is full.  A fence waits for
 * everything put so far: it comes before anything that tells anyone the
 * bytes are there (an ACK, a completion, a READ or atomic on that memory).
 */
#define SV_GPU_SINK (4u << 20)

struct sv_gpu_sink {
	uint8_t *ring;
	sv_cu_ctx pinned;
	size_t used;	/* ring bytes of copies not yet waited for */
	sv_cu_ctx busy; /* the context with copies started and not waited for */
	/* the copy being gathered: [src, src + len) (in the ring, or a peer's
	 * GPU memory opened here) to dst, in context gpu */
	sv_cu_ctx gpu;
	uint8_t *dst;
	const uint8_t *src;
	size_t len;
	bool failed; /* a copy failed since the last fence */
};

/* Place len bytes at dst (GPU memory of gpu); the sink is made at first use. */
enum sv_mem_err sv_gpu_sink_put(struct sv_gpu_sink **ps, sv_cu_ctx gpu, uint8_t *dst,
				const void *src, size_t len);
/* Copy len bytes from GPU memory src (of ctx) to dst (GPU or host memory):
 * from a peer's GPU memory, in place at the next fence. */
enum sv_mem_err sv_gpu_sink_copy(struct sv_gpu_sink **ps, sv_cu_ctx ctx, uint8_t *dst,
				 const uint8_t *src, size_t len);
/* Start the copy gathered (a message ended: no fence may follow soon). */
void sv_gpu_sink_start(struct sv_gpu_sink *s);
/* Everything put so far is in place, its failure (if any) kept for the
 * next sv_gpu_sink_fence to report (a READ or atomic about to look). */
void sv_gpu_sink_drain(struct sv_gpu_sink *s);
/* The QP failed, was reset or goes: what is gathered is dropped (its target
 * may be gone), what was started is waited for, nothing is reported. */
void sv_gpu_sink_abort(struct sv_gpu_sink *s);
/* Everything put so far is in place: SV_MEM_OK, or SV_MEM_FAULT where a copy failed. */
enum sv_mem_err sv_gpu_sink_fence(struct sv_gpu_sink *s);
void sv_gpu_sink_free(struct sv_gpu_sink **ps);

/*
 * The atomics on an 8-byte word of GPU memory: atomic with respect to every
 * other softverbs atomic in the process (the HCA's own atomicity, as a NIC
 * gives on GPU memory), not to the GPU's own threads.  false: the driver failed.
 */
bool sv_gpu_cmp_swap(sv_cu_ctx gpu, uint64_t *word, uint64_t cmp, uint64_t swap, uint64_t *orig);
bool sv_gpu_fetch_add(sv_cu_ctx gpu, uint64_t *word, uint64_t add, uint64_t *orig);
bool sv_gpu_store(sv_cu_ctx gpu, uint64_t *word, uint64_t v);

/*
 * Same-host GPU references (wire.h struct sv_gpu_ref): between two processes
 * of one host that both opened CUDA, an RC packet whose payload is GPU
 * memory names it instead of carrying it, and the receiver copies it GPU to
 * GPU.  Only payloads of at least SV_GPU_REF_MIN bytes: below that the
 * driver's per-copy cost is more than the bytes' trip through the ring.
 */
#define SV_GPU_REF_MIN 1024u

/* May a packet on conn name GPU memory (a peer process of this host that opens it)? */
bool sv_gpu_ref_ok(const struct sv_conn *conn);
/* The reference to [ptr, ptr+len) in GPU memory under key entry e (an MR or a
 * window); false where its memory cannot be shared (the bytes travel). */
bool sv_gpu_ref_make(const struct sv_mr *e, const uint8_t *ptr, uint32_t len,
		     struct sv_gpu_ref *ref);
/* Where the bytes a reference names are in this process, and the context to
 * copy them in; NULL where they cannot be opened or lie outside what the
 * peer exported. */
const uint8_t *sv_gpu_ref_open(const struct sv_gpu_ref *ref, sv_cu_ctx *ctx);

#endif
