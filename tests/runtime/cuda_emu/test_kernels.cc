// The CUDA kernels of runtime/kernels, compiled for the host under the
// emulator (cuda_emu.h), against the CPU backend (runtime/backends/cpu/backend_cpu.c),
// the reference: random inputs, ragged sizes (not multiples of a block or
// a tile, one row, n = 1, the largest head dimension), GQA and MQA, masked
// embeddings, padded vocabularies, both storage types.
//
// bf16: the inputs are rounded to bf16 first and the CPU op runs on those
// rounded values (as floats), so the only difference the storage type may
// add is the kernel rounding its fp32 result to bf16 once, at the store:
// a relative error of at most 2^-8 (half an ulp of an 8-bit significand).
// Kernels that write float (the loss pieces) get no such allowance.
//
// The first group of tests is about the emulator itself: CUDA's shuffle
// and vote semantics, and that it catches the bugs it exists to catch
// (a missing __syncthreads, reads of uninitialised memory, a barrier not
// every thread reaches, invalid launches, writes out of bounds), and blocks
// taking turns (block_turns.cuh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernel_test.h"
#include "attention_flash.cuh"
#include "block_turns.cuh"

// A failed CUDA call in a launcher goes to tp_gpu_fatal (cuda_check.h),
// which tprun's backend defines; this binary has no backend: report the
// same way, without rank or op, and abort.
extern "C" void tp_gpu_fatal(const char *lib, const char *expr, const char *func, const char *file, int line,
                             const char *msg)
{
    fprintf(stderr, "tprun: %s error: %s failed: %s [%s:%d %s]\n", lib, expr, msg, file, line, func);
    abort();
}

namespace {

using namespace tp_ktest;

constexpr unsigned kFullMask = 0xffffffffu;

// ==================================================================================
// The emulator
// ==================================================================================

// ---- warp collectives

struct ShuffleOut {
    int idx, idx_w8, up3, up3_w16, down5_w16, xor1, xor16_w16, outside;
    unsigned ballot, half_ballot;
    int all_even, any_seven, half_all;
    double wide;
};

__global__ void shuffle_kernel(ShuffleOut *out)
{
    const int lane = threadIdx.x % 32;
    const int v = 100 * (int)(threadIdx.x / 32) + lane; // distinct per lane and warp
    ShuffleOut &o = out[threadIdx.x];
    o.idx = __shfl_sync(kFullMask, v, (lane + 3) % 32);
    o.idx_w8 = __shfl_sync(kFullMask, v, lane + 1, 8); // wraps within groups of 8
    o.up3 = __shfl_up_sync(kFullMask, v, 3);
    o.up3_w16 = __shfl_up_sync(kFullMask, v, 3, 16);
    o.down5_w16 = __shfl_down_sync(kFullMask, v, 5, 16);
    o.xor1 = __shfl_xor_sync(kFullMask, v, 1);
    o.xor16_w16 = __shfl_xor_sync(kFullMask, v, 16, 16); // later segment: own value
    o.ballot = __ballot_sync(kFullMask, lane % 3 == 0);
    o.all_even = __all_sync(kFullMask, v % 2 == 0);
    o.any_seven = __any_sync(kFullMask, lane == 7);
    o.wide = __shfl_xor_sync(kFullMask, 1e300 * (lane + 1), 2); // 8-byte values
    // two disjoint half-warp collectives at once
    const unsigned half = lane < 16 ? 0x0000ffffu : 0xffff0000u;
    o.half_ballot = __ballot_sync(half, lane % 2 == 1);
    o.half_all = __all_sync(half, lane < 16);
    // reading a lane outside the mask is undefined: poison
    o.outside = __shfl_sync(half, v, lane < 16 ? 20 : 4);
}

TEST(CudaEmu, ShufflesAndVotesFollowCuda)
{
    const int n = 64;
    ShuffleOut *out = static_cast<ShuffleOut *>(tp_emu_alloc(n * sizeof(ShuffleOut)));
    TP_LAUNCH(shuffle_kernel, 1, n, 0, nullptr, out);
    for (int t = 0; t < n; t++) {
        const int lane = t % 32, base = 100 * (t / 32);
        auto val = [&](int l) { return base + l; };
        const ShuffleOut &o = out[t];
        SCOPED_TRACE("thread " + std::to_string(t));
        EXPECT_EQ(o.idx, val((lane + 3) % 32));
        EXPECT_EQ(o.idx_w8, val((lane & ~7) + ((lane + 1) & 7)));
        EXPECT_EQ(o.up3, lane < 3 ? val(lane) : val(lane - 3));
        EXPECT_EQ(o.up3_w16, lane % 16 < 3 ? val(lane) : val(lane - 3));
        EXPECT_EQ(o.down5_w16, lane % 16 + 5 >= 16 ? val(lane) : val(lane + 5));
        EXPECT_EQ(o.xor1, val(lane ^ 1));
        EXPECT_EQ(o.xor16_w16, lane < 16 ? val(lane) : val(lane - 16));
        EXPECT_EQ(o.ballot, 0x49249249u);
        EXPECT_EQ(o.all_even, 0);
        EXPECT_EQ(o.any_seven, 1);
        EXPECT_EQ(o.wide, 1e300 * ((lane ^ 2) + 1));
        EXPECT_EQ(o.half_ballot, lane < 16 ? 0x0000aaaau : 0xaaaa0000u);
        EXPECT_EQ(o.half_all, lane < 16 ? 1 : 0);
        EXPECT_EQ(o.outside, -1) << "a lane outside the mask must read poison";
    }
    EXPECT_TRUE(tp_emu_free(out));
}

// A full-mask collective with a lane that has exited is undefined on the
// GPU and fails the launch here.
TEST(CudaEmu, CollectiveWithExitedLaneFails)
{
    cudaError_t err = tp_emu_launch("exited_lane", dim3(1), dim3(32), 0, [] {
        if (threadIdx.x == 5)
            return;
        (void)__shfl_xor_sync(kFullMask, 1.0f, 1);
    });
    EXPECT_EQ(err, cudaErrorLaunchFailure);
    EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
    EXPECT_NE(std::string(tp_emu_last_failure()).find("__shfl_xor_sync"), std::string::npos) << tp_emu_last_failure();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the error is cleared once read";
}

TEST(CudaEmu, MismatchedCollectivesFail)
{
    cudaError_t err = tp_emu_launch("divergent", dim3(1), dim3(32), 0, [] {
        if (threadIdx.x < 16)
            (void)__ballot_sync(kFullMask, 1);
        else
            (void)__any_sync(kFullMask, 1);
    });
    EXPECT_EQ(err, cudaErrorLaunchFailure);
    (void)cudaGetLastError();
}

// ---- the bugs the emulator exists to catch

// Reverses 128 values through shared memory. Without the barrier a thread
// may read its mirror's slot before the mirror has written it.
template <bool kBarrier> __global__ void reverse_kernel(float *out, const float *in, int n)
{
    TP_SHARED(float, buf, 128);
    const int i = threadIdx.x;
    buf[i] = in[i];
    if (kBarrier)
        __syncthreads();
    out[i] = buf[n - 1 - i];
}

// The indices whose reversed value came out wrong (NaN: the poison).
std::vector<int> wrong_reversals(bool barrier, uint64_t seed)
{
    const int n = 128;
    Vec in = random_vec(n, 7);
    float *din = static_cast<float *>(tp_emu_alloc(n * sizeof(float)));
    float *dout = static_cast<float *>(tp_emu_alloc(n * sizeof(float)));
    std::memcpy(din, in.data(), n * sizeof(float));
    tp_emu_set_seed(seed);
    if (barrier)
        TP_LAUNCH(reverse_kernel<true>, 1, n, 0, nullptr, dout, din, n);
    else
        TP_LAUNCH(reverse_kernel<false>, 1, n, 0, nullptr, dout, din, n);
    std::vector<int> wrong;
    for (int i = 0; i < n; i++)
        if (!(dout[i] == in[n - 1 - i]))
            wrong.push_back(i);
    EXPECT_TRUE(tp_emu_free(din));
    EXPECT_TRUE(tp_emu_free(dout));
    return wrong;
}

// Of threads i and 127 - i, whichever runs first reads the other's slot
// before it is written: half the outputs are poison, and which half
// depends on the seed.
TEST(CudaEmu, MissingSyncthreadsIsCaught)
{
    std::set<std::vector<int>> patterns;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        const std::vector<int> wrong = wrong_reversals(false, seed);
        EXPECT_EQ(wrong.size(), 64u) << "seed " << seed << ": the race went unnoticed";
        patterns.insert(wrong);
        EXPECT_TRUE(wrong_reversals(true, seed).empty()) << "seed " << seed << ": with the barrier it is correct";
    }
    EXPECT_GT(patterns.size(), 1u) << "different seeds give different interleavings";
    EXPECT_EQ(wrong_reversals(false, 3), wrong_reversals(false, 3)) << "one seed replays one interleaving";
}

// Two rounds of a 4-warp reduction through one shared array. Without the
// barrier after the reads, a warp that runs ahead writes round 2's value
// while a slower warp still reads round 1's (write after read).
template <bool kBarrier> __global__ void two_rounds_kernel(float *out)
{
    TP_SHARED(float, partial, 4);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int round = 1; round <= 2; round++) {
        if (lane == 0)
            partial[warp] = (float)(round * (warp + 1));
        __syncthreads();
        out[(round - 1) * 128 + threadIdx.x] = partial[0] + partial[1] + partial[2] + partial[3];
        if (kBarrier)
            __syncthreads();
    }
}

