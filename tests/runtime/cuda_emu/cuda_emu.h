/* cuda_emu.h: a test-only host emulation of the CUDA execution model, so
 * the kernels of runtime/kernels (*.cu) run (and are compared with the CPU
 * backend) on machines without a GPU.
 *
 * The kernel sources are compiled by g++ as C++ with -DTP_CUDA_EMULATION
 * and -I tests/runtime/cuda_emu; runtime/kernels/launch.h then includes this
 * header instead of the CUDA headers. What it emulates:
 *
 *   - TP_LAUNCH runs the blocks of the grid one at a time, started in a
 *     random order. Within a block every CUDA thread is a host fiber with
 *     its own stack; a fiber runs until it reaches a scheduling point
 *     (__syncthreads, a warp collective, an atomic, a turn's wait or
 *     raise) and the next fiber to run is drawn at random, by a policy
 *     drawn for each phase between barriers: uniform (threads keep pace, so a read of data another
 *     thread has not written yet sees poison) or by priority (one warp
 *     runs ahead to the next barrier, so a fast warp overwriting shared
 *     data a slow one has not read yet is seen). Lanes of one warp do NOT
 *     run in lockstep.
 *   - __syncthreads() is a barrier over the block. Threads waiting there
 *     while others have exited is reported ("__syncthreads not reached by
 *     all threads") and fails the launch, as is any other deadlock.
 *   - blocks taking turns (runtime/kernels/block_turns.cuh): a thread
 *     waiting for a count is suspended, and its block once nothing else in
 *     it can run; other blocks start, or a suspended one whose count has
 *     been reached resumes, drawn at random. The launch fails when the
 *     blocks left all wait and none can go on ("deadlock across blocks"),
 *     or when a wait was met by a raise of a block of higher linear index,
 *     which a GPU dispatches after the waiter (with more blocks than it
 *     holds at once, that wait could deadlock).
 *   - the sm_80 instructions of kernels/mma_sm80.cuh (mma.sync, ldmatrix,
 *     cp.async) with the PTX ISA's fragment layouts: the warp-wide ones are
 *     collectives of the whole warp (cuda_emu_mma.h).
 *   - warp shuffles, votes and __syncwarp are collectives over the lanes of
 *     `mask`: every lane in mask must call the same intrinsic with the same
 *     mask, the caller must be in mask, and reading a lane outside mask
 *     returns poison (NaN bits).
 *   - TP_SHARED / TP_DYNAMIC_SHARED live in a per-block arena that every
 *     thread of the block sees at the same address; all of it a block may
 *     use is filled with 0xFF bytes (NaN as float or bf16) before each
 *     block. Its limits are sm_80's: static declarations 48 KiB, and static
 *     + dynamic 48 KiB unless the kernel opted in to `bytes` of dynamic with
 *     cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
 *     bytes): static + bytes at most 166912 (sm_80's opt-in limit). Dynamic
 *     shared memory past the kernel's limit is an invalid configuration; a
 *     static declaration past it fails the launch.
 *   - tp_emu_alloc gives "device" memory filled with 0xFF bytes, between
 *     guard bytes that tp_emu_free checks.
 *   - launch configuration is validated like CUDA does (no empty grids,
 *     at most 1024 threads, grid.y/z <= 65535): cudaErrorInvalidConfiguration.
 *
 * The schedule is seeded: TP_EMU_SEED in the environment (an integer), else
 * a fixed default, or tp_emu_set_seed(). The same seed and the same
 * sequence of launches replay the same interleavings.
 *
 * Not emulated: lockstep timing; memory consistency across blocks, beyond
 * the turns: every write is seen by whatever runs after it, and blocks run
 * in stretches (a whole block, or up to a wait for a count), so only the
 * order block_turns.cuh's counts impose is modelled, and a block reading
 * another's writes without waiting for them finds them there or not by
 * the random block order, never a stale copy; the accuracy of fast-math
 * intrinsics (__expf is expf here), texture/surface memory, cooperative
 * groups. */
#ifndef TP_CUDA_EMU_H
#define TP_CUDA_EMU_H

#ifndef __cplusplus
#error "cuda_emu.h: compile kernels as C++ (g++ -x c++ -DTP_CUDA_EMULATION)"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>

/* ---- qualifiers ------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__

/* ---- built-in types and indices --------------------------------------- */

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
typedef dim3 uint3;

struct __align__(16) uint4 {
    unsigned x, y, z, w;
};

struct __align__(8) float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
struct __align__(16) float4 {
    float x, y, z, w;
};

