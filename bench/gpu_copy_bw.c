/*
 * softverbs-bench-gpucopy: what the GPU's own copy engines move, the
 * ceiling of any RDMA into or out of GPU memory on this host.  CUDA is
 * reached by dlopen (no build-time dependency; without a GPU it says so and
 * exits 77).  For each size: device-to-device, host-to-device and
 * device-to-host from page-locked and from ordinary (pageable) host memory,
 * each copy repeated for about `secs` seconds; prints one line per size:
 *   bytes d2d_MBps h2d_pinned_MBps h2d_pageable_MBps d2h_pinned_MBps
 *
 *   softverbs-bench-gpucopy [secs] size...
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext;

static CUresult (*cuInit)(unsigned int);
static CUresult (*cuDeviceGet)(int *, int);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*cuMemAllocHost)(void **, size_t);
static CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*cuCtxSynchronize)(void);

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double rate(CUdeviceptr dst, CUdeviceptr src, size_t n, double secs)
{
	double t0 = now(), t;
	long k = 0;

	cuMemcpy(dst, src, n); /* warm */
	cuCtxSynchronize();
	t0 = now();
	do {
		if (cuMemcpy(dst, src, n))
			return -1;
		k++;
		t = now();
	} while (t - t0 < secs);
	cuCtxSynchronize();
	t = now();
	return (double)n * (double)k / (t - t0) / 1e6;
}

#define SYM(name, sym)                                                                     \
	do {                                                                                \
		*(void **)&name = dlsym(h, sym);                                            \
		if (!name) {                                                                \
			fprintf(stderr, "libcuda.so.1 without %s\n", sym);                  \
			return 77;                                                          \
		}                                                                           \
	} while (0)

int main(int argc, char **argv)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	double secs = argc > 1 ? atof(argv[1]) : 0.5;
	size_t max = 0;
	CUdeviceptr d1, d2;
	void *pinned, *pageable;
	CUcontext c;
	int dev;

	if (!h) {
		fprintf(stderr, "no CUDA driver (libcuda.so.1): nothing to measure\n");
		return 77;
	}
	SYM(cuInit, "cuInit");
	SYM(cuDeviceGet, "cuDeviceGet");
	SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
	SYM(cuCtxSetCurrent, "cuCtxSetCurrent");
	SYM(cuMemAlloc, "cuMemAlloc_v2");
	SYM(cuMemAllocHost, "cuMemAllocHost_v2");
	SYM(cuMemcpy, "cuMemcpy");
	SYM(cuCtxSynchronize, "cuCtxSynchronize");
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&c, dev) ||
	    cuCtxSetCurrent(c)) {
		fprintf(stderr, "no usable GPU\n");
		return 77;
	}
	for (int i = 2; i < argc; i++)
		if ((size_t)atoll(argv[i]) > max)
			max = (size_t)atoll(argv[i]);
	if (!max || cuMemAlloc(&d1, max) || cuMemAlloc(&d2, max) || cuMemAllocHost(&pinned, max) ||
	    !(pageable = malloc(max)))
		return 1;
	memset(pageable, 1, max);
	memset(pinned, 1, max);
	printf("# bytes d2d_MBps h2d_pinned_MBps h2d_pageable_MBps d2h_pinned_MBps\n");
	for (int i = 2; i < argc; i++) {
		size_t n = (size_t)atoll(argv[i]);

		printf("%zu %.0f %.0f %.0f %.0f\n", n, rate(d2, d1, n, secs),
		       rate(d1, (CUdeviceptr)(size_t)pinned, n, secs),
		       rate(d1, (CUdeviceptr)(size_t)pageable, n, secs),
		       rate((CUdeviceptr)(size_t)pinned, d1, n, secs));
		fflush(stdout);
	}
	return 0;
}