TEST(CudaEmu, MissingTrailingSyncthreadsIsCaught)
{
    float *out = static_cast<float *>(tp_emu_alloc(256 * sizeof(float)));
    int caught = 0;
    for (uint64_t seed = 1; seed <= 16; seed++) {
        tp_emu_set_seed(seed);
        TP_LAUNCH(two_rounds_kernel<false>, 1, 128, 0, nullptr, out);
        bool wrong = false;
        for (int i = 0; i < 256; i++)
            wrong |= out[i] != (i < 128 ? 10.0f : 20.0f);
        caught += wrong;
        tp_emu_set_seed(seed);
        TP_LAUNCH(two_rounds_kernel<true>, 1, 128, 0, nullptr, out);
        for (int i = 0; i < 256; i++)
            ASSERT_EQ(out[i], i < 128 ? 10.0f : 20.0f) << "seed " << seed << ": with the barrier it is correct";
    }
    EXPECT_GE(caught, 8) << "of 16 seeds, the hazard showed in " << caught;
    EXPECT_TRUE(tp_emu_free(out));
}

__global__ void read_fresh_kernel(float *out, const float *fresh)
{
    TP_SHARED(float, never_written, 64);
    out[threadIdx.x] = never_written[threadIdx.x];
    out[64 + threadIdx.x] = fresh[threadIdx.x];
}

TEST(CudaEmu, FreshMemoryReadsAsNaN)
{
    float *out = static_cast<float *>(tp_emu_alloc(128 * sizeof(float)));
    float *fresh = static_cast<float *>(tp_emu_alloc(64 * sizeof(float)));
    TP_LAUNCH(read_fresh_kernel, 1, 64, 0, nullptr, out, fresh);
    for (int i = 0; i < 128; i++)
        EXPECT_TRUE(std::isnan(out[i])) << (i < 64 ? "shared " : "global ") << i;
    int32_t *ints = static_cast<int32_t *>(tp_emu_alloc(4 * sizeof(int32_t)));
    EXPECT_EQ(ints[0], -1) << "fresh int32 memory reads as -1";
    EXPECT_TRUE(std::isnan(__bfloat162float(*reinterpret_cast<__nv_bfloat16 *>(ints)))) << "and as a bf16 NaN";
    EXPECT_TRUE(tp_emu_free(out));
    EXPECT_TRUE(tp_emu_free(fresh));
    EXPECT_TRUE(tp_emu_free(ints));
}

// Shared memory is one arena per block (same address for every thread),
// poisoned again before the next block.
__global__ void shared_per_block_kernel(float *out)
{
    TP_SHARED(float, slot, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        out[blockIdx.x * 2] = slot[0]; // poison: written by no one yet in this block
        slot[0] = (float)blockIdx.x;
    }
    __syncthreads();
    if (threadIdx.x == 63)
        out[blockIdx.x * 2 + 1] = slot[0];
}

TEST(CudaEmu, SharedMemoryIsPerBlockAndPoisoned)
{
    const int blocks = 5;
    float *out = static_cast<float *>(tp_emu_alloc(2 * blocks * sizeof(float)));
    TP_LAUNCH(shared_per_block_kernel, blocks, 64, 0, nullptr, out);
    for (int b = 0; b < blocks; b++) {
        EXPECT_TRUE(std::isnan(out[2 * b])) << "block " << b;
        EXPECT_EQ(out[2 * b + 1], (float)b) << "block " << b;
    }
    EXPECT_TRUE(tp_emu_free(out));
}

// Dynamic shared memory: one region per block at the same address for
// every thread, static declarations placed after it, both poisoned.
__global__ void dynamic_shared_kernel(float *out, int n)
{
    TP_DYNAMIC_SHARED(float, dyn);
    TP_SHARED(float, after, 32);
    const int i = threadIdx.x;
    out[3 * n + i] = dyn[i]; // poison
    if (i < 32)
        after[i] = -1.0f;
    dyn[i] = (float)(i + 100 * blockIdx.x);
    __syncthreads();
    out[blockIdx.x * n + i] = dyn[n - 1 - i];
    out[2 * n + i] = (float)(reinterpret_cast<char *>(after) - reinterpret_cast<char *>(dyn));
}

TEST(CudaEmu, DynamicSharedMemory)
{
    const int n = 96;
    float *out = static_cast<float *>(tp_emu_alloc(4 * n * sizeof(float)));
    TP_LAUNCH(dynamic_shared_kernel, 2, n, n * sizeof(float), nullptr, out, n);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < n; i++)
            EXPECT_EQ(out[b * n + i], (float)(n - 1 - i + 100 * b)) << "block " << b << " thread " << i;
    for (int i = 0; i < n; i++) {
        EXPECT_GE(out[2 * n + i], (float)(n * sizeof(float))) << "static shared memory overlaps the dynamic";
        EXPECT_TRUE(std::isnan(out[3 * n + i])) << "dynamic shared memory starts poisoned";
    }
    EXPECT_TRUE(tp_emu_free(out));
}

TEST(CudaEmu, SyncthreadsAfterExitIsReported)
{
    cudaError_t err = tp_emu_launch("early_return", dim3(2), dim3(64), 0, [] {
        if (threadIdx.x >= 40)
            return;
        __syncthreads();
    });
    EXPECT_EQ(err, cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    EXPECT_NE(std::string(tp_emu_last_failure()).find("__syncthreads not reached by all threads"), std::string::npos)
        << tp_emu_last_failure();
}

TEST(CudaEmu, FailedLaunchAbortsThroughTpLaunch)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe"); // OpenBLAS has started threads
    EXPECT_DEATH(
        {
            tp_emu_set_seed(1);
            TP_LAUNCH(reverse_kernel<true>, 1, 2048, 0, nullptr, (float *)nullptr, (const float *)nullptr, 0);
        },
        "tprun: CUDA error: cudaGetLastError\\(\\) failed: invalid configuration argument");
}

TEST(CudaEmu, InvalidLaunchesAreRejected)
{
    auto nothing = [] {};
    EXPECT_EQ(tp_emu_launch("empty_grid", dim3(0), dim3(32), 0, nothing), cudaErrorInvalidConfiguration);
    EXPECT_EQ(tp_emu_launch("big_block", dim3(1), dim3(1025), 0, nothing), cudaErrorInvalidConfiguration);
    EXPECT_EQ(tp_emu_launch("tall_grid", dim3(1, 65536), dim3(32), 0, nothing), cudaErrorInvalidConfiguration);
    EXPECT_EQ(tp_emu_launch("big_shmem", dim3(1), dim3(32), 48 * 1024 + 1, nothing), cudaErrorInvalidConfiguration);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    // static shared memory over 48 KiB fails when the declaration runs
    EXPECT_EQ(tp_emu_launch("big_static", dim3(1), dim3(32), 0,
                            [] {
                                TP_SHARED(float, huge, 13000);
                                huge[threadIdx.x] = 0.0f;
                            }),
              cudaErrorLaunchFailure);
    (void)cudaGetLastError();
}

// Dynamic shared memory past 48 KiB, as attention's backward at head
// dimension 256 takes it: each thread checks that its own part starts
// poisoned, writes it, and after the barrier reads back its mirror's; a
// static array after the dynamic memory, past 48 KiB in all, likewise.
constexpr int kBigThreads = 128, kBigPerThread = 200; // 100 KiB
constexpr size_t kBigDynamic = kBigThreads * kBigPerThread * sizeof(float);

__global__ void big_shared_kernel(int *out)
{
    TP_DYNAMIC_SHARED(float, dyn);
    TP_SHARED(float, after, kBigThreads * 8);
    const int t = threadIdx.x, mirror = kBigThreads - 1 - t;
    int poisoned = 1, read_back = 1;
    for (int k = 0; k < kBigPerThread; k++) {
        poisoned &= std::isnan(dyn[t * kBigPerThread + k]);
        dyn[t * kBigPerThread + k] = (float)(t * kBigPerThread + k + blockIdx.x);
    }
    for (int k = 0; k < 8; k++) {
        poisoned &= std::isnan(after[t * 8 + k]);
        after[t * 8 + k] = (float)(-t - k);
    }
    __syncthreads();
    for (int k = 0; k < kBigPerThread; k++)
        read_back &= dyn[mirror * kBigPerThread + k] == (float)(mirror * kBigPerThread + k + blockIdx.x);
    for (int k = 0; k < 8; k++)
        read_back &= after[mirror * 8 + k] == (float)(-mirror - k);
    read_back &= reinterpret_cast<char *>(after) - reinterpret_cast<char *>(dyn) >= (long)kBigDynamic;
    out[2 * (blockIdx.x * kBigThreads + t)] = poisoned;
    out[2 * (blockIdx.x * kBigThreads + t) + 1] = read_back;
}

__global__ void big_static_kernel(float *out)
{
    TP_SHARED(float, huge, 13000); // 52000 bytes
    huge[threadIdx.x] = 0.0f;
    out[threadIdx.x] = huge[threadIdx.x];
}