constexpr int warpSize = 32;

/* Out-of-line accessors of the running thread's indices: kernel code never
 * touches the emulator's thread-locals itself (GCC 12 with -fsanitize=null
 * miscompiles some repeated thread-local accesses). */
namespace tp_emu {
const dim3 &thread_idx();
const dim3 &block_idx();
const dim3 &block_dim();
const dim3 &grid_dim();
} // namespace tp_emu

#define threadIdx (::tp_emu::thread_idx())
#define blockIdx (::tp_emu::block_idx())
#define blockDim (::tp_emu::block_dim())
#define gridDim (::tp_emu::grid_dim())

/* ---- runtime API (the minimum the launchers and tests use) ------------- */

typedef struct CUstream_st *cudaStream_t;
typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorLaunchFailure = 719,
} cudaError_t;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t err);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
/* The dynamic shared memory a launch of `func` may ask for (value bytes,
 * 0 to 166912, sm_80's limit with opt-in), as the runtime's: above 48 KiB
 * only after this. cudaErrorInvalidValue for another attribute or value. */
cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value);
template <typename T> cudaError_t cudaFuncSetAttribute(T *func, cudaFuncAttribute attr, int value)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(func), attr, value);
}

/* TP_CUDA_CHECK: the runtime's own, so a failed launch is reported as with CUDA */
#include "cuda_check.h"

/* ---- synchronisation and warp collectives ------------------------------ */

namespace tp_emu {
enum CollectiveOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ALL, ANY, SYNCWARP, WARP_CALL };
/* call: WARP_CALL's function over every lane's value (warp_call) */
uint64_t collective(CollectiveOp op, const char *name, unsigned mask, uint64_t value, int param, int width,
                    void (*call)(void *const lanes[32]) = nullptr);
void yield_point(void); /* lets another thread run (atomics) */
/* block_turns.cuh's primitives, for the calling thread (thread 0 of the
 * block, the block's barriers around it): wait_count_at_least returns once
 * *count >= at_least, suspending the thread (and its block, once nothing
 * else in it can run) until then; raise_count adds `by` to *count and is a
 * scheduling point, as an atomic, after which the block may be preempted
 * (other blocks run before its other threads go on). A wait that another
 * block's raise made true fails the launch when that block's linear index
 * is higher, and so does one that finds the count past at_least (a turn
 * taken twice, or one skipped). */
void wait_count_at_least(const int *count, int at_least);
void raise_count(int *count, int by);
void *shared_static(const void *site, size_t bytes, size_t align);
void *shared_dynamic(void);
[[noreturn]] void fail_in_kernel(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

template <typename T> uint64_t to_raw(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffled values are at most 8 bytes");
    uint64_t r = 0;
    std::memcpy(&r, &v, sizeof v);
    return r;
}
template <typename T> T from_raw(uint64_t r)
{
    T v;
    std::memcpy(&v, &r, sizeof v);
    return v;
}
} // namespace tp_emu

void __syncthreads(void);
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    tp_emu::collective(tp_emu::SYNCWARP, "__syncwarp", mask, 0, 0, 32);
}
inline void __threadfence(void) {}
inline void __threadfence_block(void) {}
unsigned __activemask(void);

