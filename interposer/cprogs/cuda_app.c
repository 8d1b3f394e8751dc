/*
 * cuda_app: a CUDA driver-API program for the interposer's CUDA tests. It runs against
 * whatever libcuda.so.1 the loader finds — in CI the TEST DOUBLE (testkit/cuda-double), which
 * allocates host memory and times kernels on a simulated stream clock.
 *
 * Built twice by build.rs:
 *   cuda_app_dlopen  resolves every entry point the CUDA-runtime way: dlopen("libcuda.so.1"),
 *                    dlsym(cuGetProcAddress_v2), then cuGetProcAddress for everything else
 *                    (also cuGetProcAddress itself and cuGetExportTable);
 *   cuda_app_linked  (-DLINKED) calls the driver by symbol, linked against a link-time stub
 *                    libcuda.so (as programs link the CUDA toolkit's stubs/libcuda.so).
 *
 * Prints what the driver returned, for the test to compare with the trace:
 *   ep NAME OBJECT        the object that defines each entry point the program got
 *   alloc PTR SIZE / hostalloc PTR SIZE / register PTR SIZE FLAGS / devptr HOST DEVICE
 *   function HANDLE NAME
 *   launch API FUNCTION GX GY GZ BX BY BZ SHM STREAM
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef struct {
	unsigned grid[3], block[3], shm;
	uint64_t stream;
	void *attrs;
	unsigned num_attrs;
} CUlaunchConfig;

#define DRIVER(X)                                                                                           \
	X(cuInit, (unsigned))                                                                              \
	X(cuDeviceGet, (int *, int))                                                                       \
	X(cuDevicePrimaryCtxRetain, (uint64_t *, int))                                                     \
	X(cuCtxSetCurrent, (uint64_t))                                                                     \
	X(cuStreamCreateWithPriority, (uint64_t *, unsigned, int))                                         \
	X(cuStreamSynchronize, (uint64_t))                                                                 \
	X(cuMemAlloc_v2, (uint64_t *, size_t))                                                             \
	X(cuMemFree_v2, (uint64_t))                                                                        \
	X(cuMemHostAlloc, (void **, size_t, unsigned))                                                     \
	X(cuMemFreeHost, (void *))                                                                         \
	X(cuMemHostRegister_v2, (void *, size_t, unsigned))                                                \
	X(cuMemHostUnregister, (void *))                                                                   \
	X(cuMemHostGetDevicePointer_v2, (uint64_t *, void *, unsigned))                                    \
	X(cuModuleLoadData, (uint64_t *, const void *))                                                    \
	X(cuModuleGetFunction, (uint64_t *, uint64_t, const char *))                                       \
	X(cuLaunchKernel, (uint64_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
			   uint64_t, void **, void **))                                                    \
	X(cuLaunchKernelEx, (const CUlaunchConfig *, uint64_t, void **, void **))                          \
	X(cuLaunchCooperativeKernel, (uint64_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, \
				      unsigned, uint64_t, void **))                                        \
	X(cuGraphCreate, (uint64_t *, unsigned))                                                           \
	X(cuGraphInstantiateWithFlags, (uint64_t *, uint64_t, unsigned long long))                         \
	X(cuGraphLaunch, (uint64_t, uint64_t))                                                             \
	X(cuGraphExecDestroy, (uint64_t))                                                                  \
	X(cuGraphDestroy, (uint64_t))

#ifdef LINKED
#define DECLARE(name, args) CUresult name args;
DRIVER(DECLARE)
#define CALL(name) name
#else
#define DECLARE(name, args) static CUresult(*p_##name) args;
DRIVER(DECLARE)
#define CALL(name) p_##name
typedef CUresult (*gpa_t)(const char *, void **, int, uint64_t, int *);
#endif

static void die(const char *what, long v)
{
	fprintf(stderr, "cuda_app: %s (%ld)\n", what, v);
	exit(1);
}

static void check(CUresult rc, const char *what)
{
	if (rc)
		die(what, rc);
}

/* Prints which loaded object defines `p` (its file name without directories). */
static void print_ep(const char *name, void *p)
{
	Dl_info info;
	const char *obj = "?";
	if (p && dladdr(p, &info) && info.dli_fname) {
		obj = strrchr(info.dli_fname, '/');
		obj = obj ? obj + 1 : info.dli_fname;
	}
	printf("ep %s %s\n", name, obj);
}

#ifndef LINKED
/* The CUDA runtime's way: base names, a CUDA version, default flags. */
static void *get(gpa_t gpa, const char *name)
{
	void *p = NULL;
	int status = -1;
	CUresult rc = gpa(name, &p, 12000, 0, &status);
	if (rc || !p)
		die(name, rc);
	print_ep(name, p);
	return p;
}

static void resolve(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h)
		die("dlopen libcuda.so.1", 0);
	gpa_t gpa = (gpa_t)dlsym(h, "cuGetProcAddress_v2");
	if (!gpa)
		die("dlsym cuGetProcAddress_v2", 0);
	print_ep("dlsym:cuGetProcAddress_v2", (void *)gpa);
	/* Asking for cuGetProcAddress itself must give a wrapper too; use it from here on. */
	gpa = (gpa_t)get(gpa, "cuGetProcAddress");
	/* Private tables: must come back untouched (the double answers NOT_FOUND). */
	void *export_table = NULL;
	int status = 0;
	CUresult rc = gpa("cuGetExportTable", &export_table, 12000, 0, &status);
	print_ep("cuGetExportTable", rc ? NULL : export_table);
	print_ep("dlsym:cuGetExportTable", dlsym(h, "cuGetExportTable"));
	print_ep("dlsym:cuMemAlloc_v2", dlsym(h, "cuMemAlloc_v2"));
