// Kernels for turn_app (turn_app.c beside this file): an actor whose GPU
// memory holds a known pattern and a counter, so a cuda-checkpoint / restore
// round trip can be seen to keep both. Built on the GPU machine, loaded by
// turn_app as PTX through the driver API:
//
//     nvcc -ptx -arch=compute_90 -o turn_kernels.ptx turn_kernels.cu
//
// tests/support/libcuda_stand_in.c runs C copies of these kernels on the CPU.

// Must match turn_pattern in tests/support/libcuda_stand_in.c bit for bit
// (tests/test_gpu_turn_app.py compares the two formulas' text).
__device__ __forceinline__ unsigned int turn_pattern(unsigned long long i, unsigned int seed)
{
    return (unsigned int)((i ^ (i >> 32)) * 2654435761ull) ^ seed;
}

extern "C" __global__ void turn_fill(unsigned int *buf, unsigned long long n, unsigned int seed)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        buf[i] = turn_pattern(i, seed);
}

extern "C" __global__ void turn_check(const unsigned int *buf, unsigned long long n,
                                      unsigned int seed, unsigned long long *bad)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long mine = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += stride)
        mine += buf[i] != turn_pattern(i, seed);
    // One atomic per thread that found something, not one per bad word.
    if (mine)
        atomicAdd(bad, mine);
}

extern "C" __global__ void turn_tick(unsigned long long *counter)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        counter[0] += 1;
}
