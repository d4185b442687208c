/*
 * The counters segment of a context (layout: src/stats/layout.h; counting:
 * stats.h): made at ibv_open_device, removed at ibv_close_device or exit.
 */
#include "engine/stats.h"
#include "engine/engine.h"
#include "stats/reader.h"
#include "stats/rundir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct sv_stat_qp sv_stat_nowhere;

static atomic_uint ctx_numbers; /* a context's number within the process */

/* A file RUNDIR/stats/PID-N.new, sized and mapped; NULL when it cannot be. */
static struct sv_stat_hdr *map_file(unsigned no, char *tmp, size_t len)
{
	char dir[1024];
	struct sv_stat_hdr *h;
	int fd;

	if (sv_rundir(dir, sizeof(dir)) || strlen(dir) + sizeof("/stats") > sizeof(dir))
		return NULL;
	strcat(dir, "/stats");
	if (sv_private_dir(dir) ||
	    (size_t)snprintf(tmp, len, "%s/%d-%u.new", dir, (int)getpid(), no) >= len)
		return NULL;
	/* what killed processes left, so that it never piles up between runs
	 * of `softverbs stat` (which also removes those of reused pids) */
	sv_stat_sweep(dir);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return NULL;
	/* sparse: only the pages of slots in use ever take memory */
	if (ftruncate(fd, (off_t)SV_STAT_FILE_SIZE)) {
		close(fd);
		unlink(tmp);
		return NULL;
	}
	h = mmap(NULL, SV_STAT_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (h == MAP_FAILED) {
		unlink(tmp);
		return NULL;
	}
	return h;
}

int sv_stats_open(struct sv_context *ctx)
{
	unsigned no = atomic_fetch_add(&ctx_numbers, 1);
	char tmp[1100];
	struct sv_stat_hdr *h = map_file(no, tmp, sizeof(tmp));
	struct timespec now;

	if (!h) {
		sv_info("counters of %s stay in this process (runtime directory: %s)",
			ctx->dev->ibdev.name, strerror(errno));
		h = mmap(NULL, SV_STAT_FILE_SIZE, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (h == MAP_FAILED)
			return errno;
		tmp[0] = '\0';
	}
	h->version = SV_STAT_VERSION;
	h->hdr_size = SV_STAT_HDR_SIZE;
	h->slot_size = sizeof(struct sv_stat_qp);
	h->nslots = SV_STAT_NSLOTS;
	h->pid = (int32_t)getpid();
	h->ctx_no = no;
	h->pid_start = sv_stat_proc_start(h->pid);
	clock_gettime(CLOCK_REALTIME, &now);
	h->opened_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	snprintf(h->comm, sizeof(h->comm), "%s", program_invocation_short_name);
	snprintf(h->dev, sizeof(h->dev), "%s", ctx->dev->ibdev.name);
	h->netns = sv_stat_netns();
	h->ep_ip = ctx->dev->ip.s_addr;
	snprintf(h->file, sizeof(h->file), "%s", tmp);
	ctx->stats = h;
	return 0;
}

/* The endpoint is known (the engine listens): the segment goes in place whole. */
void sv_stats_publish(struct sv_context *ctx)
{
	struct sv_stat_hdr *h = ctx->stats;
	size_t n = strlen(h->file);

	h->ep_port = ctx->eng->port;
	/* readers only see the file once it has its name: the rename below,
	 * a system call, comes after every store to the header */
	memcpy(h->magic, SV_STAT_MAGIC, sizeof(h->magic));
	if (n > 4 && !strcmp(h->file + n - 4, ".new")) {
		char *done = strndup(h->file, n - 4);

		if (done && !rename(h->file, done)) {
			snprintf(h->file, sizeof(h->file), "%s", done);
		} else {
			unlink(h->file);
			h->file[0] = '\0';
		}
		free(done);
	}
}

void sv_stats_unlink(struct sv_context *ctx)
{
	if (ctx->stats->file[0])
		unlink(ctx->stats->file);
	ctx->stats->file[0] = '\0';
}

void sv_stats_close(struct sv_context *ctx)
{
	sv_stats_unlink(ctx);
	munmap(ctx->stats, SV_STAT_FILE_SIZE);
	ctx->stats = NULL;
}

void sv_stats_qp_create(struct sv_qp *qp)
{
	struct sv_stat_hdr *h = qp->ctx->stats;
	struct sv_stat_qp *s = sv_stat_qp(qp);
	uint32_t used = __atomic_load_n(&h->slots_used, __ATOMIC_RELAXED);
	uint32_t need = sv_qpn_slot(qp->ctx, qp->ex.qp_base.qp_num) + 1;

	/* counters of the slot's previous QP went to `gone` at its destroy */
	memset(s, 0, sizeof(*s));
	s->qpn = qp->ex.qp_base.qp_num;
	s->type = (uint8_t)qp->ex.qp_base.qp_type;
	s->state = IBV_QPS_RESET;
	__atomic_store_n(&s->in_use, 1, __ATOMIC_RELEASE);
	while (used < need &&
	       !__atomic_compare_exchange_n(&h->slots_used, &used, need, true, __ATOMIC_RELEASE,
					    __ATOMIC_RELAXED))
		;
}

void sv_stats_qp_update(struct sv_qp *qp)
{
	struct sv_stat_qp *s = sv_stat_qp(qp);

	__atomic_store_n(&s->state, (uint8_t)qp->state, __ATOMIC_RELAXED);
	__atomic_store_n(&s->dest_qpn, qp->attr.dest_qp_num, __ATOMIC_RELAXED);
	/* the layout has room for IPv4 (an IPv6 peer shows as 0.0.0.0) */
	__atomic_store_n(&s->peer_ip, sv_ip_is_v4(&qp->peer.ip) ? sv_ip_v4(&qp->peer.ip).s_addr : 0,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&s->peer_port, qp->peer.port, __ATOMIC_RELAXED);
	if (qp->state == IBV_QPS_RESET)
		s->psn_valid = 0; /* the PSNs start over: nothing sent is resent */
}

void sv_stats_qp_destroy(struct sv_qp *qp)
{
	struct sv_stat_hdr *h = qp->ctx->stats;
	struct sv_stat_qp *s = sv_stat_qp(qp);

	/*
	 * The port keeps what the QP counted.  Readers see gone_seq odd while
	 * the counters move and read again; ctx->lock makes one destroy at a
	 * time step it.
	 */
	sv_mutex_lock(&qp->ctx->lock);
	__atomic_add_fetch(&h->gone_seq, 1, __ATOMIC_ACQ_REL);
	for (unsigned c = 0; c < SV_QPC_COUNT; c++) {
		sv_stat_add(&h->gone[c], __atomic_load_n(&s->c[c], __ATOMIC_RELAXED));
		__atomic_store_n(&s->c[c], 0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&s->in_use, 0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->gone_seq, 1, __ATOMIC_ACQ_REL);
	sv_mutex_unlock(&qp->ctx->lock);
}

uint64_t sv_stats_device_counter(struct sv_context *ctx, enum sv_stat_qp_counter c)
{
	struct sv_stat_ctx_view sum, own;
	int n = sv_stat_device_sum(ctx->dev->ibdev.name, &sum);
	uint64_t v = n > 0 ? sum.port[c] : 0;

	/* a context whose counters no other process can see counts itself */
	if (n < 0 || !ctx->stats->file[0]) {
		if (!sv_stat_snapshot(ctx->stats, 0, &own))
			v += own.port[c];
	}
	return v;
}
