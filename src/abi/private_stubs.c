/*
 * rdma-core's private provider interface (version node IBVERBS_PRIVATE_34).
 *
 * Why this file exists: in rdma-core, libibverbs.so.1 exports these functions
 * for its hardware providers (libmlx5, libefa, ...), which build their verbs
 * on top of the kernel's uverbs commands. Some Debian binaries (perftest's
 * ib_*_bw/lat) link libmlx5.so.1 and libefa.so.1 directly, and those libraries
 * import the symbols below from libibverbs.so.1 by version. With softverbs in
 * place of libibverbs the dynamic linker must still resolve every one of them,
 * or the programs do not even start.
 *
 * softverbs has no kernel device and never hands a context to a vendor
 * provider, so none of this code runs on a working path. Each entry point only
 * fails cleanly: int-returning commands give EOPNOTSUPP (rdma-core's ibv_cmd_*
 * return an errno value), pointer-returning ones give NULL with errno set,
 * bookkeeping helpers do nothing. verbs_register_driver_34 is called from the
 * vendor libraries' constructors at load time and must therefore be a silent
 * no-op.
 *
 * rdma-core's private headers (driver.h, kern-abi.h, cmd_ioctl.h) are not
 * installed, so the signatures below are written out here, following rdma-core
 * 44. Structures only ever passed by pointer are left incomplete. C symbols
 * carry no types, so what matters for the ABI is the name and the version node.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

#define SV_UNUSED __attribute__((unused))

/* Provider-side types of rdma-core, opaque here. */
struct verbs_device_ops;
struct verbs_sysfs_dev;
struct verbs_mr;
struct verbs_qp;
struct verbs_cq;
struct verbs_srq;
struct verbs_xrcd;
struct verbs_dm;
struct verbs_counters;
struct verbs_flow_action;
struct verbs_context_ops;
struct ibv_command_buffer;

/* Command and response layouts of the uverbs write() ABI, opaque here. */
struct ibv_get_context;
struct ibv_query_port;
struct ibv_alloc_pd;
struct ibv_open_xrcd;
struct ibv_reg_mr;
struct ibv_rereg_mr;
struct ibv_alloc_mw;
struct ibv_create_cq;
struct ibv_create_cq_ex;
struct ibv_resize_cq;
struct ibv_modify_cq;
struct ibv_create_srq;
struct ibv_create_xsrq;
struct ibv_modify_srq;
struct ibv_query_srq;
struct ibv_create_qp;
struct ibv_create_qp_ex;
struct ibv_open_qp;
struct ibv_query_qp;
struct ibv_modify_qp;
struct ibv_modify_qp_ex;
struct ibv_create_wq;
struct ibv_modify_wq;
struct ib_uverbs_get_context_resp;
struct ib_uverbs_ex_query_device_resp;
struct ib_uverbs_alloc_pd_resp;
struct ib_uverbs_open_xrcd_resp;
struct ib_uverbs_reg_mr_resp;
struct ib_uverbs_rereg_mr_resp;
struct ib_uverbs_alloc_mw_resp;
struct ib_uverbs_create_cq_resp;
struct ib_uverbs_ex_create_cq_resp;
struct ib_uverbs_resize_cq_resp;
struct ib_uverbs_create_srq_resp;
struct ib_uverbs_create_qp_resp;
struct ib_uverbs_ex_create_qp_resp;
struct ib_uverbs_ex_modify_qp_resp;
struct ib_uverbs_create_ah_resp;
struct ib_uverbs_ex_create_wq_resp;
struct ib_uverbs_ex_create_rwq_ind_table_resp;

/* The outcome of every command below: "this device cannot do that". */
static int unsupported(void)
{
	errno = EOPNOTSUPP;
	return EOPNOTSUPP;
}

static void *unsupported_ptr(void)
{
	errno = EOPNOTSUPP;
	return NULL;
}

/* ---- registration and context bookkeeping ---- */

/* Read by rdma-core's destroy paths after a device disassociates. */
bool verbs_allow_disassociate_destroy;

/* Called by each vendor library's constructor; softverbs has no use for them. */
void verbs_register_driver_34(const struct verbs_device_ops *ops SV_UNUSED)
{
}