TEST(CudaEmu, SharedMemoryPast48KiBNeedsOptIn)
{
    const cudaFuncAttribute max_dynamic = cudaFuncAttributeMaxDynamicSharedMemorySize;
    int *out = static_cast<int *>(tp_emu_alloc(2 * 2 * kBigThreads * sizeof(int)));
    auto launch = [out](size_t bytes) {
        return tp_emu_launch("big_shared_kernel", tp_emu::kernel_address(big_shared_kernel), dim3(2),
                             dim3(kBigThreads), bytes, [out] { big_shared_kernel(out); });
    };
    auto failure_has = [](const char *part) {
        return std::string(tp_emu_last_failure()).find(part) != std::string::npos;
    };
    EXPECT_EQ(launch(kBigDynamic), cudaErrorInvalidConfiguration) << "without opt-in";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_TRUE(failure_has("cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)"))
        << tp_emu_last_failure();

    // sm_80's limit with opt-in is 166912 bytes; the runtime's errors
    EXPECT_EQ(cudaFuncSetAttribute(big_shared_kernel, max_dynamic, 166913), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFuncSetAttribute(big_shared_kernel, max_dynamic, -1), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFuncSetAttribute(big_shared_kernel, (cudaFuncAttribute)9, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFuncSetAttribute((const void *)nullptr, max_dynamic, 0), cudaErrorInvalidDeviceFunction);
    (void)cudaGetLastError();

    ASSERT_EQ(cudaFuncSetAttribute(big_shared_kernel, max_dynamic, (int)kBigDynamic), cudaSuccess);
    TP_LAUNCH(big_shared_kernel, 2, kBigThreads, kBigDynamic, nullptr, out); // TP_LAUNCH's kernel opted in
    for (int i = 0; i < 2 * kBigThreads; i++) {
        EXPECT_EQ(out[2 * i], 1) << "thread " << i << ": shared memory starts poisoned";
        EXPECT_EQ(out[2 * i + 1], 1) << "thread " << i << ": read back";
    }
    EXPECT_EQ(launch(kBigDynamic + 4), cudaErrorInvalidConfiguration) << "more than opted in to";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
    EXPECT_TRUE(failure_has("opted in to")) << tp_emu_last_failure();

    // opted in to the most: the static array no longer fits beside it
    ASSERT_EQ(cudaFuncSetAttribute(big_shared_kernel, max_dynamic, 166912), cudaSuccess);
    EXPECT_EQ(launch(kBigDynamic), cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    EXPECT_TRUE(failure_has("opt in to less")) << tp_emu_last_failure();
    // as the runtime's default, for --gtest_repeat
    ASSERT_EQ(cudaFuncSetAttribute(big_shared_kernel, max_dynamic, 48 * 1024), cudaSuccess);

    // static shared memory past 48 KiB fails whatever the opt-in
    ASSERT_EQ(cudaFuncSetAttribute(big_static_kernel, max_dynamic, 100 * 1024), cudaSuccess);
    float *fout = static_cast<float *>(tp_emu_alloc(32 * sizeof(float)));
    EXPECT_EQ(tp_emu_launch("big_static_kernel", tp_emu::kernel_address(big_static_kernel), dim3(1), dim3(32), 0,
                            [fout] { big_static_kernel(fout); }),
              cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    EXPECT_TRUE(failure_has("static shared memory: 52000 bytes exceed 48 KiB")) << tp_emu_last_failure();
    EXPECT_TRUE(tp_emu_free(out));
    EXPECT_TRUE(tp_emu_free(fout));
}

TEST(CudaEmu, OutOfBoundsWritesAreReportedOnFree)
{
    float *p = static_cast<float *>(tp_emu_alloc(10 * sizeof(float)));
    TP_LAUNCH([](float *q) { q[threadIdx.x] = 1.0f; }, 1, 32, 0, nullptr, p); // 32 > 10
    EXPECT_FALSE(tp_emu_free(p));
}

__global__ void atomics_kernel(float *fsum, int *imax, unsigned *order)
{
    atomicAdd(fsum, 0.5f);
    atomicMax(imax, (int)(blockIdx.x * blockDim.x + threadIdx.x));
    if (threadIdx.x == 0)
        order[atomicAdd(order + 64, 1u)] = blockIdx.x; // the order blocks ran in
}

TEST(CudaEmu, AtomicsAndRandomBlockOrder)
{
    float *fsum = static_cast<float *>(tp_emu_alloc(sizeof(float)));
    int *imax = static_cast<int *>(tp_emu_alloc(sizeof(int)));
    unsigned *order = static_cast<unsigned *>(tp_emu_alloc(65 * sizeof(unsigned)));
    *fsum = 0.0f;
    *imax = -1;
    order[64] = 0;
    TP_LAUNCH(atomics_kernel, 64, 96, 0, nullptr, fsum, imax, order);
    EXPECT_EQ(*fsum, 0.5f * 64 * 96); // exact: halves sum exactly in float
    EXPECT_EQ(*imax, 64 * 96 - 1);
    std::vector<unsigned> seen(order, order + 64), sorted = seen;
    std::sort(sorted.begin(), sorted.end());
    for (unsigned i = 0; i < 64; i++)
        EXPECT_EQ(sorted[i], i) << "every block runs once";
    EXPECT_NE(seen, sorted) << "blocks run in a random order";
    EXPECT_TRUE(tp_emu_free(fsum));
    EXPECT_TRUE(tp_emu_free(imax));
    EXPECT_TRUE(tp_emu_free(order));
}

// ---- blocks taking turns (block_turns.cuh)

__device__ int linear_block()
{
    return (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z));
}

// Each block appends its linear index to `list` (its length first) in
// turn; `starts` gets the order the blocks started in. The block's last
// thread appends, so the pass must order another thread's writes.
__global__ void append_in_turn_kernel(int *count, int *list, int *starts)
{
    const int b = linear_block();
    if (threadIdx.x == 0)
        starts[1 + atomicAdd(starts, 1)] = b;
    tp_block_wait_turn(count, b);
    const int n = list[0];
    __syncthreads(); // every thread has read the length before it changes
    if (threadIdx.x == blockDim.x - 1) {
        list[1 + n] = b;
        list[0] = n + 1;
    }
    tp_block_pass_turn(count);
}

TEST(CudaEmu, BlocksTakeTurnsInOrder)
{
    for (dim3 grid : {dim3(8), dim3(3, 2, 2)}) {
        const int n = (int)(grid.x * grid.y * grid.z);
        int *count = static_cast<int *>(tp_emu_alloc(sizeof(int)));
        int *list = static_cast<int *>(tp_emu_alloc((size_t)(n + 1) * sizeof(int)));
        int *starts = static_cast<int *>(tp_emu_alloc((size_t)(n + 1) * sizeof(int)));
        std::vector<int> in_order(n);
        for (int i = 0; i < n; i++)
            in_order[(size_t)i] = i;
        bool waited = false;
        for (uint64_t seed = 1; seed <= 8; seed++) {
            *count = list[0] = starts[0] = 0;
            tp_emu_set_seed(seed);
            TP_LAUNCH(append_in_turn_kernel, grid, 64, 0, nullptr, count, list, starts);
            EXPECT_EQ(*count, n);
            EXPECT_EQ(list[0], n) << "seed " << seed;
            EXPECT_EQ(std::vector<int>(list + 1, list + 1 + n), in_order) << "seed " << seed;
            waited |= std::vector<int>(starts + 1, starts + 1 + n) != in_order;
        }
        EXPECT_TRUE(waited) << "blocks start in a random order, so some had to wait for their turn";
        EXPECT_TRUE(tp_emu_free(count));
        EXPECT_TRUE(tp_emu_free(list));
        EXPECT_TRUE(tp_emu_free(starts));
    }
}

// Each block adds its part into an fp32 tile in turn, every thread some
// elements (which ones rotates with the block), as FlashAttention-3's
// deterministic dq does: the sums are those of a sequential loop.
constexpr int kTile = 256;
__global__ void add_in_turn_kernel(int *count, float *tile, const float *parts)
{
    const int b = linear_block();
    tp_block_wait_turn(count, b);
    for (int i = (int)threadIdx.x; i < kTile; i += (int)blockDim.x) {
        const int e = (i + 37 * b) % kTile;
        tile[e] += parts[b * kTile + e];
    }
    tp_block_pass_turn(count);
}

TEST(CudaEmu, BlocksAddIntoATileInTurn)
{
    const dim3 grid(4, 3);
    const int n = 12;
    // magnitudes from 2^-10 to 2^10: a sum in another order has other bits
    Vec parts = random_vec((size_t)(n * kTile), 90);
    std::mt19937 gen(91);
    for (float &x : parts)
        x = std::ldexp(x, (int)(gen() % 21) - 10);
    Vec want((size_t)kTile, 0.0f);
    for (int b = 0; b < n; b++)
        for (int e = 0; e < kTile; e++)
            want[(size_t)e] += parts[(size_t)(b * kTile + e)];
    DevOf<float> dparts(parts);
    DevOf<int> count(1);
    DevOf<float> tile((size_t)kTile);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        *count.ptr() = 0;
        std::fill_n(tile.ptr(), kTile, 0.0f);
        tp_emu_set_seed(seed);
        TP_LAUNCH(add_in_turn_kernel, grid, 64, 0, nullptr, count.ptr(), tile.ptr(), dparts.ptr());
        const Vec got = tile.download();
        EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * kTile), 0) << "seed " << seed;
    }
}

// Block b waits for count >= b + 1: block 0 for a raise that never comes.
__global__ void wait_too_long_kernel(int *count)
{
    tp_block_wait_turn(count, linear_block() + 1);
    tp_block_pass_turn(count);
}

TEST(CudaEmu, BlocksWaitingForEachOtherFail)
{
    int *count = static_cast<int *>(tp_emu_alloc(sizeof(int)));
    for (uint64_t seed = 1; seed <= 3; seed++) {
        *count = 0;
        tp_emu_set_seed(seed);
        EXPECT_EQ(tp_emu_launch("wait_too_long", dim3(4), dim3(64), 0, [count] { wait_too_long_kernel(count); }),
                  cudaErrorLaunchFailure);
        (void)cudaGetLastError();
        const std::string why = tp_emu_last_failure();
        EXPECT_NE(why.find("block (0,0,0): deadlock across blocks: thread (0,0,0) waits for the count at"),
                  std::string::npos)
            << why;
        EXPECT_NE(why.find("to reach 1, and it holds 0 (4 blocks wait"), std::string::npos) << why;
    }
    // the schedulers of the blocks left waiting serve the next launch
    int *list = static_cast<int *>(tp_emu_alloc(5 * sizeof(int)));
    int *starts = static_cast<int *>(tp_emu_alloc(5 * sizeof(int)));
    *count = list[0] = starts[0] = 0;
    TP_LAUNCH(append_in_turn_kernel, 4, 64, 0, nullptr, count, list, starts);
    EXPECT_EQ(std::vector<int>(list, list + 5), std::vector<int>({4, 0, 1, 2, 3}));
    EXPECT_TRUE(tp_emu_free(count));
    EXPECT_TRUE(tp_emu_free(list));
    EXPECT_TRUE(tp_emu_free(starts));
}

