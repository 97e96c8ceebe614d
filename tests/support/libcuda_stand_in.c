/*
 * A CPU stand-in for NVIDIA's libcuda.so.1, for tests only: the machines the
 * tests run on have no GPU, yet scripts/gpu_real_turn/turn_app.c (the actor
 * that runs on a real H200) should run, fail and be checked here unchanged.
 *
 *     gcc -O2 -Wall -Wextra -Werror -shared -fPIC -Wl,-soname,libcuda.so.1 \
 *         -o libcuda.so.<VERSION> libcuda_stand_in.c
 *
 * It exports exactly the driver-API symbols turn_app resolves, with the
 * signatures of CUDA 13's cuda.h. "Device memory" is host memory (a
 * CUdeviceptr is the host pointer). A module is any image whose text names
 * turn_fill, turn_check and turn_tick; a launch runs the C copy of the kernel
 * on the kernelParams, to completion, so synchronizing has nothing to wait for.
 *
 * Test hook: LIBCUDA_STAND_IN_CORRUPT=<word index> flips that word of the
 * buffer after the first turn_fill, so a test can see turn_check count it.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef int CUjit_option;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
};

enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

/* Must match turn_pattern in scripts/gpu_real_turn/turn_kernels.cu bit for bit
 * (tests/test_gpu_turn_app.py compares the two formulas' text). */
static inline unsigned int turn_pattern(unsigned long long i, unsigned int seed)
{
    return (unsigned int)((i ^ (i >> 32)) * 2654435761ull) ^ seed;
}

static void *ptr(CUdeviceptr p)
{
    return (void *)(uintptr_t)p;
}

/* Kernel parameters arrive as CUDA passes them: a pointer to each argument. */
#define ARG(params, i, type) (*(type *)(params)[i])

static void turn_fill(void **params)
{
    unsigned int *buf = ptr(ARG(params, 0, CUdeviceptr));
    unsigned long long n = ARG(params, 1, unsigned long long);
    unsigned int seed = ARG(params, 2, unsigned int);
    for (unsigned long long i = 0; i < n; i++)
        buf[i] = turn_pattern(i, seed);

    static int corrupted;
    const char *word = getenv("LIBCUDA_STAND_IN_CORRUPT");
    if (word != NULL && !corrupted) {
        corrupted = 1;
        unsigned long long at = strtoull(word, NULL, 10);
        if (at < n)
            buf[at] = ~buf[at];
        else
            fprintf(stderr, "libcuda stand-in: LIBCUDA_STAND_IN_CORRUPT=%s is past the buffer\n",
                    word);
    }
}

static void turn_check(void **params)
{
    const unsigned int *buf = ptr(ARG(params, 0, CUdeviceptr));
    unsigned long long n = ARG(params, 1, unsigned long long);
    unsigned int seed = ARG(params, 2, unsigned int);
    unsigned long long *bad = ptr(ARG(params, 3, CUdeviceptr));
    for (unsigned long long i = 0; i < n; i++)
        *bad += buf[i] != turn_pattern(i, seed);
}

static void turn_tick(void **params)
{
    unsigned long long *counter = ptr(ARG(params, 0, CUdeviceptr));
    counter[0] += 1;
}

/* A CUfunction is a pointer to one of these; a CUmodule, to `module`. */
static const struct kernel {
    const char *name;
    void (*run)(void **params);
} kernels[] = {{"turn_fill", turn_fill}, {"turn_check", turn_check}, {"turn_tick", turn_tick}};
#define N_KERNELS (sizeof kernels / sizeof kernels[0])

static int initialized;
static int module;
static int primary_context;
static CUcontext current;

#define NEED_INIT                                                                                  \
    if (!initialized)                                                                              \
    return CUDA_ERROR_NOT_INITIALIZED
#define NEED_CONTEXT                                                                               \
    NEED_INIT;                                                                                     \
    if (current == NULL)                                                                           \
    return CUDA_ERROR_INVALID_CONTEXT

CUresult cuInit(unsigned flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    initialized = 1;
    return CUDA_SUCCESS;
}

/* Like the real one, answers before cuInit. */
CUresult cuDriverGetVersion(int *version)
{
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    NEED_INIT;
    if (dev == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    NEED_INIT;
    if (name == NULL || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", "libcuda stand-in (CPU)");
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    NEED_INIT;
    if (ctx == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (CUcontext)&primary_context;
    return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    NEED_INIT;
    if (ctx != NULL && ctx != (CUcontext)&primary_context)
        return CUDA_ERROR_INVALID_CONTEXT;
    current = ctx;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadDataEx(CUmodule *mod, const void *image, unsigned num_options,
                                   CUjit_option *options, void **option_values)
{
    NEED_CONTEXT;
    if (mod == NULL || image == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (num_options > 0 && (options == NULL || option_values == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    const char *missing = NULL;
    for (size_t k = 0; k < N_KERNELS && missing == NULL; k++)
        if (strstr(image, kernels[k].name) == NULL)
            missing = kernels[k].name;
    if (missing == NULL) {
        *mod = (CUmodule)&module;
        return CUDA_SUCCESS;
    }
    /* As the driver does: the size option comes in as the buffer's size and
     * goes out as the bytes written. */
    char *log = NULL;
    int size_at = -1;
    for (unsigned k = 0; k < num_options; k++) {
        if (options[k] == CU_JIT_ERROR_LOG_BUFFER)
            log = option_values[k];
        else if (options[k] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
            size_at = (int)k;
    }
    if (log != NULL && size_at >= 0) {
        size_t size = (size_t)(uintptr_t)option_values[size_at];
        if (size > 0) {
            int len = snprintf(log, size, "libcuda stand-in: the image has no kernel %s", missing);
            size_t written = (size_t)len < size ? (size_t)len + 1 : size;
            option_values[size_at] = (void *)(uintptr_t)written;
        }
    }
    return CUDA_ERROR_INVALID_PTX;
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule mod, const char *name)
{
    NEED_CONTEXT;
    if (fn == NULL || name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (mod != (CUmodule)&module)
        return CUDA_ERROR_INVALID_HANDLE;
    for (size_t k = 0; k < N_KERNELS; k++)
        if (strcmp(name, kernels[k].name) == 0) {
            *fn = (CUfunction)&kernels[k];
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
    NEED_CONTEXT;
    if (dptr == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = malloc(bytes);
    if (p == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    NEED_CONTEXT;
    free(ptr(dptr));
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
    NEED_CONTEXT;
    if (dst == NULL || src == 0)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(dst, ptr(src), bytes);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count)
{
    NEED_CONTEXT;
    if (dst == 0)
        return CUDA_ERROR_INVALID_VALUE;
    memset(ptr(dst), value, count);
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shared_mem, void *stream,
                               void **params, void **extra)
{
    (void)shared_mem;
    (void)stream;
    (void)extra;
    NEED_CONTEXT;
    if (!gx || !gy || !gz || !bx || !by || !bz || (unsigned long long)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < N_KERNELS; k++)
        if (fn == (CUfunction)&kernels[k]) {
            if (params == NULL)
                return CUDA_ERROR_INVALID_VALUE;
            kernels[k].run(params);
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuCtxSynchronize(void)
{
    NEED_CONTEXT;
    return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult rc, const char **name)
{
    static const struct {
        CUresult rc;
        const char *name;
    } names[] = {
        {CUDA_SUCCESS, "CUDA_SUCCESS"},
        {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
        {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"},
        {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
        {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
        {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"},
        {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX"},
        {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
        {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND"},
    };
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (names[k].rc == rc) {
            *name = names[k].name;
            return CUDA_SUCCESS;
        }
    *name = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
