/*
 * turn_app: a GPU actor for checkpoint / restore runs (cuda-checkpoint inside
 * a gVisor sandbox). It fills MIB MiB of device memory with a known pattern,
 * then every PERIOD_MS bumps a counter that lives only in device memory and
 * re-checks the whole buffer. After a restore the ticks must carry on from
 * the saved count (not restart at 1) and bad must stay 0.
 *
 *     gcc -O2 -Wall -Wextra -Werror -o turn_app turn_app.c -ldl
 *     turn_app PTX_FILE MIB [PERIOD_MS]
 *
 * PTX_FILE is turn_kernels.cu compiled with nvcc -ptx (see that file).
 *
 * No CUDA header is needed: the program declares the few driver-API types
 * it uses and dlopens libcuda.so.1, so it builds anywhere and, in tests, runs
 * against tests/support/libcuda_stand_in.c.
 *
 * Output, one flushed line each, on stdout:
 *     turn_app: start pid=<pid> mib=<MIB> device="<name>" driver=<version>
 *     turn_app: filled bytes=<bytes> seconds=<s.sss>
 *     tick=<counter> bad=<mismatched words> t=<CLOCK_REALTIME s.sss>   (forever)
 * On failure, on stdout and stderr, then exit 2:
 *     turn_app: jit log: <driver's JIT log>     (first, if the module load wrote one)
 *     turn_app: error <call>: <code> <CUDA error name or ?>
 *     turn_app: error dlopen: <dlerror()>       (also: error dlsym <symbol>: ...)
 *     turn_app: error reading PTX_FILE: <strerror>
 * Bad usage: one line on stderr, exit 64. SIGTERM: exit 0.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef unsigned long long CUdeviceptr;
typedef int CUjit_option;

enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };

/*
 * Field names are the exported symbols. cuda.h #defines cuMemAlloc and
 * friends to their _v2 symbols; the un-versioned exports keep the old 32-bit
 * signatures, so those must never be looked up by the plain name.
 */
static struct {
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDriverGetVersion)(int *version);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuCtxSetCurrent)(CUcontext ctx);
    CUresult (*cuModuleLoadDataEx)(CUmodule *mod, const void *image, unsigned num_options,
                                   CUjit_option *options, void **option_values);
    CUresult (*cuModuleGetFunction)(CUfunction *fn, CUmodule mod, const char *name);
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*cuMemFree_v2)(CUdeviceptr ptr); /* resolved, unused: the actor runs until killed */
    CUresult (*cuMemcpyDtoH_v2)(void *dst, CUdeviceptr src, size_t bytes);
    CUresult (*cuMemsetD8_v2)(CUdeviceptr dst, unsigned char value, size_t count);
    CUresult (*cuLaunchKernel)(CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, unsigned shared_mem,
                               void *stream, void **params, void **extra);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuGetErrorName)(CUresult rc, const char **name);
} cu;

#define SEED 0x5eed1234u
#define THREADS 256u
/* Enough blocks to fill an H200 (132 SMs) many times over; the kernels loop. */
#define MAX_BLOCKS (132u * 32u)
#define MAX_MIB (1u << 20)
#define MAX_PERIOD_MS 3600000u

/* Both streams: stdout is the actor's log, stderr what a supervisor sees. */
static void say(const char *what, const char *detail) {
    printf("turn_app: %s: %s\n", what, detail);
    fflush(stdout);
    fprintf(stderr, "turn_app: %s: %s\n", what, detail);
}

static void fail(const char *what, const char *detail) {
    say(what, detail);
    exit(2);
}

static void check(const char *call, CUresult rc) {
    if (rc == 0)
        return;
    const char *name = NULL;
    if (cu.cuGetErrorName == NULL || cu.cuGetErrorName(rc, &name) != 0 || name == NULL)
        name = "?";
    char what[64], detail[96];
    snprintf(what, sizeof what, "error %s", call);
    snprintf(detail, sizeof detail, "%d %s", rc, name);
    fail(what, detail);
}

#define CU(call, ...) check(#call, cu.call(__VA_ARGS__))

static void usage(void) {
    fprintf(stderr, "usage: turn_app PTX_FILE MIB(1..%u) [PERIOD_MS(1..%u), default 100]\n",
            MAX_MIB, MAX_PERIOD_MS);
    exit(64);
}

static unsigned parse(const char *s, unsigned max) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < 1 || v > max)
        usage();
    return (unsigned)v;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail("error reading PTX_FILE", strerror(errno));
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap);
    while (buf != NULL && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap)
            buf = realloc(buf, cap *= 2);
    }
    if (buf == NULL || ferror(f))
        fail("error reading PTX_FILE", "read failed");
    fclose(f);
    buf[len] = '\0'; /* cuModuleLoadDataEx takes PTX as a C string */
    return buf;
}

static void load_driver(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL)
        fail("error dlopen", dlerror());