void __verbs_log(struct verbs_context *ctx SV_UNUSED, uint32_t level SV_UNUSED,
		 const char *fmt SV_UNUSED, ...) __attribute__((format(printf, 3, 4)));

void __verbs_log(struct verbs_context *ctx SV_UNUSED, uint32_t level SV_UNUSED,
		 const char *fmt SV_UNUSED, ...)
{
}

void *_verbs_init_and_alloc_context(struct ibv_device *device SV_UNUSED, int cmd_fd SV_UNUSED,
				    size_t alloc_size SV_UNUSED,
				    struct verbs_context *context_offset SV_UNUSED,
				    uint32_t driver_id SV_UNUSED)
{
	return unsupported_ptr();
}

struct ibv_context *verbs_open_device(struct ibv_device *device SV_UNUSED,
				      void *private_data SV_UNUSED)
{
	return unsupported_ptr();
}

void verbs_uninit_context(struct verbs_context *context SV_UNUSED)
{
}

void verbs_set_ops(struct verbs_context *vctx SV_UNUSED,
		   const struct verbs_context_ops *ops SV_UNUSED)
{
}

void verbs_init_cq(struct ibv_cq *cq SV_UNUSED, struct ibv_context *context SV_UNUSED,
		   struct ibv_comp_channel *channel SV_UNUSED, void *cq_context SV_UNUSED)
{
}

/* ibv_query_gid_type is real: ibv_devinfo uses it (src/verbs/query.c). */

int ibv_read_ibdev_sysfs_file(char *buf SV_UNUSED, size_t size SV_UNUSED,
			      struct verbs_sysfs_dev *sysfs_dev SV_UNUSED,
			      const char *fnfmt SV_UNUSED, ...)
	__attribute__((format(printf, 4, 5)));

int ibv_read_ibdev_sysfs_file(char *buf SV_UNUSED, size_t size SV_UNUSED,
			      struct verbs_sysfs_dev *sysfs_dev SV_UNUSED,
			      const char *fnfmt SV_UNUSED, ...)
{
	unsupported();
	return -1;
}

/* ---- ioctl() command interface ---- */

/* Pure arithmetic in rdma-core (sizing a command buffer); no attributes are added here. */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs,
				     struct ibv_command_buffer *link SV_UNUSED)
{
	return num_attrs;
}

int execute_ioctl(struct ibv_context *context SV_UNUSED, struct ibv_command_buffer *cmd SV_UNUSED)
{
	return unsupported();
}

/* ---- uverbs commands: context and device ---- */