template <typename T> T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize)
{
    return tp_emu::from_raw<T>(
        tp_emu::collective(tp_emu::SHFL_IDX, "__shfl_sync", mask, tp_emu::to_raw(var), src_lane, width));
}
template <typename T> T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
    return tp_emu::from_raw<T>(
        tp_emu::collective(tp_emu::SHFL_UP, "__shfl_up_sync", mask, tp_emu::to_raw(var), (int)delta, width));
}
template <typename T> T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize)
{
    return tp_emu::from_raw<T>(
        tp_emu::collective(tp_emu::SHFL_DOWN, "__shfl_down_sync", mask, tp_emu::to_raw(var), (int)delta, width));
}
template <typename T> T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize)
{
    return tp_emu::from_raw<T>(
        tp_emu::collective(tp_emu::SHFL_XOR, "__shfl_xor_sync", mask, tp_emu::to_raw(var), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    return (unsigned)tp_emu::collective(tp_emu::BALLOT, "__ballot_sync", mask, pred != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int pred)
{
    return (int)tp_emu::collective(tp_emu::ALL, "__all_sync", mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred)
{
    return (int)tp_emu::collective(tp_emu::ANY, "__any_sync", mask, pred != 0, 0, 32);
}

/* ---- atomics: each is a scheduling point, then a plain read-modify-write
 * (fibers of one host thread cannot interleave inside it) ---------------- */

inline int atomicCAS(int *p, int cmp, int val)
{
    tp_emu::yield_point();
    int old = *p;
    if (old == cmp)
        *p = val;
    return old;
}
inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned val)
{
    tp_emu::yield_point();
    unsigned old = *p;
    if (old == cmp)
        *p = val;
    return old;
}
inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long cmp, unsigned long long val)
{
    tp_emu::yield_point();
    unsigned long long old = *p;
    if (old == cmp)
        *p = val;
    return old;
}

#define TP_EMU_ATOMIC_RMW(name, type, expr)                                                                 \
    inline type name(type *p, type val)                                                                     \
    {                                                                                                       \
        tp_emu::yield_point();                                                                              \
        type old = *p;                                                                                      \
        *p = (expr);                                                                                        \
        return old;                                                                                         \
    }
TP_EMU_ATOMIC_RMW(atomicAdd, int, old + val)
TP_EMU_ATOMIC_RMW(atomicAdd, unsigned, old + val)
TP_EMU_ATOMIC_RMW(atomicAdd, unsigned long long, old + val)
TP_EMU_ATOMIC_RMW(atomicMax, int, old > val ? old : val)
TP_EMU_ATOMIC_RMW(atomicMax, unsigned, old > val ? old : val)
TP_EMU_ATOMIC_RMW(atomicMax, long long, old > val ? old : val)
TP_EMU_ATOMIC_RMW(atomicMax, unsigned long long, old > val ? old : val)
TP_EMU_ATOMIC_RMW(atomicMin, int, old < val ? old : val)
TP_EMU_ATOMIC_RMW(atomicMin, unsigned, old < val ? old : val)
TP_EMU_ATOMIC_RMW(atomicExch, int, val)
TP_EMU_ATOMIC_RMW(atomicExch, unsigned, val)
TP_EMU_ATOMIC_RMW(atomicExch, float, val)
#undef TP_EMU_ATOMIC_RMW

/* ---- bit casts and math ------------------------------------------------ */

inline int __float_as_int(float x) { return tp_emu::from_raw<int>(tp_emu::to_raw(x)); }
inline unsigned __float_as_uint(float x) { return tp_emu::from_raw<unsigned>(tp_emu::to_raw(x)); }
inline float __int_as_float(int x) { return tp_emu::from_raw<float>(tp_emu::to_raw(x)); }
inline float __uint_as_float(unsigned x) { return tp_emu::from_raw<float>(tp_emu::to_raw(x)); }
inline long long __double_as_longlong(double x) { return tp_emu::from_raw<long long>(tp_emu::to_raw(x)); }
inline double __longlong_as_double(long long x) { return tp_emu::from_raw<double>(tp_emu::to_raw(x)); }

/* float atomicAdd as CUDA's documentation writes it for types without a
 * native one: a compare-and-swap loop on the bits. */
inline float atomicAdd(float *p, float val)
{
    unsigned *bits = reinterpret_cast<unsigned *>(p);
    unsigned old = *bits, assumed;
    do {
        assumed = old;
        old = atomicCAS(bits, assumed, __float_as_uint(val + __uint_as_float(assumed)));
    } while (assumed != old);
    return __uint_as_float(old);
}
inline double atomicAdd(double *p, double val)
{
    unsigned long long *bits = reinterpret_cast<unsigned long long *>(p);
    unsigned long long old = *bits, assumed;
    do {
        assumed = old;
        old = atomicCAS(bits, assumed,
                        (unsigned long long)__double_as_longlong(val + __longlong_as_double((long long)assumed)));
    } while (assumed != old);
    return __longlong_as_double((long long)old);
}

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __fdividef(float a, float b) { return a / b; }
/* sin(pi x), cos(pi x), reduced exactly: x mod 2 first, as CUDA's */
inline void sincospi(double x, double *s, double *c)
{
    const double r = std::remainder(x, 2.0); /* exact, in [-1, 1] */
    *s = std::sin(r * 3.141592653589793);
    *c = std::cos(r * 3.141592653589793);
}
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
template <typename T> T __ldg(const T *p) { return *p; }

/* ---- bfloat16 ---------------------------------------------------------- */

/* Storage only, as in cuda_bf16.h's __nv_bfloat16_raw; conversions are the
 * explicit intrinsics. */
struct __nv_bfloat16 {
    unsigned short __x;
};
typedef __nv_bfloat16 nv_bfloat16;

/* round to nearest, ties to even; NaN stays a (quiet) NaN */
inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u = __float_as_uint(f);
    __nv_bfloat16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        r.__x = (unsigned short)((u >> 16) | 0x0040u);
        return r;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    r.__x = (unsigned short)(u >> 16);
    return r;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((uint32_t)h.__x << 16); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }

/* ---- launching --------------------------------------------------------- */

/* Runs `body` as every thread of every block of the grid. Returns (and
 * records for cudaGetLastError) cudaSuccess, cudaErrorInvalidConfiguration
 * for a configuration CUDA would reject (more dynamic shared memory than
 * `kernel` opted in to with cudaFuncSetAttribute, or 48 KiB without), or
 * cudaErrorLaunchFailure when the emulator caught a fault (a deadlock,
 * within a block or across blocks, a wait for a later block, a bad
 * collective, too much shared memory); the reason is printed to stderr and
 * kept for tp_emu_last_failure(). kernel: the kernel function's address,
 * whose cudaFuncSetAttribute applies; null (or the overload without it)
 * for a body of no kernel function, which cannot opt in. */
cudaError_t tp_emu_launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t shmem,
                          const std::function<void()> &body);