// Turns in the reverse of the blocks' order: block 2 waits for block 3,
// which a GPU may not have dispatched yet.
__global__ void reverse_turns_kernel(int *count)
{
    tp_block_wait_turn(count, (int)(gridDim.x - 1 - blockIdx.x));
    tp_block_pass_turn(count);
}

TEST(CudaEmu, WaitingForALaterBlockFails)
{
    int *count = static_cast<int *>(tp_emu_alloc(sizeof(int)));
    for (uint64_t seed = 1; seed <= 4; seed++) { // block 3 runs before block 2 starts, or after
        *count = 0;
        tp_emu_set_seed(seed);
        EXPECT_EQ(tp_emu_launch("reverse_turns", dim3(4), dim3(64), 0, [count] { reverse_turns_kernel(count); }),
                  cudaErrorLaunchFailure);
        (void)cudaGetLastError();
        const std::string why = tp_emu_last_failure();
        EXPECT_NE(why.find("block (2,0,0) waited for block (3,0,0), which a GPU dispatches after it"),
                  std::string::npos)
            << why;
        EXPECT_NE(why.find("a grid larger than the GPU holds at once would deadlock"), std::string::npos) << why;
    }
    EXPECT_TRUE(tp_emu_free(count));
}

// A block that takes turn 0 twice finds the count past it: in a chain of
// turns that is a turn taken twice (or one skipped), whose sums would come
// out in another order.
TEST(CudaEmu, ATurnTakenTwiceFails)
{
    int *count = static_cast<int *>(tp_emu_alloc(sizeof(int)));
    *count = 0;
    EXPECT_EQ(tp_emu_launch("same_turn_twice", dim3(1), dim3(64), 0,
                            [count] {
                                for (int twice = 0; twice < 2; twice++) {
                                    tp_block_wait_turn(count, 0);
                                    tp_block_pass_turn(count);
                                }
                            }),
              cudaErrorLaunchFailure);
    (void)cudaGetLastError();
    const std::string why = tp_emu_last_failure();
    EXPECT_NE(why.find("holds 1 when its turn 0 comes: a turn taken twice, or one skipped"), std::string::npos)
        << why;
    EXPECT_TRUE(tp_emu_free(count));
}

// A block writing dynamic shared memory past what its launch asked for
// (a layout larger than the launch's size) fails the launch, though the
// emulator's arena holds the bytes: on a GPU they are another block's.
TEST(CudaEmu, WritingPastTheDynamicSharedMemoryFails)
{
    for (size_t past : {(size_t)256, (size_t)300}) { // within the 128-byte rounding, and beyond it
        EXPECT_EQ(tp_emu_launch("past_dynamic", dim3(2), dim3(32), 256,
                                [past] {
                                    TP_DYNAMIC_SHARED(unsigned char, bytes);
                                    if (threadIdx.x == 0)
                                        bytes[past] = 0;
                                }),
                  cudaErrorLaunchFailure)
            << past;
        (void)cudaGetLastError();
        const std::string why = tp_emu_last_failure();
        EXPECT_NE(why.find("wrote shared memory byte " + std::to_string(past) +
                           ", past the 256 dynamic bytes its launch asked for"),
                  std::string::npos)
            << why;
    }
    // its last byte is fine
    EXPECT_EQ(tp_emu_launch("last_dynamic", dim3(2), dim3(32), 256,
                            [] {
                                TP_DYNAMIC_SHARED(unsigned char, bytes);
                                if (threadIdx.x == 0)
                                    bytes[255] = 0;
                            }),
              cudaSuccess);
}

// Only thread 0 of block 1 calls tp_block_wait_turn: it reaches the
// barrier inside alone, the others have exited.
TEST(CudaEmu, WaitingWithoutTheWholeBlockFails)
{
    int *count = static_cast<int *>(tp_emu_alloc(sizeof(int)));
    for (uint64_t seed = 1; seed <= 4; seed++) { // block 1 suspended until block 0 passes, or not
        *count = 0;
        tp_emu_set_seed(seed);
        EXPECT_EQ(tp_emu_launch("lone_waiter", dim3(2), dim3(64), 0,
                                [count] {
                                    if (blockIdx.x == 1 && threadIdx.x == 0)
                                        tp_block_wait_turn(count, 1);
                                    if (blockIdx.x == 0)
                                        tp_block_pass_turn(count);
                                }),
                  cudaErrorLaunchFailure);
        (void)cudaGetLastError();
        const std::string why = tp_emu_last_failure();
        EXPECT_NE(why.find("block (1,0,0): __syncthreads not reached by all threads"), std::string::npos) << why;
    }
    EXPECT_TRUE(tp_emu_free(count));
}

TEST(CudaEmu, Bfloat16RoundsToNearestEven)
{
    auto bits = [](float f) { return __float2bfloat16(f).__x; };
    EXPECT_EQ(bits(1.0f), 0x3f80);
    EXPECT_EQ(bits(__uint_as_float(0x3f808000u)), 0x3f80); // tie, even below
    EXPECT_EQ(bits(__uint_as_float(0x3f818000u)), 0x3f82); // tie, even above
    EXPECT_EQ(bits(__uint_as_float(0x3f808001u)), 0x3f81); // above the tie
    EXPECT_EQ(bits(__uint_as_float(0x7f7fffffu)), 0x7f80); // FLT_MAX rounds to inf
    EXPECT_EQ(bits(-INFINITY), 0xff80);
    EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(NAN))));
    EXPECT_TRUE(std::isnan(__bfloat162float(__float2bfloat16(__uint_as_float(0x7f800001u))))) << "a NaN whose "
                                                                                                  "payload is "
                                                                                                  "in the low "
                                                                                                  "bits";
    EXPECT_EQ(__bfloat162float(__float2bfloat16(-2.5f)), -2.5f);
}

// ==================================================================================
// The kernels against the CPU backend
// ==================================================================================

// The schedule comes from TP_EMU_SEED (or the emulator's fixed default)
// and moves on with every launch, so --gtest_repeat=N or another seed
// explores other interleavings; a correct kernel passes under all of them.
class Kernels : public ::testing::TestWithParam<tp_kernel_dtype> {
  protected:
    tp_kernel_dtype t() const { return GetParam(); }
};

// ---- embedding: a copy, so exact in both types

TEST_P(Kernels, Embedding)
{
    struct Case {
        int64_t ntok, rows, dim, vocab_start;
        bool masked;
    };
    for (Case c : {Case{1, 1, 1, 0, false}, Case{7, 11, 37, 0, false}, Case{5, 6, 300, 0, false},
                   Case{13, 10, 37, 5, true}, Case{4, 3, 1, 100, true}}) {
        const std::string what = label(t(), "embedding ntok " + std::to_string(c.ntok) + " dim " +
                                                 std::to_string(c.dim) + (c.masked ? " masked" : ""));
        Vec w = as_stored(random_vec((size_t)(c.rows * c.dim), 1), t());
        IVec ids((size_t)c.ntok);
        std::mt19937 gen(2);
        const int64_t lo = c.masked ? 0 : c.vocab_start, hi = c.vocab_start + c.rows + (c.masked ? 10 : 0);
        for (int32_t &id : ids)
            id = (int32_t)(lo + (int64_t)(gen() % (uint64_t)(hi - lo)));
        Vec want((size_t)(c.ntok * c.dim));
        cpu()->embedding(want.data(), ids.data(), c.ntok, w.data(), c.rows, c.dim, c.vocab_start, c.masked);

        Dev dw(t(), w), dout(t(), want.size());
        DevOf<int32_t> dids(ids);
        tp_k_embedding(nullptr, t(), dout.ptr(), dids.ptr(), c.ntok, dw.ptr(), c.rows, c.dim, c.vocab_start, c.masked);
        expect_equal(dout.download(), want, what);
    }
}

// ---- norms: fp32 block reductions of up to 4100 terms against the CPU's
// double sums: the relative error of the statistics is ~ log2(n) ulps,
// 1e-5 leaves room; atol covers outputs near zero.

TEST_P(Kernels, RmsNorm)
{
    const Tol tol = stored({1e-6, 1e-5}, t());
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {5, 1000}, {2, 4100}})
    for (bool unit_offset : {false, true}) {   // Gemma's (1 + w), w stored around 0
        const std::string what = label(t(), std::string(unit_offset ? "rmsnorm (1 + w) " : "rmsnorm ") +
                                                 std::to_string(m) + "x" + std::to_string(n));
        Vec x = as_stored(random_vec((size_t)(m * n), 3, -2.0f, 2.0f), t());
        Vec w = as_stored(random_vec((size_t)n, 4, unit_offset ? -0.5f : 0.5f, unit_offset ? 0.5f : 1.5f), t());
        Vec want(x.size());
        cpu()->rmsnorm(want.data(), x.data(), w.data(), m, n, 1e-5f, unit_offset);
        Dev dx(t(), x), dw(t(), w), dout(t(), x.size());
        tp_k_rmsnorm(nullptr, t(), dout.ptr(), dx.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset);
        expect_close(dout.download(), want, tol, what);
        tp_k_rmsnorm(nullptr, t(), dx.ptr(), dx.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset); // in place
        expect_close(dx.download(), want, tol, what + " in place");
    }
}

