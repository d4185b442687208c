/*
 * gpu_probe: ibv_reg_dmabuf_mr in a process without CUDA.  NCCL probes
 * dma-buf support with ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, 0) and reads
 * EOPNOTSUPP as "not supported" (anything else as "supported", and would
 * then try it): without CUDA softverbs answers EOPNOTSUPP for fd -1 and
 * for a real fd alike.  No CUDA here: SOFTVERBS_CUDA_LIB is dropped from
 * the environment and the driver is never loaded.
 */
#include "sv_test.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

int main(void)
{
	struct svt_dev d;
	int fd;

	svt_watchdog(50);
	unsetenv("SOFTVERBS_CUDA_LIB");
	svt_dev_open(&d);
	SVT_CHECK_MSG(!dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD),
		      "libcuda.so.1 is loaded in a process that never asked for it");

	SVT_CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(d.pd, 0, 4096, 0, -1, 0), EOPNOTSUPP);

	fd = memfd_create("svt-probe", MFD_CLOEXEC);
	SVT_CHECK(fd >= 0);
	SVT_CHECK_EQ(ftruncate(fd, 65536), 0);
	SVT_CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(d.pd, 0, 4096, 0, fd, 0), EOPNOTSUPP);
	SVT_CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(d.pd, 4096, 8192, 0x10000, fd, SVT_ACCESS_ALL),
			     EOPNOTSUPP);
	SVT_CHECK_EQ(close(fd), 0);

	/* host memory registers as ever */
	void *buf = svt_alloc(8192);
	struct ibv_mr *mr = svt_reg_mr(d.pd, buf, 8192, SVT_ACCESS_ALL);

	SVT_CHECK_OK(ibv_dereg_mr(mr));
	free(buf);
	svt_dev_close(&d);
	return 0;
}
