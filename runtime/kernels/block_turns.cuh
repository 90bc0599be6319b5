// block_turns.cuh: the blocks of one grid taking turns at the same global
// memory in an order the kernel fixes. A count in global memory says how
// many turns are done; a block waits until the count reaches its turn,
// does its part (adds its partial sums into an fp32 tile, say), then raises
// the count by one. FlashAttention-3's deterministic dq is this: every block
// adds into a dq tile in the same order on every run, so the sums are the
// same bits, without atomics and without a copy of dq per block and a
// reduction kernel after.
// defines: tp_block_wait_turn, tp_block_pass_turn
//
// Both are block-wide, like __syncthreads: every thread of the block calls
// them, with the same arguments. A count is an int in global memory, zeroed
// before the launch (cudaMemsetAsync on the launch's stream), one per thing
// taken in turn; the block whose turn is the k-th (from 0) calls
// tp_block_wait_turn(count, k), does its part, then tp_block_pass_turn(count).
// Each turn is taken once, in order: the emulator fails a wait that finds
// the count past its turn (two blocks took one turn, or one was skipped),
// and may run other blocks right after a raise, before the raising block's
// other threads go on (which shows a raise before the block's writes).
// A block reads what it takes in turn after its wait and writes it before
// its pass, with plain loads and stores.
//
// The forward-progress rule: a block may wait only for blocks of a LOWER
// linear index (blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y *
// blockIdx.z)). CUDA promises no order between blocks, but GPUs dispatch
// them in increasing linear index as resources free up (FlashAttention-3
// and CUTLASS's semaphores rely on it), and a waiting block keeps its
// resources: one that waits for a block not dispatched yet deadlocks once
// the grid is larger than what the GPU holds at once, every slot taken by
// a waiting block. When blocks wait only for lower indices, the lowest
// block not finished waits for no one and has been dispatched (or is next).
// The emulator fails a launch that breaks the rule, whatever the grid size:
// a wait on a count that any block of higher index has raised, which in a
// chain of turns (each raise the next turn's) is a wait for that block.
//
// Under TP_CUDA_EMULATION thread 0 calls the emulator's count entries
// (cuda_emu.h) instead of the PTX: a block whose turn has not come is
// suspended and other blocks run. The barriers are kept, so a thread that
// skips a call fails the launch (on a GPU it would hang or race).
#ifndef TPRUN_KERNELS_BLOCK_TURNS_CUH
#define TPRUN_KERNELS_BLOCK_TURNS_CUH

#include "launch.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 700
#error "block_turns.cuh: ld.acquire and red.release need sm_70 or newer"
#endif

__device__ __forceinline__ bool tp_block_thread0()
{
    return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
}

// Returns once *count >= at_least, with every global write that the blocks
// which raised the count made before raising it visible to every thread of
// this block. One thread polls, not the whole block; its acquire load
// pairs with the raises' release (through every raise in between, each an
// atomic on the same address), and the barrier then orders the rest of the
// block after it. No barrier first: nothing before the wait needs ordering,
// and the other warps' work may overlap the polling.
__device__ __forceinline__ void tp_block_wait_turn(const int *count, int at_least)
{
    if (tp_block_thread0()) {
#if defined(TP_CUDA_EMULATION)
        tp_emu::wait_count_at_least(count, at_least);
#else
        unsigned ns = 8;
        for (;;) {
            int seen;
            asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
            if (seen >= at_least)
                break;
            __nanosleep(ns); // back off, but not so long that the next turn waits on the sleep
            ns = ns < 256 ? 2 * ns : ns;
        }
#endif
    }
    __syncthreads();
}

// Makes every thread's earlier global writes visible to whoever waits for
// the count, then raises it by one. The barrier puts every thread's writes
// before thread 0's raise, and a release is cumulative in PTX's memory
// model: it orders before itself everything thread 0 has observed, which
// the barrier made include the other threads' writes (causality order is
// transitive through bar.sync). So one red.release.gpu by thread 0 is
// enough; __threadfence() + atomicAdd would do the same with a full
// fence.sc.gpu, stronger than a release needs. No barrier after: the block
// does not touch what it passed on before another wait, so nothing after
// the pass needs ordering.
__device__ __forceinline__ void tp_block_pass_turn(int *count)
{
    __syncthreads();
    if (tp_block_thread0()) {
#if defined(TP_CUDA_EMULATION)
        tp_emu::raise_count(count, 1);
#else
        asm volatile("red.release.gpu.global.add.s32 [%0], 1;" : : "l"(count) : "memory");
#endif
    }
}

#endif // TPRUN_KERNELS_BLOCK_TURNS_CUH