TEST_P(Kernels, LayerNorm)
{
    const Tol tol = stored({1e-5, 1e-5}, t());
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {4, 1000}, {2, 4100}}) {
        for (bool bias : {false, true}) {
            const std::string what = label(t(), "layernorm " + std::to_string(m) + "x" + std::to_string(n) +
                                                     (bias ? " bias" : ""));
            // a mean far from zero: one-pass E[x^2] - E[x]^2 would cancel
            Vec x = as_stored(random_vec((size_t)(m * n), 5, 9.0f, 11.0f), t());
            Vec w = as_stored(random_vec((size_t)n, 6, 0.5f, 1.5f), t());
            Vec b = as_stored(random_vec((size_t)n, 7), t());
            Vec want(x.size());
            cpu()->layernorm(want.data(), x.data(), w.data(), bias ? b.data() : nullptr, m, n, 1e-5f);
            Dev dx(t(), x), dw(t(), w), db(t(), b), dout(t(), x.size());
            tp_k_layernorm(nullptr, t(), dout.ptr(), dx.ptr(), dw.ptr(), bias ? db.ptr() : nullptr, m, n, 1e-5f);
            expect_close(dout.download(), want, tol, what);
        }
    }
}

// ---- rope: the same double angles; the rotation is fp32 on rounded
// cos/sin, ~2 ulps of |x1| + |x2| <= 2

TEST_P(Kernels, Rope)
{
    const Tol tol = stored({1e-6, 1e-6}, t());
    struct Case {
        int64_t b, s, h, d, pos;
        tp_rope_scaling scaling;
        int64_t rotary;   // 0: the whole head
    };
    const tp_rope_scaling none = {TP_ROPE_DEFAULT, 1.0, 1.0, 4.0, 0, 32.0, 1.0, 1.0, true};
    const tp_rope_scaling llama3 = {TP_ROPE_LLAMA3, 8.0, 1.0, 4.0, 8192, 32.0, 1.0, 1.0, true};
    // Qwen2.5's long context: factor 4 over 32k, cos and sin times 0.1 ln 4 + 1
    const tp_rope_scaling yarn = {TP_ROPE_YARN, 4.0, 1.0, 4.0, 32768, 32.0, 1.0, 1.1386294361119890, true};
    for (Case c : {Case{1, 1, 1, 2, 0, none, 0}, Case{2, 5, 3, 8, 0, none, 0}, Case{1, 3, 2, 256, 8000, none, 0},
                   Case{2, 7, 4, 6, 13, none, 0},
                   Case{1, 2, 2, 128, 131070, none, 0},      // positions near a 128k context
                   Case{1, 3, 2, 128, 131070, llama3, 0},    // Llama 3.1's scaling there
                   Case{2, 3, 2, 128, 131000, yarn, 0},      // YaRN's frequencies and attention_factor
                   Case{1, 4, 3, 10, 9, yarn, 6},            // ... on a partial rotary
                   Case{2, 5, 3, 10, 7, none, 6},            // partial rotary (Phi-3): 6 of 10 rotate
                   Case{1, 4, 2, 96, 0, none, 72}}) {
        const int64_t r = c.rotary ? c.rotary : c.d;
        const std::string what = label(t(), "rope b" + std::to_string(c.b) + " s" + std::to_string(c.s) + " h" +
                                                std::to_string(c.h) + " d" + std::to_string(c.d) + " r" +
                                                std::to_string(r) + " pos " + std::to_string(c.pos) + " " +
                                                tp_rope_type_name(c.scaling.type));
        std::vector<double> f(r / 2);
        tp_rope_inv_freq(&c.scaling, 500000.0, r, c.pos + c.s, f.data());
        Vec x = as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), 8), t());
        Vec want(x.size());
        const double scale = tp_rope_cos_sin_scale(&c.scaling);
        cpu()->rope(want.data(), x.data(), c.b, c.s, c.h, c.d, r, c.pos, f.data(), scale, nullptr);
        Dev dx(t(), x), dout(t(), x.size());
        tp_k_rope(nullptr, t(), dout.ptr(), dx.ptr(), c.b, c.s, c.h, c.d, r, c.pos, f.data(), scale, nullptr);
        expect_close(dout.download(), want, tol, what);
        tp_k_rope(nullptr, t(), dx.ptr(), dx.ptr(), c.b, c.s, c.h, c.d, r, c.pos, f.data(), scale, nullptr); // in place
        expect_close(dx.download(), want, tol, what + " in place");
    }
}

// At the positions a positions op numbered by document.
TEST_P(Kernels, RopeAtDocumentPositions)
{
    const int64_t b = 2, s = 16, h = 3, d = 10, r = 6;
    const tp_rope_scaling none = {TP_ROPE_DEFAULT, 1.0, 1.0, 4.0, 0, 32.0, 1.0, 1.0, true};
    std::vector<double> f(r / 2);
    tp_rope_inv_freq(&none, 10000.0, r, s, f.data());
    IVec seg = attn_documents(b, s), pos((size_t)(b * s));
    cpu()->positions(pos.data(), b, s, 0, seg.data());
    Vec x = as_stored(random_vec((size_t)(b * s * h * d), 15), t()), want(x.size());
    cpu()->rope(want.data(), x.data(), b, s, h, d, r, 0, f.data(), 1.0, pos.data());
    Dev dx(t(), x), dout(t(), x.size());
    DevOf<int32_t> dpos(pos);
    tp_k_rope(nullptr, t(), dout.ptr(), dx.ptr(), b, s, h, d, r, 0, f.data(), 1.0, dpos.ptr());
    expect_close(dout.download(), want, stored({1e-6, 1e-6}, t()), label(t(), "rope at document positions"));
}

// ---- attention: fp32 dot products (up to 256 terms) and an fp32 online
// softmax over up to 130 keys against double; outputs are convex
// combinations of values in [-1, 1], so the error is absolute, ~1e-6.

TEST_P(Kernels, Attention)
{
    struct Case {
        int64_t b, s, h, g, d;
    };
    for (Case c : {Case{1, 1, 1, 1, 1}, Case{2, 19, 4, 2, 64}, Case{1, 67, 6, 1, 40}, Case{1, 20, 2, 2, 256},
                   Case{1, 130, 2, 1, 128}, Case{1, 9, 3, 3, 33}})
    // SDPA's head_dim ** -0.5, and Gemma 2's query_pre_attn_scalar ** -0.5 with
    // scores capped at 2 (below the raw scores of a few units, so the cap bites)
    for (auto [scale, softcap] : {std::pair<double, double>{1.0 / std::sqrt((double)c.d), 0.0}, {0.2, 2.0}}) {
        const std::string what = label(t(), "attention b" + std::to_string(c.b) + " s" + std::to_string(c.s) +
                                                " h" + std::to_string(c.h) + " g" + std::to_string(c.g) + " d" +
                                                std::to_string(c.d) + (softcap > 0 ? " capped" : ""));
        // bf16 with head dimension 64, 96, 128 or 256 runs on tensor cores (test_kernels_flash.cc)
        const Tol tol = t() == TP_KERNEL_BF16 && tp_cuda_flash_head_dim(c.d) ? kFlashTol : stored({3e-6, 1e-5}, t());
        // scores of a few units: the softmax is neither flat nor one-hot
        const float amp = 3.0f / std::sqrt(std::sqrt((float)c.d));
        Vec q = as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), 9, -amp, amp), t());
        Vec k = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 10, -amp, amp), t());
        Vec v = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 11), t());
        Vec want(q.size()), want_lse((size_t)(c.b * c.h * c.s));
        cpu()->attention(want.data(), want_lse.data(), q.data(), k.data(), v.data(), c.b, c.s, c.h, c.g, c.d, scale,
                         softcap, nullptr, nullptr);
        Dev dq(t(), q), dk(t(), k), dv(t(), v), dout(t(), q.size());
        DevOf<float> dlse(want_lse.size());
        tp_k_attention(nullptr, t(), dout.ptr(), dlse.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), c.b, c.s, c.h, c.g, c.d,
                       (float)scale, (float)softcap, nullptr, nullptr);
        expect_close(dout.download(), want, tol, what);
        expect_close(dlse.download(), want_lse, lse_tol(t(), c.d), what + " lse");
    }
}

// Documents (tpcc --segments): a padded row and a row of several
// documents against the CPU backend; the query tiles (8 queries) and key
// tiles cross the documents' edges (bf16 at d 64 and 128 on tensor cores:
// test_kernels_flash.cc has their blocks).
TEST_P(Kernels, AttentionWithinDocuments)
{
    struct Case {
        int64_t b, s, h, g, d;
    };
    for (Case c : {Case{2, 37, 4, 2, 64}, Case{2, 20, 2, 1, 33}, Case{3, 70, 2, 2, 128}})
    for (auto [scale, softcap] : {std::pair<double, double>{1.0 / std::sqrt((double)c.d), 0.0}, {0.2, 2.0}}) {
        const std::string what = label(t(), "attention within documents s" + std::to_string(c.s) + " d" +
                                                std::to_string(c.d) + (softcap > 0 ? " capped" : ""));
        const float amp = 3.0f / std::sqrt(std::sqrt((float)c.d));
        Vec q = as_stored(random_vec((size_t)(c.b * c.s * c.h * c.d), 12, -amp, amp), t());
        Vec k = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 13, -amp, amp), t());
        Vec v = as_stored(random_vec((size_t)(c.b * c.s * c.g * c.d), 14), t());
        IVec seg = attn_documents(c.b, c.s);
        Vec want(q.size()), want_lse((size_t)(c.b * c.h * c.s));
        cpu()->attention(want.data(), want_lse.data(), q.data(), k.data(), v.data(), c.b, c.s, c.h, c.g, c.d, scale,
                         softcap, seg.data(), nullptr);
        Dev dq(t(), q), dk(t(), k), dv(t(), v), dout(t(), q.size());
        DevOf<int32_t> dseg(seg);
        DevOf<float> dlse(want_lse.size());
        tp_k_attention(nullptr, t(), dout.ptr(), dlse.ptr(), dq.ptr(), dk.ptr(), dv.ptr(), c.b, c.s, c.h, c.g, c.d,
                       (float)scale, (float)softcap, dseg.ptr(), nullptr);
        const Tol tol = t() == TP_KERNEL_BF16 && tp_cuda_flash_head_dim(c.d) ? kFlashTol : stored({3e-6, 1e-5}, t());
        expect_close(dout.download(), want, tol, what);
        // a padding query's is +inf on both
        expect_close(dlse.download(), want_lse, lse_tol(t(), c.d), what + " lse");
    }
}