inline cudaError_t tp_emu_launch(const char *name, dim3 grid, dim3 block, size_t shmem,
                                 const std::function<void()> &body)
{
    return tp_emu_launch(name, nullptr, grid, block, shmem, body);
}

/* the reason of the last cudaErrorLaunchFailure / invalid configuration, or
 * of a refused cudaFuncSetAttribute */
const char *tp_emu_last_failure(void);
/* reseed the scheduler (block order and thread interleaving) */
void tp_emu_set_seed(uint64_t seed);
/* context switches since the start (the emulator's cost) */
uint64_t tp_emu_switches(void);
/* Valid launches so far in this process of the kernels whose name (the
 * kernel argument of TP_LAUNCH, as written) contains `part`: which kernel
 * a launcher chose. With TP_EMU_LAUNCH_LOG set to a path, each kernel's
 * name is also appended to that file the first time it is launched, for
 * tests that run an emulated program. */
size_t tp_emu_launches_of(const char *part);

/* "device" memory: filled with 0xFF bytes (NaN for floats and bf16, -1 for
 * int32), with guard bytes on both sides. tp_emu_free returns false (and
 * says so on stderr) when a guard was overwritten. NULL is accepted. */
void *tp_emu_alloc(size_t bytes);
bool tp_emu_free(void *p);

namespace tp_emu {
/* TP_LAUNCH's kernel: a function's address, as cudaFuncSetAttribute's
 * template takes it; null for another callable (a test's lambda) */
template <typename F> const void *kernel_address(F &&f)
{
    using P = std::decay_t<F>;
    if constexpr (std::is_pointer<P>::value && std::is_function<std::remove_pointer_t<P>>::value)
        return reinterpret_cast<const void *>(static_cast<P>(f));
    (void)f;
    return nullptr;
}
} // namespace tp_emu

/* The arguments are evaluated once, by the launcher, as for <<<>>>. */
#define TP_LAUNCH(kernel, grid, block, shmem, stream, ...)                                               \
    do {                                                                                                 \
        (void)(stream);                                                                                  \
        auto tp_emu_args_ = std::make_tuple(__VA_ARGS__);                                                \
        tp_emu_launch(#kernel, ::tp_emu::kernel_address(kernel), dim3(grid), dim3(block),               \
                      (size_t)(shmem), [&tp_emu_args_]() { std::apply(kernel, tp_emu_args_); });         \
        TP_CUDA_CHECK(cudaGetLastError());                                                               \
    } while (0)

/* One arena per block: the first thread to reach a declaration places it,
 * the others get the same address (keyed by the declaration's site). */
#define TP_SHARED(type, name, count)                                                                     \
    static const char tp_emu_site_##name = 0;                                                            \
    type(&name)[count] = *reinterpret_cast<type(*)[count]>(                                             \
        ::tp_emu::shared_static(&tp_emu_site_##name, sizeof(type) * (count), alignof(type)))
#define TP_DYNAMIC_SHARED(type, name) type *name = reinterpret_cast<type *>(::tp_emu::shared_dynamic())

namespace tp_emu {
/* A warp collective over all 32 lanes named `name`: each lane passes
 * `args`; when the last arrives, fn (when not null) runs once with every
 * lane's args, before any lane resumes (cuda_emu_mma.h). */
void warp_call(const char *name, void *args, void (*fn)(void *const lanes[32]));
} // namespace tp_emu

#endif /* TP_CUDA_EMU_H */
