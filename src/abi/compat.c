/*
 * Old helper entry points that libibverbs has always exported and that some
 * programs still call: kernel-ABI marshalling helpers, sysfs helpers and the
 * fork-support switches.
 *
 * None of these touches the software HCA. The marshalling helpers copy between
 * the kernel's uverbs/SA structures (from the kernel's UAPI headers) and the
 * verbs structures field by field, as librdmacm-style code expects.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

/*
 * rdma-core declares these in headers that Debian does not install
 * (infiniband/marshall.h, infiniband/driver.h); the prototypes here follow
 * those declarations so that existing callers link against the same ABI.
 */
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);

/* ---- kernel ABI marshalling ---- */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;

	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

/*
 * Like rdma-core's, this leaves dst->qp_state alone: callers of the kernel's
 * query command fill the state themselves, and code written against rdma-core
 * may rely on the field surviving the copy.
 */
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = (enum ibv_qp_state)src->cur_qp_state;
	dst->path_mtu = (enum ibv_mtu)src->path_mtu;
	dst->path_mig_state = (enum ibv_mig_state)src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = (unsigned int)src->qp_access_flags;

	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;

	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);

	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

/*
 * The scalar fields that struct ibv_sa_path_rec and the kernel's
 * struct ib_user_path_rec have in common; both directions copy this one list.
 * (Widths differ for a few, e.g. mtu: the values fit either way.)
 */
#define PATH_REC_SCALAR_FIELDS(X)                                                   \
	X(dlid) X(slid) X(raw_traffic) X(flow_label) X(hop_limit) X(traffic_class) \
	X(reversible) X(numb_path) X(pkey) X(sl) X(mtu_selector) X(mtu)            \
	X(rate_selector) X(rate) X(packet_life_time_selector) X(packet_life_time)  \
	X(preference)

#define COPY_FIELD(f) dst->f = src->f;

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
	PATH_REC_SCALAR_FIELDS(COPY_FIELD)
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	PATH_REC_SCALAR_FIELDS(COPY_FIELD)
}

#undef COPY_FIELD

/* ---- sysfs helpers ---- */

/*
 * Reads "<dir>/<file>" into buf as a C string, the way sysfs attributes are
 * consumed: one read, a trailing newline removed, NUL-terminated. Returns the
 * string length, or -1 with errno set. Contents that fill buf completely with
 * no newline to replace cannot be terminated and fail (rather than handing the
 * caller an unterminated string).
 */
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[4096];
	int n = snprintf(path, sizeof(path), "%s/%s", dir, file);

	if (n < 0 || (size_t)n >= sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;

	ssize_t len = read(fd, buf, size);
	int saved_errno = errno;
	close(fd);
	if (len < 0) {
		errno = saved_errno;
		return -1;
	}

	if (len > 0) {
		if (buf[len - 1] == '\n') {
			buf[--len] = '\0';
		} else if ((size_t)len < size) {
			buf[len] = '\0';
		} else {
			errno = EOVERFLOW;
			return -1;
		}
	}
	return (int)len;
}

/* ---- fork support ---- */

/*
 * rdma-core's fork support marks registered memory MADV_DONTFORK so that a
 * child's copy-on-write cannot move pages the HCA has pinned. softverbs never
 * pins memory: the engine accesses registered buffers through this process's
 * own mappings, so after fork() the parent keeps working with no madvise().
 * ibv_fork_init() only records that the program asked, so that
 * ibv_is_fork_initialized() answers the way the program expects.
 */
static atomic_bool fork_init_called;

int ibv_fork_init(void)
{
	atomic_store(&fork_init_called, true);
	return 0;
}

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return atomic_load(&fork_init_called) ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

int ibv_dontfork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}

int ibv_dofork_range(void *base, size_t size)
{
	(void)base;
	(void)size;
	return 0;
}