// ---- elementwise

// Every elementwise kernel on both of its paths (pack.cuh): 16-byte packs
// (aligned buffers; n with a tail after the whole packs) and element by
// element (every buffer one element off 16 bytes).
TEST_P(Kernels, Unary)
{
    // silu: expf and a division, a few ulps; gelu: tanhf's (or erff's) ulp
    // becomes absolute error where 1 + tanh cancels (x ~ -4), hence atol
    const Tol tol = stored({1e-6, 4e-6}, t());
    const char *names[] = {"silu", "gelu", "relu", "gelu (erf)"};   // kernels.h's op numbers
    for (int op = 0; op < 4; op++)
        for (int64_t n : {1, 257, 5000})
            for (int64_t off : {0, 1}) {
                const std::string what = label(t(), std::string(names[op]) + " n " + std::to_string(n) + " offset " +
                                                        std::to_string(off));
                Vec x = random_vec((size_t)(n + off), 12 + (unsigned)op, -12.0f, 12.0f);
                if (n > 4) {
                    x[off] = -100.0f; // e^-x overflows: silu -> -0, not NaN
                    x[off + 1] = 100.0f;
                    x[off + 2] = NAN; // propagates
                    x[off + 3] = -0.0f;
                }
                x = as_stored(x, t());
                Vec want((size_t)n);
                cpu()->unary((tp_unary)op, want.data(), x.data() + off, n);
                Dev dx(t(), x), dout(t(), x.size());
                tp_k_unary(nullptr, t(), op, dout.at(off), dx.at(off), n);
                Vec got = dout.download();
                expect_close(Vec(got.begin() + off, got.end()), want, tol, what);
                tp_k_unary(nullptr, t(), op, dx.at(off), dx.at(off), n); // in place
                got = dx.download();
                expect_close(Vec(got.begin() + off, got.end()), want, tol, what + " in place");
            }
}

// one fp32 operation per element, as on the CPU: equal up to one ulp
// (a GPU may contract scale * b + x into an fma)
constexpr Tol kOneOp = {0.0, 1.2e-7};

// silu_mul: the 16-byte path (aligned buffers, whole packs, then a tail)
// and the element path (every buffer one element off 16 bytes); in place
// on a. expf and a division as the silu, then one product.
TEST_P(Kernels, SiluMul)
{
    const Tol tol = stored({1e-6, 8e-6}, t());
    for (int64_t n : {1, 7, 8, 1000, 4099})
        for (int64_t off : {0, 1}) {
            const std::string what = label(t(), "silu_mul n " + std::to_string(n) + " offset " + std::to_string(off));
            Vec a = random_vec((size_t)(n + off), 25, -12.0f, 12.0f), b = random_vec((size_t)(n + off), 26);
            if (n > 4) {
                a[off] = -100.0f; // e^-x overflows: silu -> -0, not NaN
                a[off + 1] = 100.0f;
                a[off + 2] = NAN; // propagates
            }
            a = as_stored(a, t());
            b = as_stored(b, t());
            Vec want((size_t)n);
            cpu()->silu_mul(want.data(), a.data() + off, b.data() + off, n);
            Dev da(t(), a), db(t(), b), dout(t(), a.size());
            tp_k_silu_mul(nullptr, t(), dout.at(off), da.at(off), db.at(off), n);
            Vec got = dout.download();
            compare(Vec(got.begin() + off, got.end()), want, tol, what);
            tp_k_silu_mul(nullptr, t(), da.at(off), da.at(off), db.at(off), n);
            got = da.download();
            expect_close(Vec(got.begin() + off, got.end()), want, tol, what + " in place");
        }
}

// b repeating over a: whole packs of b (nb a multiple of 8) take the 16-byte
// path when aligned; an nb of 257 or 1 the element path, wrapping mid-pack.
TEST_P(Kernels, Binary)
{
    const Tol tol = stored(kOneOp, t());
    for (int op = 0; op < 2; op++)
        for (auto [n, nb] : {std::pair<int64_t, int64_t>{1, 1}, {12, 4}, {1000, 1000}, {999, 1}, {3 * 257, 257},
                             {5 * 64, 64}, {1003, 1003}})
            for (int64_t off : {0, 1}) {
                const std::string what = label(t(), std::string(op ? "mul" : "add") + " n " + std::to_string(n) +
                                                         " nb " + std::to_string(nb) + " offset " + std::to_string(off));
                Vec a = as_stored(random_vec((size_t)(n + off), 20), t());
                Vec b = as_stored(random_vec((size_t)(nb + off), 21), t());
                Vec want((size_t)n);
                cpu()->binary((tp_binary)op, want.data(), a.data() + off, n, b.data() + off, nb);
                Dev da(t(), a), db(t(), b), dout(t(), a.size());
                tp_k_binary(nullptr, t(), op, dout.at(off), da.at(off), n, db.at(off), nb);
                Vec got = dout.download();
                expect_close(Vec(got.begin() + off, got.end()), want, tol, what);
                tp_k_binary(nullptr, t(), op, da.at(off), da.at(off), n, db.at(off), nb); // in place
                got = da.download();
                expect_close(Vec(got.begin() + off, got.end()), want, tol, what + " in place");
            }
}

// add_rmsnorm against the CPU's add then rmsnorm: the sum stored (in bf16,
// rounded) and normalised; in place over a and over b; without the sum
// (the norm only) and without the norm (the sum only).
TEST_P(Kernels, AddRmsNorm)
{
    const Tol tol = stored({1e-6, 1e-5}, t());
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {5, 1000}})
    for (bool unit_offset : {false, true}) {
        const std::string what = label(t(), std::string("add_rmsnorm ") + (unit_offset ? "(1 + w) " : "") +
                                                 std::to_string(m) + "x" + std::to_string(n));
        Vec a = as_stored(random_vec((size_t)(m * n), 5, -2.0f, 2.0f), t());
        Vec b = as_stored(random_vec((size_t)(m * n), 6, -2.0f, 2.0f), t());
        Vec w = as_stored(random_vec((size_t)n, 4, unit_offset ? -0.5f : 0.5f, unit_offset ? 0.5f : 1.5f), t());
        Vec sum(a.size()), want(a.size());
        cpu()->binary(TP_BINARY_ADD, sum.data(), a.data(), m * n, b.data(), m * n);
        sum = as_stored(sum, t());   // what the unfused add stores
        cpu()->rmsnorm(want.data(), sum.data(), w.data(), m, n, 1e-5f, unit_offset);
        Dev da(t(), a), db(t(), b), dw(t(), w), ds(t(), a.size()), dy(t(), a.size());
        tp_k_add_rmsnorm(nullptr, t(), ds.ptr(), dy.ptr(), da.ptr(), db.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset);
        expect_close(ds.download(), sum, stored(kOneOp, t()), what + " sum");
        expect_close(dy.download(), want, tol, what);
        tp_k_add_rmsnorm(nullptr, t(), nullptr, dy.ptr(), da.ptr(), db.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset);
        expect_close(dy.download(), want, tol, what + " without the sum");
        Dev only(t(), a.size());
        tp_k_add_rmsnorm(nullptr, t(), only.ptr(), nullptr, da.ptr(), db.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset);
        expect_close(only.download(), sum, stored(kOneOp, t()), what + " without the norm");
        // the sum over a, the norm over b
        tp_k_add_rmsnorm(nullptr, t(), da.ptr(), db.ptr(), da.ptr(), db.ptr(), dw.ptr(), m, n, 1e-5f, unit_offset);
        expect_close(da.download(), sum, stored(kOneOp, t()), what + " sum in place");
        expect_close(db.download(), want, tol, what + " norm in place");
    }
}

TEST_P(Kernels, ScaleAndBiasAdd)
{
    const Tol tol = stored(kOneOp, t());
    for (int64_t n : {1, 300, 1001})
        for (int64_t off : {0, 1}) {
            const std::string at = " n " + std::to_string(n) + " offset " + std::to_string(off);
            Vec x = as_stored(random_vec((size_t)(n + off), 22), t());
            Vec want((size_t)n);
            cpu()->scale(want.data(), x.data() + off, n, 0.37f);
            Dev dx(t(), x), dout(t(), x.size());
            tp_k_scale(nullptr, t(), dout.at(off), dx.at(off), n, 0.37f);
            Vec got = dout.download();
            expect_close(Vec(got.begin() + off, got.end()), want, tol, label(t(), "scale" + at));
            // softcap: tanhf against tanh, a few ulps of the cap
            Vec big = as_stored(random_vec((size_t)(n + off), 25, -90.0f, 90.0f), t());
            cpu()->softcap(want.data(), big.data() + off, n, 30.0f);
            Dev dbig(t(), big);
            tp_k_softcap(nullptr, t(), dout.at(off), dbig.at(off), n, 30.0f);
            got = dout.download();
            expect_close(Vec(got.begin() + off, got.end()), want, stored({1e-5, 1e-6}, t()), label(t(), "softcap" + at));
        }
    for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {17, 300}, {5, 64}})
        for (int64_t off : {0, 1}) {
            const std::string what = label(t(), "bias_add " + std::to_string(m) + "x" + std::to_string(n) +
                                                    " offset " + std::to_string(off));
            Vec x = as_stored(random_vec((size_t)(m * n + off), 23), t());
            Vec b = as_stored(random_vec((size_t)(n + off), 24), t());
            Vec want((size_t)(m * n));
            cpu()->bias_add(want.data(), x.data() + off, b.data() + off, m, n, 0.5f);
            Dev dx(t(), x), db(t(), b), dout(t(), x.size());
            tp_k_bias_add(nullptr, t(), dout.at(off), dx.at(off), db.at(off), m, n, 0.5f);
            Vec got = dout.download();
            expect_close(Vec(got.begin() + off, got.end()), want, tol, what);
            tp_k_bias_add(nullptr, t(), dx.at(off), dx.at(off), db.at(off), m, n, 0.5f); // in place
            got = dx.download();
            expect_close(Vec(got.begin() + off, got.end()), want, tol, what + " in place");
        }
}