int ibv_cmd_get_context(struct verbs_context *context SV_UNUSED,
			struct ibv_get_context *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
			struct ib_uverbs_get_context_resp *resp SV_UNUSED,
			size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_query_context(struct ibv_context *ctx SV_UNUSED,
			  struct ibv_command_buffer *driver SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_query_device_any(struct ibv_context *context SV_UNUSED,
			     const struct ibv_query_device_ex_input *input SV_UNUSED,
			     struct ibv_device_attr_ex *attr SV_UNUSED, size_t attr_size SV_UNUSED,
			     struct ib_uverbs_ex_query_device_resp *resp SV_UNUSED,
			     size_t *resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_query_port(struct ibv_context *context SV_UNUSED, uint8_t port_num SV_UNUSED,
		       struct ibv_port_attr *port_attr SV_UNUSED,
		       struct ibv_query_port *cmd SV_UNUSED, size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

/* ---- PD, XRCD ---- */

int ibv_cmd_alloc_pd(struct ibv_context *context SV_UNUSED, struct ibv_pd *pd SV_UNUSED,
		     struct ibv_alloc_pd *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		     struct ib_uverbs_alloc_pd_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_dealloc_pd(struct ibv_pd *pd SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_open_xrcd(struct ibv_context *context SV_UNUSED, struct verbs_xrcd *xrcd SV_UNUSED,
		      int vxrcd_size SV_UNUSED, struct ibv_xrcd_init_attr *attr SV_UNUSED,
		      struct ibv_open_xrcd *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		      struct ib_uverbs_open_xrcd_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_close_xrcd(struct verbs_xrcd *xrcd SV_UNUSED)
{
	return unsupported();
}

/* ---- MR, MW, DM ---- */

int ibv_cmd_reg_mr(struct ibv_pd *pd SV_UNUSED, void *addr SV_UNUSED, size_t length SV_UNUSED,
		   uint64_t hca_va SV_UNUSED, int access SV_UNUSED, struct verbs_mr *vmr SV_UNUSED,
		   struct ibv_reg_mr *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		   struct ib_uverbs_reg_mr_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_rereg_mr(struct verbs_mr *vmr SV_UNUSED, uint32_t flags SV_UNUSED,
		     void *addr SV_UNUSED, size_t length SV_UNUSED, uint64_t hca_va SV_UNUSED,
		     int access SV_UNUSED, struct ibv_pd *pd SV_UNUSED,
		     struct ibv_rereg_mr *cmd SV_UNUSED, size_t cmd_sz SV_UNUSED,
		     struct ib_uverbs_rereg_mr_resp *resp SV_UNUSED, size_t resp_sz SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_dereg_mr(struct verbs_mr *vmr SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_query_mr(struct ibv_pd *pd SV_UNUSED, struct verbs_mr *vmr SV_UNUSED,
		     uint32_t mr_handle SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_advise_mr(struct ibv_pd *pd SV_UNUSED, enum ibv_advise_mr_advice advice SV_UNUSED,
		      uint32_t flags SV_UNUSED, struct ibv_sge *sg_list SV_UNUSED,
		      uint32_t num_sge SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_reg_dmabuf_mr(struct ibv_pd *pd SV_UNUSED, uint64_t offset SV_UNUSED,
			  size_t length SV_UNUSED, uint64_t iova SV_UNUSED, int fd SV_UNUSED,
			  int access SV_UNUSED, struct verbs_mr *vmr SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_alloc_mw(struct ibv_pd *pd SV_UNUSED, enum ibv_mw_type type SV_UNUSED,
		     struct ibv_mw *mw SV_UNUSED, struct ibv_alloc_mw *cmd SV_UNUSED,
		     size_t cmd_size SV_UNUSED, struct ib_uverbs_alloc_mw_resp *resp SV_UNUSED,
		     size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_dealloc_mw(struct ibv_mw *mw SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_alloc_dm(struct ibv_context *ctx SV_UNUSED,
		     const struct ibv_alloc_dm_attr *dm_attr SV_UNUSED,
		     struct verbs_dm *dm SV_UNUSED, struct ibv_command_buffer *link SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_free_dm(struct verbs_dm *dm SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_reg_dm_mr(struct ibv_pd *pd SV_UNUSED, struct verbs_dm *dm SV_UNUSED,
		      uint64_t offset SV_UNUSED, size_t length SV_UNUSED,
		      unsigned int access SV_UNUSED, struct verbs_mr *vmr SV_UNUSED,
		      struct ibv_command_buffer *link SV_UNUSED)
{
	return unsupported();
}

/* ---- CQ ---- */

int ibv_cmd_create_cq(struct ibv_context *context SV_UNUSED, int cqe SV_UNUSED,
		      struct ibv_comp_channel *channel SV_UNUSED, int comp_vector SV_UNUSED,
		      struct ibv_cq *cq SV_UNUSED, struct ibv_create_cq *cmd SV_UNUSED,
		      size_t cmd_size SV_UNUSED, struct ib_uverbs_create_cq_resp *resp SV_UNUSED,
		      size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_create_cq_ex(struct ibv_context *context SV_UNUSED,
			 const struct ibv_cq_init_attr_ex *cq_attr SV_UNUSED,
			 struct verbs_cq *cq SV_UNUSED, struct ibv_create_cq_ex *cmd SV_UNUSED,
			 size_t cmd_size SV_UNUSED,
			 struct ib_uverbs_ex_create_cq_resp *resp SV_UNUSED,
			 size_t resp_size SV_UNUSED, uint32_t cmd_flags SV_UNUSED)
{
	return unsupported();
}

/* A poll: returns a completion count, so failure is -1 as for ibv_poll_cq(). */
int ibv_cmd_poll_cq(struct ibv_cq *cq SV_UNUSED, int ne SV_UNUSED, struct ibv_wc *wc SV_UNUSED)
{
	unsupported();
	return -1;
}

int ibv_cmd_req_notify_cq(struct ibv_cq *cq SV_UNUSED, int solicited_only SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_resize_cq(struct ibv_cq *cq SV_UNUSED, int cqe SV_UNUSED,
		      struct ibv_resize_cq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		      struct ib_uverbs_resize_cq_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_cq(struct ibv_cq *cq SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_modify_cq(struct ibv_cq *cq SV_UNUSED, struct ibv_modify_cq_attr *attr SV_UNUSED,
		      struct ibv_modify_cq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

/* ---- SRQ ---- */

int ibv_cmd_create_srq(struct ibv_pd *pd SV_UNUSED, struct ibv_srq *srq SV_UNUSED,
		       struct ibv_srq_init_attr *attr SV_UNUSED,
		       struct ibv_create_srq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		       struct ib_uverbs_create_srq_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_create_srq_ex(struct ibv_context *context SV_UNUSED, struct verbs_srq *srq SV_UNUSED,
			  struct ibv_srq_init_attr_ex *attr_ex SV_UNUSED,
			  struct ibv_create_xsrq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
			  struct ib_uverbs_create_srq_resp *resp SV_UNUSED,
			  size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_modify_srq(struct ibv_srq *srq SV_UNUSED, struct ibv_srq_attr *srq_attr SV_UNUSED,
		       int srq_attr_mask SV_UNUSED, struct ibv_modify_srq *cmd SV_UNUSED,
		       size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_query_srq(struct ibv_srq *srq SV_UNUSED, struct ibv_srq_attr *srq_attr SV_UNUSED,
		      struct ibv_query_srq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_srq(struct ibv_srq *srq SV_UNUSED)
{
	return unsupported();
}

/* ---- QP ---- */

int ibv_cmd_create_qp(struct ibv_pd *pd SV_UNUSED, struct ibv_qp *qp SV_UNUSED,
		      struct ibv_qp_init_attr *attr SV_UNUSED, struct ibv_create_qp *cmd SV_UNUSED,
		      size_t cmd_size SV_UNUSED, struct ib_uverbs_create_qp_resp *resp SV_UNUSED,
		      size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_create_qp_ex(struct ibv_context *context SV_UNUSED, struct verbs_qp *qp SV_UNUSED,
			 struct ibv_qp_init_attr_ex *attr_ex SV_UNUSED,
			 struct ibv_create_qp *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
			 struct ib_uverbs_create_qp_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_create_qp_ex2(struct ibv_context *context SV_UNUSED, struct verbs_qp *qp SV_UNUSED,
			  struct ibv_qp_init_attr_ex *qp_attr SV_UNUSED,
			  struct ibv_create_qp_ex *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
			  struct ib_uverbs_ex_create_qp_resp *resp SV_UNUSED,
			  size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_open_qp(struct ibv_context *context SV_UNUSED, struct verbs_qp *qp SV_UNUSED,
		    int vqp_sz SV_UNUSED, struct ibv_qp_open_attr *attr SV_UNUSED,
		    struct ibv_open_qp *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		    struct ib_uverbs_create_qp_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_query_qp(struct ibv_qp *qp SV_UNUSED, struct ibv_qp_attr *qp_attr SV_UNUSED,
		     int attr_mask SV_UNUSED, struct ibv_qp_init_attr *qp_init_attr SV_UNUSED,
		     struct ibv_query_qp *cmd SV_UNUSED, size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_modify_qp(struct ibv_qp *qp SV_UNUSED, struct ibv_qp_attr *attr SV_UNUSED,
		      int attr_mask SV_UNUSED, struct ibv_modify_qp *cmd SV_UNUSED,
		      size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_modify_qp_ex(struct ibv_qp *qp SV_UNUSED, struct ibv_qp_attr *attr SV_UNUSED,
			 int attr_mask SV_UNUSED, struct ibv_modify_qp_ex *cmd SV_UNUSED,
			 size_t cmd_size SV_UNUSED,
			 struct ib_uverbs_ex_modify_qp_resp *resp SV_UNUSED,
			 size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_qp(struct ibv_qp *qp SV_UNUSED)
{
	return unsupported();
}

/* Posting commands report the first WR as the one that failed. */
int ibv_cmd_post_send(struct ibv_qp *ibqp SV_UNUSED, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return unsupported();
}

int ibv_cmd_post_recv(struct ibv_qp *ibqp SV_UNUSED, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return unsupported();
}

int ibv_cmd_post_srq_recv(struct ibv_srq *srq SV_UNUSED, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	if (bad_wr)
		*bad_wr = wr;
	return unsupported();
}

/* ---- AH, multicast ---- */

int ibv_cmd_create_ah(struct ibv_pd *pd SV_UNUSED, struct ibv_ah *ah SV_UNUSED,
		      struct ibv_ah_attr *attr SV_UNUSED,
		      struct ib_uverbs_create_ah_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_ah(struct ibv_ah *ah SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_attach_mcast(struct ibv_qp *qp SV_UNUSED, const union ibv_gid *gid SV_UNUSED,
			 uint16_t lid SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_detach_mcast(struct ibv_qp *qp SV_UNUSED, const union ibv_gid *gid SV_UNUSED,
			 uint16_t lid SV_UNUSED)
{
	return unsupported();
}

/* ---- flow steering, flow actions ---- */

int ibv_cmd_create_flow(struct ibv_qp *qp SV_UNUSED, struct ibv_flow *flow_id SV_UNUSED,
			struct ibv_flow_attr *flow_attr SV_UNUSED, void *ucmd SV_UNUSED,
			size_t ucmd_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_flow(struct ibv_flow *flow_id SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_create_flow_action_esp(struct ibv_context *ctx SV_UNUSED,
				   struct ibv_flow_action_esp_attr *attr SV_UNUSED,
				   struct verbs_flow_action *flow_action SV_UNUSED,
				   struct ibv_command_buffer *driver SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_modify_flow_action_esp(struct verbs_flow_action *flow_action SV_UNUSED,
				   struct ibv_flow_action_esp_attr *attr SV_UNUSED,
				   struct ibv_command_buffer *driver SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_flow_action(struct verbs_flow_action *action SV_UNUSED)
{
	return unsupported();
}

/* ---- WQ, RSS indirection tables ---- */

int ibv_cmd_create_wq(struct ibv_context *context SV_UNUSED,
		      struct ibv_wq_init_attr *wq_init_attr SV_UNUSED, struct ibv_wq *wq SV_UNUSED,
		      struct ibv_create_wq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED,
		      struct ib_uverbs_ex_create_wq_resp *resp SV_UNUSED, size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_modify_wq(struct ibv_wq *wq SV_UNUSED, struct ibv_wq_attr *attr SV_UNUSED,
		      struct ibv_modify_wq *cmd SV_UNUSED, size_t cmd_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_wq(struct ibv_wq *wq SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_create_rwq_ind_table(struct ibv_context *context SV_UNUSED,
				 struct ibv_rwq_ind_table_init_attr *init_attr SV_UNUSED,
				 struct ibv_rwq_ind_table *rwq_ind_table SV_UNUSED,
				 struct ib_uverbs_ex_create_rwq_ind_table_resp *resp SV_UNUSED,
				 size_t resp_size SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_rwq_ind_table(struct ibv_rwq_ind_table *rwq_ind_table SV_UNUSED)
{
	return unsupported();
}

/* ---- counters ---- */

int ibv_cmd_create_counters(struct ibv_context *context SV_UNUSED,
			    struct ibv_counters_init_attr *init_attr SV_UNUSED,
			    struct verbs_counters *vcounters SV_UNUSED,
			    struct ibv_command_buffer *link SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_destroy_counters(struct verbs_counters *vcounters SV_UNUSED)
{
	return unsupported();
}

int ibv_cmd_read_counters(struct verbs_counters *vcounters SV_UNUSED,
			  uint64_t *counters_value SV_UNUSED, uint32_t ncounters SV_UNUSED,
			  uint32_t flags SV_UNUSED, struct ibv_command_buffer *link SV_UNUSED)
{
	return unsupported();
}