#define SYM(name)                                                                                  \
    if ((cu.name = dlsym(lib, #name)) == NULL)                                                     \
        fail("error dlsym " #name, dlerror());
    SYM(cuGetErrorName) /* first, so later failures are named */
    SYM(cuInit)
    SYM(cuDriverGetVersion)
    SYM(cuDeviceGet)
    SYM(cuDeviceGetName)
    SYM(cuDevicePrimaryCtxRetain)
    SYM(cuCtxSetCurrent)
    SYM(cuModuleLoadDataEx)
    SYM(cuModuleGetFunction)
    SYM(cuMemAlloc_v2)
    SYM(cuMemFree_v2)
    SYM(cuMemcpyDtoH_v2)
    SYM(cuMemsetD8_v2)
    SYM(cuLaunchKernel)
    SYM(cuCtxSynchronize)
#undef SYM
}

static CUmodule load_module(const char *ptx) {
    char log[8192] = "";
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {log, (void *)(uintptr_t)sizeof log};
    CUmodule mod;
    CUresult rc = cu.cuModuleLoadDataEx(&mod, ptx, 2, opts, vals);
    log[sizeof log - 1] = '\0';
    if (rc != 0 && log[0] != '\0')
        say("jit log", log);
    check("cuModuleLoadDataEx", rc);
    return mod;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static void on_sigterm(int sig) {
    (void)sig;
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4)
        usage();
    unsigned mib = parse(argv[2], MAX_MIB);
    unsigned period_ms = argc == 4 ? parse(argv[3], MAX_PERIOD_MS) : 100;
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGTERM, on_sigterm);

    char *ptx = read_file(argv[1]);
    load_driver();

    int version = 0;
    CUdevice dev;
    CUcontext ctx;
    char name[256] = "";
    CU(cuInit, 0);
    CU(cuDriverGetVersion, &version);
    CU(cuDeviceGet, &dev, 0);
    CU(cuDeviceGetName, name, (int)sizeof name, dev);
    /* The primary context: cuCtxCreate's versioned symbol changed in CUDA 13. */
    CU(cuDevicePrimaryCtxRetain, &ctx, dev);
    CU(cuCtxSetCurrent, ctx);

    CUmodule mod = load_module(ptx);
    free(ptx);
    CUfunction fill, chk, tick;
    CU(cuModuleGetFunction, &fill, mod, "turn_fill");
    CU(cuModuleGetFunction, &chk, mod, "turn_check");
    CU(cuModuleGetFunction, &tick, mod, "turn_tick");

    unsigned long long n = (unsigned long long)mib * 262144u, bytes = n * sizeof(unsigned);
    unsigned seed = SEED;
    CUdeviceptr buf, counter, bad;
    CU(cuMemAlloc_v2, &buf, bytes);
    CU(cuMemAlloc_v2, &counter, sizeof(unsigned long long));
    CU(cuMemAlloc_v2, &bad, sizeof(unsigned long long));
    CU(cuMemsetD8_v2, counter, 0, sizeof(unsigned long long));
    CU(cuMemsetD8_v2, bad, 0, sizeof(unsigned long long));
    unsigned long long want = (n + THREADS - 1) / THREADS;
    unsigned blocks = want < MAX_BLOCKS ? (unsigned)want : MAX_BLOCKS;

    printf("turn_app: start pid=%ld mib=%u device=\"%s\" driver=%d\n", (long)getpid(), mib, name,
           version);
    fflush(stdout);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    void *fill_args[] = {&buf, &n, &seed};
    CU(cuLaunchKernel, fill, blocks, 1, 1, THREADS, 1, 1, 0, NULL, fill_args, NULL);
    CU(cuCtxSynchronize);
    printf("turn_app: filled bytes=%llu seconds=%.3f\n", bytes, seconds_since(&t0));
    fflush(stdout);

    void *tick_args[] = {&counter};
    void *check_args[] = {&buf, &n, &seed, &bad};
    const struct timespec period = {period_ms / 1000, (long)(period_ms % 1000) * 1000000L};
    for (;;) {
        unsigned long long count, nbad;
        CU(cuLaunchKernel, tick, 1, 1, 1, 1, 1, 1, 0, NULL, tick_args, NULL);
        CU(cuMemsetD8_v2, bad, 0, sizeof nbad);
        CU(cuLaunchKernel, chk, blocks, 1, 1, THREADS, 1, 1, 0, NULL, check_args, NULL);
        CU(cuCtxSynchronize);
        CU(cuMemcpyDtoH_v2, &count, counter, sizeof count);
        CU(cuMemcpyDtoH_v2, &nbad, bad, sizeof nbad);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        printf("tick=%llu bad=%llu t=%lld.%03ld\n", count, nbad, (long long)now.tv_sec,
               now.tv_nsec / 1000000L);
        fflush(stdout);
        struct timespec left = period;
        while (nanosleep(&left, &left) != 0 && errno == EINTR)
            ;
    }
}