// bias_unary against the CPU's bias_add then activation: h stored (in
// bf16, rounded) and activated; kept, not wanted, and over x; the
// activation not wanted; on aligned
// buffers (the 16-byte path) and one element off (the scalar one).
TEST_P(Kernels, BiasUnary)
{
    const Tol tol = stored({1e-6, 4e-6}, t());   // the activations' (Unary, above)
    const char *names[] = {"silu", "gelu", "relu", "gelu (erf)"};
    for (int op = 0; op < 4; op++)
        for (auto [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {3, 37}, {17, 300}, {5, 64}})
            for (int64_t off : {0, 1}) {
                const std::string what = label(t(), std::string("bias ") + names[op] + " " + std::to_string(m) + "x" +
                                                        std::to_string(n) + " offset " + std::to_string(off));
                Vec x = as_stored(random_vec((size_t)(m * n + off), 26 + (unsigned)op, -6.0f, 6.0f), t());
                Vec b = as_stored(random_vec((size_t)(n + off), 30, -2.0f, 2.0f), t());
                Vec biased((size_t)(m * n)), want((size_t)(m * n));
                cpu()->bias_add(biased.data(), x.data() + off, b.data() + off, m, n, 0.5f);
                biased = as_stored(biased, t());   // what the unfused bias_add stores
                cpu()->unary((tp_unary)op, want.data(), biased.data(), m * n);
                auto from = [off](const Vec &v) { return Vec(v.begin() + off, v.end()); };
                Dev dx(t(), x), db(t(), b), dh(t(), x.size()), dy(t(), x.size());
                tp_k_bias_unary(nullptr, t(), op, dh.at(off), dy.at(off), dx.at(off), db.at(off), m, n, 0.5f);
                expect_close(from(dh.download()), biased, stored(kOneOp, t()), what + " h");
                expect_close(from(dy.download()), want, tol, what);
                Dev only(t(), x.size());
                tp_k_bias_unary(nullptr, t(), op, nullptr, only.at(off), dx.at(off), db.at(off), m, n, 0.5f);
                expect_close(from(only.download()), want, tol, what + " without h");
                Dev only_h(t(), x.size());
                tp_k_bias_unary(nullptr, t(), op, only_h.at(off), nullptr, dx.at(off), db.at(off), m, n, 0.5f);
                expect_close(from(only_h.download()), biased, stored(kOneOp, t()), what + " without the activation");
                tp_k_bias_unary(nullptr, t(), op, dx.at(off), dy.at(off), dx.at(off), db.at(off), m, n, 0.5f);
                expect_close(from(dx.download()), biased, stored(kOneOp, t()), what + " h over x");
                expect_close(from(dy.download()), want, tol, what + " h over x");
            }
}

// ---- reshards: copies, exact

TEST_P(Kernels, SliceSplitJoin)
{
    struct Case {
        std::vector<int64_t> shape;
        int dim, parts;
    };
    for (const Case &c : {Case{{2, 6, 5}, 1, 3}, Case{{2, 6, 5}, -1, 5}, Case{{4, 3}, 0, 2}, Case{{7}, 0, 7},
                          Case{{3, 1, 8}, 2, 1}, Case{{2, 3, 4, 6}, 3, 2}}) {
        int64_t n = 1;
        for (int64_t e : c.shape)
            n *= e;
        const int rank = (int)c.shape.size();
        std::string shape_str;
        for (int64_t e : c.shape)
            shape_str += std::to_string(e) + ",";
        const std::string what = label(t(), "shape [" + shape_str + "] dim " + std::to_string(c.dim) + " parts " +
                                                std::to_string(c.parts));
        Vec x = as_stored(random_vec((size_t)n, 30), t());
        Dev dx(t(), x);
        for (int index = 0; index < c.parts; index++) {
            Vec want((size_t)(n / c.parts));
            cpu()->slice(want.data(), x.data(), c.shape.data(), rank, c.dim, index, c.parts);
            Dev dout(t(), want.size());
            tp_k_slice(nullptr, t(), dout.ptr(), dx.ptr(), c.shape.data(), rank, c.dim, index, c.parts);
            expect_equal(dout.download(), want, what + " slice " + std::to_string(index));
        }
        /* narrow: every range of dim (split's pieces, uneven ones included) */
        const int d = c.dim < 0 ? c.dim + rank : c.dim;
        for (int64_t start = 0; start < c.shape[d]; start++)
            for (int64_t length = 1; start + length <= c.shape[d]; length++) {
                Vec want((size_t)(n / c.shape[d] * length));
                cpu()->narrow(want.data(), x.data(), c.shape.data(), rank, c.dim, start, length);
                Dev dout(t(), want.size());
                tp_k_narrow(nullptr, t(), dout.ptr(), dx.ptr(), c.shape.data(), rank, c.dim, start, length);
                expect_equal(dout.download(), want,
                             what + " narrow " + std::to_string(start) + "+" + std::to_string(length));
            }
        Vec blocks((size_t)n), joined((size_t)n);
        cpu()->split_blocks(blocks.data(), x.data(), c.shape.data(), rank, c.dim, c.parts);
        Dev dblocks(t(), (size_t)n), djoined(t(), (size_t)n);
        tp_k_split_blocks(nullptr, t(), dblocks.ptr(), dx.ptr(), c.shape.data(), rank, c.dim, c.parts);
        expect_equal(dblocks.download(), blocks, what + " split_blocks");
        cpu()->join_blocks(joined.data(), blocks.data(), c.shape.data(), rank, c.dim, c.parts);
        tp_k_join_blocks(nullptr, t(), djoined.ptr(), dblocks.ptr(), c.shape.data(), rank, c.dim, c.parts);
        expect_equal(djoined.download(), joined, what + " join_blocks");
        expect_equal(djoined.download(), x, what + " join of split");
    }
}

// By document: restarting at each change of segment, from the offset.
TEST(KernelsI32, PositionsByDocument)
{
    for (auto [b, s, off] : {std::tuple<int64_t, int64_t, int64_t>{2, 16, 0}, {3, 300, 7}}) {
        IVec seg = attn_documents(b, s), want((size_t)(b * s));
        cpu()->positions(want.data(), b, s, off, seg.data());
        DevOf<int32_t> dseg(seg), dout(want.size());
        tp_k_positions(nullptr, dout.ptr(), b, s, off, dseg.ptr());
        EXPECT_EQ(dout.download(), want) << "b " << b << " s " << s << " offset " << off;
    }
}

TEST(KernelsI32, Positions)
{
    for (auto [b, s, off] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 0}, {2, 7, 14}, {3, 300, 900}}) {
        IVec want((size_t)(b * s));
        cpu()->positions(want.data(), b, s, off, nullptr);
        DevOf<int32_t> dout(want.size());
        tp_k_positions(nullptr, dout.ptr(), b, s, off, nullptr);
        EXPECT_EQ(dout.download(), want) << "b " << b << " s " << s << " offset " << off;
    }
}

// ---- cross-entropy: fp32 sums over the vocabulary and the rows against
// double ones; the loss is ~log(vocab) ~ 3.5, so 1e-5 relative is ~100
// float ulps of headroom. Outputs are float32 in both storage types: no
// bf16 allowance (the inputs are the same rounded values on both sides).

constexpr Tol kLoss = {1e-6, 1e-5};

IVec random_labels(int64_t b, int64_t s, int64_t vocab, unsigned seed, int ignore_every)
{
    std::mt19937 gen(seed);
    IVec labels((size_t)(b * s));
    for (size_t i = 0; i < labels.size(); i++)
        labels[i] = ignore_every && i % (size_t)ignore_every == 1 ? -100 : (int32_t)(gen() % (uint64_t)vocab);
    return labels;
}

float kernel_cross_entropy(tp_kernel_dtype t, const Vec &logits, const IVec &labels, int64_t b, int64_t s, int64_t v,
                           int64_t vocab, tp_ce_rule rule = kHfLoss)
{
    Dev dl(t, logits);
    DevOf<int32_t> dlab(labels);
    DevOf<float> dloss(1);
    tp_k_cross_entropy(nullptr, t, dloss.ptr(), dl.ptr(), dlab.ptr(), b, s, v, vocab, rule.shift, (float)rule.divisor);
    return dloss.download()[0];
}