#define GET(name, args)                                                               \
	{                                                                             \
		const char *base = #name;                                             \
		char buf[64];                                                         \
		snprintf(buf, sizeof(buf), "%s", base);                               \
		char *v = strstr(buf, "_v2");                                         \
		if (v)                                                                \
			*v = 0;                                                       \
		p_##name = (CUresult(*) args)get(gpa, buf);                           \
	}
	DRIVER(GET)
}
#endif

int main(void)
{
#ifndef LINKED
	resolve();
#else
	print_ep("cuMemAlloc_v2", (void *)cuMemAlloc_v2);
	print_ep("cuLaunchKernel", (void *)cuLaunchKernel);
#endif
	int dev = -1;
	uint64_t ctx = 0, stream = 0, module = 0, f_gemm = 0, f_coop = 0, dptr = 0, alias = 0;
	check(CALL(cuInit)(0), "cuInit");
	check(CALL(cuDeviceGet)(&dev, 0), "cuDeviceGet");
	check(CALL(cuDevicePrimaryCtxRetain)(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(CALL(cuCtxSetCurrent)(ctx), "cuCtxSetCurrent");
	check(CALL(cuStreamCreateWithPriority)(&stream, 1, 0), "cuStreamCreateWithPriority");

	check(CALL(cuMemAlloc_v2)(&dptr, 1 << 20), "cuMemAlloc");
	printf("alloc 0x%llx %d\n", (unsigned long long)dptr, 1 << 20);
	void *pinned = NULL;
	check(CALL(cuMemHostAlloc)(&pinned, 8192, 0x2), "cuMemHostAlloc");
	printf("hostalloc 0x%llx %d\n", (unsigned long long)(uintptr_t)pinned, 8192);
	void *page = aligned_alloc(4096, 4096);
	check(CALL(cuMemHostRegister_v2)(page, 4096, 0x1 | 0x2 | 0x4), "cuMemHostRegister");
	printf("register 0x%llx %d %d\n", (unsigned long long)(uintptr_t)page, 4096, 0x7);
	check(CALL(cuMemHostGetDevicePointer_v2)(&alias, page, 0), "cuMemHostGetDevicePointer");
	printf("devptr 0x%llx 0x%llx\n", (unsigned long long)(uintptr_t)page, (unsigned long long)alias);

	check(CALL(cuModuleLoadData)(&module, "// PTX stand-in"), "cuModuleLoadData");
	check(CALL(cuModuleGetFunction)(&f_gemm, module, "gemm_kernel"), "cuModuleGetFunction");
	check(CALL(cuModuleGetFunction)(&f_coop, module, "coop_reduce"), "cuModuleGetFunction");
	printf("function 0x%llx gemm_kernel\n", (unsigned long long)f_gemm);
	printf("function 0x%llx coop_reduce\n", (unsigned long long)f_coop);

	uint64_t arg = dptr;
	void *params[] = { &arg };
	for (int k = 0; k < 2; k++) {
		check(CALL(cuLaunchKernel)(f_gemm, 4, 2, 1, 128, 1, 1, 256, stream, params, NULL), "cuLaunchKernel");
		printf("launch 1 0x%llx 4 2 1 128 1 1 256 0x%llx\n", (unsigned long long)f_gemm,
		       (unsigned long long)stream);
	}
	CUlaunchConfig cfg = { { 8, 1, 1 }, { 64, 2, 1 }, 0, stream, NULL, 0 };
	check(CALL(cuLaunchKernelEx)(&cfg, f_gemm, params, NULL), "cuLaunchKernelEx");
	printf("launch 2 0x%llx 8 1 1 64 2 1 0 0x%llx\n", (unsigned long long)f_gemm, (unsigned long long)stream);
	check(CALL(cuLaunchCooperativeKernel)(f_coop, 16, 1, 1, 256, 1, 1, 1024, stream, params),
	      "cuLaunchCooperativeKernel");
	printf("launch 3 0x%llx 16 1 1 256 1 1 1024 0x%llx\n", (unsigned long long)f_coop,
	       (unsigned long long)stream);
	/* A CUDA graph, launched twice: timed as one span per launch, named by its handle. */
	uint64_t graph = 0, exec = 0;
	check(CALL(cuGraphCreate)(&graph, 0), "cuGraphCreate");
	check(CALL(cuGraphInstantiateWithFlags)(&exec, graph, 0), "cuGraphInstantiateWithFlags");
	for (int k = 0; k < 2; k++) {
		check(CALL(cuGraphLaunch)(exec, stream), "cuGraphLaunch");
		printf("launch 4 0x%llx 0 0 0 0 0 0 0 0x%llx\n", (unsigned long long)exec,
		       (unsigned long long)stream);
	}
	check(CALL(cuStreamSynchronize)(stream), "cuStreamSynchronize");
	check(CALL(cuGraphExecDestroy)(exec), "cuGraphExecDestroy");
	check(CALL(cuGraphDestroy)(graph), "cuGraphDestroy");

	check(CALL(cuMemHostUnregister)(page), "cuMemHostUnregister");
	check(CALL(cuMemFree_v2)(dptr), "cuMemFree");
	check(CALL(cuMemFreeHost)(pinned), "cuMemFreeHost");
	free(page);
	printf("done\n");
	return 0;
}