TEST_P(Kernels, CrossEntropy)
{
    struct Case {
        int64_t b, s, v, vocab;
        int ignore_every;
    };
    // padded vocabulary (37 columns, 31 real), one token per sequence (no
    // label at all: NaN), more rows than the kernel's 1024 blocks
    // either label convention, each a mean over the labelled rows or a sum
    // over a training step's divisor
    for (tp_ce_rule rule : {kHfLoss, kNextTokenLoss, tp_ce_rule{1, 7.5}, tp_ce_rule{0, 7.5}})
        for (Case c : {Case{2, 9, 37, 31, 3}, Case{1, 2, 1, 1, 0}, Case{3, 400, 16, 13, 5}, Case{1, 50, 1000, 1000, 0},
                       Case{4, 1, 10, 10, 0}}) {
            const std::string what = label(t(), "cross_entropy b" + std::to_string(c.b) + " s" + std::to_string(c.s) +
                                                     " v" + std::to_string(c.v) + " vocab " + std::to_string(c.vocab) +
                                                     " shift " + std::to_string(rule.shift) + " divisor " +
                                                     std::to_string(rule.divisor));
            Vec logits = as_stored(random_vec((size_t)(c.b * c.s * c.v), 40, -4.0f, 4.0f), t());
            IVec labels = random_labels(c.b, c.s, c.vocab, 41, c.ignore_every);
            float want;
            cpu()->cross_entropy(&want, logits.data(), labels.data(), c.b, c.s, c.v, c.vocab, rule);
            expect_close({kernel_cross_entropy(t(), logits, labels, c.b, c.s, c.v, c.vocab, rule)}, {want}, kLoss,
                         what);
        }
    // every label ignored: 0/0 = NaN, as torch
    IVec ignored(12, -100);
    Vec logits = as_stored(random_vec(12 * 5, 42), t());
    EXPECT_TRUE(std::isnan(kernel_cross_entropy(t(), logits, ignored, 2, 6, 5, 5)));
}

// The vocab-parallel pieces on simulated ranks, each holding v_local
// columns, with the all-reduces done by hand; each piece must match the
// CPU's piece on the same rank, and the composition the whole loss.
TEST_P(Kernels, CrossEntropyPieces)
{
    struct Case {
        int64_t b, s, vocab, tp, vl; // vl: columns per rank, vl * tp >= vocab
    };
    // 31 real columns over 4 x 8 (one padding column on the last rank);
    // 20 over 4 x 8 (rank 2 half padding, rank 3 padding only: max -inf,
    // sumexp 0); one rank and one token per sequence (no label: NaN)
    for (tp_ce_rule rule : {kHfLoss, kNextTokenLoss, tp_ce_rule{1, 7.5}, tp_ce_rule{0, 7.5}})
        for (Case c : {Case{2, 9, 31, 4, 8}, Case{1, 6, 20, 4, 8}, Case{3, 1, 5, 1, 5}}) {
            const int64_t vl = c.vl, vpad = vl * c.tp, rows = c.b * c.s;
            const std::string what = label(t(), "ce pieces b" + std::to_string(c.b) + " s" + std::to_string(c.s) +
                                                     " vocab " + std::to_string(c.vocab) + " tp " +
                                                     std::to_string(c.tp) +
                                                     " shift " + std::to_string(rule.shift) + " divisor " +
                                                     std::to_string(rule.divisor));
            Vec full = as_stored(random_vec((size_t)(rows * vpad), 50, -4.0f, 4.0f), t());
            IVec labels = random_labels(c.b, c.s, c.vocab, 51, 4);
            float want_loss;
            cpu()->cross_entropy(&want_loss, full.data(), labels.data(), c.b, c.s, vpad, c.vocab, rule);

            DevOf<int32_t> dlab(labels);
            Vec gmax((size_t)rows, -INFINITY), gsum((size_t)rows, 0.0f), gtarget((size_t)rows, 0.0f);
            std::vector<Vec> locals;
            for (int64_t r = 0; r < c.tp; r++) {
                Vec local((size_t)(rows * vl));
                for (int64_t i = 0; i < rows; i++)
                    std::copy_n(full.begin() + i * vpad + r * vl, vl, local.begin() + i * vl);
                locals.push_back(local);
                Vec want_max((size_t)rows), want_target((size_t)rows);
                cpu()->ce_max(want_max.data(), local.data(), rows, vl, r * vl, c.vocab);
                cpu()->ce_target(want_target.data(), local.data(), labels.data(), c.b, c.s, vl, r * vl, rule);
                Dev dlocal(t(), local);
                DevOf<float> dmax((size_t)rows), dtarget((size_t)rows);
                tp_k_ce_max(nullptr, t(), dmax.ptr(), dlocal.ptr(), rows, vl, r * vl, c.vocab);
                tp_k_ce_target(nullptr, t(), dtarget.ptr(), dlocal.ptr(), dlab.ptr(), c.b, c.s, vl, r * vl, rule.shift);
                const std::string rk = what + " rank " + std::to_string(r);
                expect_equal(dmax.download(), want_max, rk + " ce_max");       // a max: exact
                expect_equal(dtarget.download(), want_target, rk + " ce_target"); // a gather: exact
                for (int64_t i = 0; i < rows; i++) {
                    gmax[(size_t)i] = std::max(gmax[(size_t)i], want_max[(size_t)i]);
                    gtarget[(size_t)i] += want_target[(size_t)i];
                }
            }
            for (int64_t r = 0; r < c.tp; r++) {
                Vec want_sum((size_t)rows);
                cpu()->ce_sumexp(want_sum.data(), locals[(size_t)r].data(), gmax.data(), rows, vl, r * vl, c.vocab);
                Dev dlocal(t(), locals[(size_t)r]);
                DevOf<float> dmax(gmax), dsum((size_t)rows);
                tp_k_ce_sumexp(nullptr, t(), dsum.ptr(), dlocal.ptr(), dmax.ptr(), rows, vl, r * vl, c.vocab);
                expect_close(dsum.download(), want_sum, kLoss, what + " rank " + std::to_string(r) + " ce_sumexp");
                for (int64_t i = 0; i < rows; i++)
                    gsum[(size_t)i] += want_sum[(size_t)i];
            }
            float want_pieces;
            cpu()->ce_loss(&want_pieces, gsum.data(), gmax.data(), gtarget.data(), labels.data(), c.b, c.s, rule);
            DevOf<float> dsum(gsum), dmax(gmax), dtarget(gtarget), dloss(1);
            tp_k_ce_loss(nullptr, dloss.ptr(), dsum.ptr(), dmax.ptr(), dtarget.ptr(), dlab.ptr(), c.b, c.s, rule.shift,
                         (float)rule.divisor);
            const float got = dloss.download()[0];
            expect_close({got}, {want_pieces}, kLoss, what + " ce_loss");
            expect_close({got}, {want_loss}, kLoss, what + " ce_loss = cross_entropy");
        }
}

// ---- determinism: the reductions are fixed trees, so the schedule (the
// seed) must not change a single bit

TEST_P(Kernels, ResultsDoNotDependOnTheSchedule)
{
    const int64_t m = 3, n = 1000, s = 21, h = 2, d = 64;
    Vec x = as_stored(random_vec((size_t)(m * n), 60), t()), w = as_stored(random_vec((size_t)n, 61), t());
    Vec q = as_stored(random_vec((size_t)(s * h * d), 62), t());
    Vec logits = as_stored(random_vec((size_t)(m * n), 63, -4.0f, 4.0f), t());
    IVec labels = random_labels(1, m, n, 64, 0);
    Vec first_norm, first_attn;
    float first_loss = 0.0f;
    for (uint64_t seed : {1, 2, 3}) {
        tp_emu_set_seed(seed);
        Dev dx(t(), x), dw(t(), w), dout(t(), x.size()), dq(t(), q), dattn(t(), q.size());
        tp_k_rmsnorm(nullptr, t(), dout.ptr(), dx.ptr(), dw.ptr(), m, n, 1e-6f, false);
        tp_k_attention(nullptr, t(), dattn.ptr(), nullptr, dq.ptr(), dq.ptr(), dq.ptr(), 1, s, h, h, d, 0.125f, 0.0f,
                       nullptr, nullptr);
        const float loss = kernel_cross_entropy(t(), logits, labels, 1, m, n, n);
        if (seed == 1) {
            first_norm = dout.download();
            first_attn = dattn.download();
            first_loss = loss;
            continue;
        }
        EXPECT_EQ(std::memcmp(first_norm.data(), dout.download().data(), first_norm.size() * 4), 0) << seed;
        EXPECT_EQ(std::memcmp(first_attn.data(), dattn.download().data(), first_attn.size() * 4), 0) << seed;
        EXPECT_EQ(std::memcmp(&first_loss, &loss, 4), 0) << seed;
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Kernels, ::testing::Values(TP_KERNEL_F32, TP_KERNEL_BF16),
                         [](const ::testing::TestParamInfo<tp_kernel_dtype> &info) {
                             return std::string(dtype_name(info.param));
                         });

// ---- preconditions abort with a message

TEST(KernelsDeath, PreconditionsAbortWithAMessage)
{
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    void *p = reinterpret_cast<void *>(16), *q = reinterpret_cast<void *>(32); // distinct, never dereferenced
    EXPECT_DEATH(tp_k_attention(nullptr, TP_KERNEL_F32, p, nullptr, q, q, q, 1, 4, 2, 2, 512, 0.125f, 0.0f, nullptr,
                                nullptr),
                 "head dimension at most 256");
    int64_t shape[] = {5, 4};
    EXPECT_DEATH(tp_k_slice(nullptr, TP_KERNEL_F32, nullptr, nullptr, shape, 2, 0, 0, 2),
                 "the compiler only emits even splits");
    // bf16 weights have no fp32 copy to step in place: their part needs a master
    const tp_adamw_part bf16_part = {nullptr, static_cast<float *>(p), static_cast<float *>(q),
                                     static_cast<float *>(q), static_cast<const float *>(q), 8, true};
    EXPECT_DEATH(tp_k_adamw_parts(nullptr, TP_KERNEL_BF16, &bf16_part, 1, 1.0f, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1),
                 "bf16 weights step through a master");
}

} // namespace
