// cuda_emu.cpp: the block scheduler behind cuda_emu.h.
//
// Each CUDA thread of the running block is a fiber: its own stack, and a
// saved stack pointer. The scheduler (the launching host thread's own
// stack) repeatedly draws a runnable fiber at random and switches to it;
// the fiber runs until it reaches a scheduling point (__syncthreads, a warp
// collective, an atomic, a turn's wait or raise) or returns, then switches
// back. A barrier or a collective releases its waiters only when every
// participant has arrived, so "between barriers" any interleaving of whole
// thread segments can happen, and which one is drawn from a seeded
// generator.
//
// Blocks start in a random order and run one at a time. A thread that
// waits for a count (block_turns.cuh, wait_count_at_least) is suspended
// AT_COUNT, and once nothing else in its block can run, so is the block:
// its scheduler (fibers with their stacks, shared memory, warps) is kept
// and the launch goes on with another block, drawn at random from the next
// one to start and the suspended ones whose count has been reached. The
// schedulers come from a pool, so a launch whose blocks never wait runs
// every block on one, as if blocks simply ran one after another. A launch
// fails when blocks are left that all wait and none can go on, when a
// wait was met by a raise of a block of higher linear index, which a GPU
// dispatches later (a deadlock on a grid larger than it holds at once), or
// when a wait finds the count past its turn. After a raise, one time in
// two, the raising block is preempted and others run before its other
// threads go on: a raise before the block's own writes are done shows.
// A block that wrote shared memory past its launch's dynamic bytes and its
// static declarations fails the launch too (those bytes stay poisoned).
//
// Each phase (from the block's start or a barrier to the next barrier)
// draws one of two policies. Uniform picks keep all threads at about the
// same pace, which exposes a read of data another thread has not written
// yet. Priority picks (a random priority per warp, and per lane within it;
// the highest runnable thread runs) let one warp run ahead to the next
// barrier before another starts, which exposes the opposite hazard: a fast
// warp overwriting shared data a slow one has not read yet (a missing
// trailing __syncthreads). A thread that becomes runnable again is given a
// new random priority one time in 16, so warps also get split (as in PCT,
// probabilistic concurrency testing).
//
// The context switch is a dozen instructions of x86-64 assembly (glibc's
// swapcontext makes a signal-mask system call per switch, ~250 ns here,
// and a test run switches tens of millions of times); other architectures,
// or -DTP_EMU_UCONTEXT, use makecontext/swapcontext. Under AddressSanitizer
// every switch is announced with __sanitizer_start/finish_switch_fiber.
#include "cuda_emu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#if !defined(__x86_64__) && !defined(TP_EMU_UCONTEXT)
#define TP_EMU_UCONTEXT 1
#endif
#ifdef TP_EMU_UCONTEXT
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TP_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TP_EMU_ASAN 1
#endif
#endif
#ifdef TP_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace tp_emu {

// ---- fibers -----------------------------------------------------------------

#ifndef TP_EMU_UCONTEXT
// void tp_emu_swap(void **save_sp, void *load_sp): pushes the callee-saved
// registers, MXCSR and the x87 control word on the current stack, stores
// the stack pointer in *save_sp, loads load_sp and pops the same from there.
extern "C" void tp_emu_swap(void **save_sp, void *load_sp);
asm(R"(
    .text
    .p2align 4
    .type tp_emu_swap, @function
tp_emu_swap:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size tp_emu_swap, .-tp_emu_swap
)");
#endif

enum State { RUNNABLE, AT_BARRIER, AT_WARP, AT_COUNT, EXITED };

struct Grid {
    dim3 grid, block, block_idx;
};

struct AsyncCopy {
    void *dst;
    const void *src;
    size_t n, src_bytes;
};

struct Fiber {
    char *stack = nullptr; // lowest usable byte (a guard page lies below)
    size_t stack_size = 0;
#ifdef TP_EMU_UCONTEXT
    ucontext_t ctx;
#else
    void *sp = nullptr;
#endif
    dim3 tid;
    int linear = 0, warp = 0, lane = 0;
    State state = RUNNABLE;
    // the pending warp collective: this lane's operands and its result
    CollectiveOp op = SYNCWARP;
    const char *op_name = "";
    unsigned mask = 0;
    uint64_t value = 0, result = 0;
    int param = 0, width = 32;
    void (*call)(void *const lanes[32]) = nullptr; // WARP_CALL's function
    // AT_COUNT: waits for *count >= at_least (wait_count_at_least)
    const int *count = nullptr;
    int at_least = 0;
    // cp.async: the copies of the open group, then the committed groups,
    // oldest first, none of them done yet
    std::vector<AsyncCopy> open_copies;
    std::vector<std::vector<AsyncCopy>> copy_groups;
};

struct Collective {
    CollectiveOp op;
    const char *name;
    unsigned mask, arrived;
};

struct Warp {
    unsigned exists = 0, exited = 0;
    std::vector<Collective> open;
};

constexpr size_t kStackSize = 256 * 1024;
constexpr size_t kSharedLimit = 48 * 1024; // static; static + dynamic without opt-in
// static + dynamic with opt-in (cudaFuncSetAttribute): sm_80's
// cudaDevAttrMaxSharedMemoryPerBlockOptin, the least of the GPUs we run on
constexpr size_t kSharedOptinLimit = 166912;
// fiber stacks mapped at once (pooled schedulers' included): each is two
// mappings (the stack and its guard page), and Linux allows 65530 a
// process; the threads of blocks suspended at once are limited by it
constexpr uint64_t kMaxWaitingThreads = 24576;

// One block's threads, and the launch's configuration, which each copies.
// A block waiting for a count keeps its scheduler while others run, so a
// launch uses as many as it has blocks waiting at once, from a pool.
struct Scheduler {
    uint64_t launch = 0; // the launch (launch_serial) it is set up for
    uint64_t block = 0;  // the running block's linear index
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<int> runnable;
    std::vector<int> counting; // the threads AT_COUNT
    bool preempted = false;    // by a raise (raise_count): other blocks run first
    // the policy of the current phase (block start or barrier to barrier):
    // uniform random picks, or the runnable thread of highest priority
    bool by_priority = false;
    std::vector<uint64_t> priority;
    int nthreads = 0, exited = 0, at_barrier = 0;
#ifdef TP_EMU_UCONTEXT
    ucontext_t main_ctx;
#else
    void *main_sp = nullptr;
#endif
    const std::function<void()> *body = nullptr;
    Grid grid;
    const char *kernel = "";
    bool failed = false;
    std::string failure;
    // shared memory of the running block: the dynamic bytes, then the
    // static declarations, up to static_limit bytes of them. The arena is
    // 128-aligned and sized to a launch's need (48 KiB, about 163 KiB at
    // most with opt-in), kept for the next launch unless smaller: memory a
    // pooled scheduler holds beside its threads' stacks (256 KiB each).
    // Before each block its first dynamic_bytes + static_limit bytes, all
    // the block may use, are poisoned.
    unsigned char *arena = nullptr;
    size_t arena_size = 0;
    size_t dynamic_bytes = 0, static_limit = 0, used = 0;
    size_t dynamic_asked = 0; // the launch's dynamic bytes before rounding
    long opted_in = -1; // the kernel's cudaFuncSetAttribute bytes, or -1
    std::vector<std::pair<const void *, size_t>> statics;
#ifdef TP_EMU_ASAN
    const void *main_stack_bottom = nullptr;
    size_t main_stack_size = 0;
    void *fake_stack = nullptr;
#endif
};

static thread_local Fiber *cur_fiber = nullptr;
static thread_local const Grid *cur_grid = nullptr;
static thread_local Scheduler *sched = nullptr;
static thread_local uint64_t rng_state = 0;
static thread_local bool rng_seeded = false;
static thread_local cudaError_t last_error = cudaSuccess;
static thread_local std::string last_failure;
static thread_local uint64_t switches = 0;
static thread_local uint64_t launch_serial = 0;
// of each count raised in the running launch, the highest linear index of a
// block that raised it
static thread_local std::unordered_map<const int *, uint64_t> raised_by;

const dim3 &thread_idx()
{
    if (!cur_fiber) {
        fprintf(stderr, "tp_emu: threadIdx used outside a kernel\n");
        abort();
    }
    return cur_fiber->tid;
}

static const Grid &grid_of_kernel()
{
    if (!cur_fiber) {
        fprintf(stderr, "tp_emu: blockIdx, blockDim or gridDim used outside a kernel\n");
        abort();
    }
    return *cur_grid;
}

const dim3 &block_idx() { return grid_of_kernel().block_idx; }
const dim3 &block_dim() { return grid_of_kernel().block; }
const dim3 &grid_dim() { return grid_of_kernel().grid; }

static uint64_t next_random()
{
    if (!rng_seeded) {
        const char *env = getenv("TP_EMU_SEED");
        rng_state = env && *env ? strtoull(env, nullptr, 0) : 0x5eedu;
        rng_seeded = true;
    }
    // splitmix64
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t random_below(size_t n) { return (size_t)(next_random() % n); }

struct ByPriority {
    const std::vector<uint64_t> *p;
    bool operator()(int a, int b) const { return (*p)[(size_t)a] < (*p)[(size_t)b]; }
};

// fiber `id` may be picked again
static void make_runnable(Scheduler &s, int id)
{
    s.runnable.push_back(id);
    if (s.by_priority) {
        if (random_below(16) == 0)
            s.priority[(size_t)id] = next_random();
        std::push_heap(s.runnable.begin(), s.runnable.end(), ByPriority{&s.priority});
    }
}

// a new phase: draw its policy (every runnable thread is in s.runnable)
static void new_phase(Scheduler &s)
{
    s.by_priority = next_random() & 1;
    if (!s.by_priority)
        return;
    for (int w = 0; w * 32 < s.nthreads; w++) {
        const uint64_t warp_priority = next_random() << 32;
        for (int i = w * 32; i < s.nthreads && i < w * 32 + 32; i++)
            s.priority[(size_t)i] = warp_priority | (next_random() >> 32);
    }
    std::make_heap(s.runnable.begin(), s.runnable.end(), ByPriority{&s.priority});
}

// the next fiber to run (s.runnable is not empty)
static int pick(Scheduler &s)
{
    if (s.by_priority) {
        std::pop_heap(s.runnable.begin(), s.runnable.end(), ByPriority{&s.priority});
        const int id = s.runnable.back();
        s.runnable.pop_back();
        return id;
    }
    const size_t k = random_below(s.runnable.size());
    const int id = s.runnable[k];
    s.runnable[k] = s.runnable.back();
    s.runnable.pop_back();
    return id;
}

// fiber stacks mapped now, in every scheduler of this thread, pooled or live
static thread_local uint64_t mapped_stacks = 0;

static char *new_stack(size_t size)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *p = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("tp_emu: mmap of a fiber stack");
        abort();
    }
    mprotect(p, page, PROT_NONE); // overflowing a fiber's stack faults instead of corrupting another
    mapped_stacks++;
    return (char *)p + page;
}

// unmaps the stacks of fibers[from ..] (of a scheduler no block uses, or
// past the threads of the block it is set up for), to make room for others
static void release_stacks(std::vector<Fiber> &fibers, size_t from = 0)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t i = from; i < fibers.size(); i++)
        if (Fiber &f = fibers[i]; f.stack) {
            if (munmap(f.stack - page, f.stack_size + page) != 0) {
                perror("tp_emu: munmap of a fiber stack");
                abort();
            }
            f.stack = nullptr;
            mapped_stacks--;
        }
}

// ---- switching ----------------------------------------------------------------

// from the scheduler into fiber f
static void switch_to(Scheduler &s, Fiber &f)
{
    cur_fiber = &f;
    switches++;
#ifdef TP_EMU_ASAN
    __sanitizer_start_switch_fiber(&s.fake_stack, f.stack, f.stack_size);
#endif
#ifdef TP_EMU_UCONTEXT
    swapcontext(&s.main_ctx, &f.ctx);
#else
    tp_emu_swap(&s.main_sp, f.sp);
#endif
#ifdef TP_EMU_ASAN
    __sanitizer_finish_switch_fiber(s.fake_stack, nullptr, nullptr);
#endif
    cur_fiber = nullptr;
}

// from the running fiber back to the scheduler; returns when rescheduled
// (never, when the fiber has exited or failed)
static void switch_out(bool dying)
{
    Scheduler &s = *sched;
    Fiber &f = *cur_fiber;
#ifdef TP_EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(dying ? nullptr : &fake, s.main_stack_bottom, s.main_stack_size);
#else
    (void)dying;
#endif
#ifdef TP_EMU_UCONTEXT
    swapcontext(&f.ctx, &s.main_ctx);
#else
    tp_emu_swap(&f.sp, s.main_sp);
#endif
#ifdef TP_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static void fiber_main()
{
#ifdef TP_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched->main_stack_bottom, &sched->main_stack_size);
#endif
    (*sched->body)();
    Scheduler &s = *sched;
    Fiber &f = *cur_fiber;
    f.state = EXITED;
    s.exited++;
    s.warps[f.warp].exited |= 1u << f.lane;
    switch_out(true);
    __builtin_unreachable();
}

static void init_fiber(Fiber &f)
{
    f.open_copies.clear();
    f.copy_groups.clear();
    if (!f.stack) {
        f.stack_size = kStackSize;
        f.stack = new_stack(f.stack_size);
    }
#ifdef TP_EMU_ASAN
    // a fiber abandoned by a failed launch leaves its frames' redzones
    __asan_unpoison_memory_region(f.stack, f.stack_size);
#endif
#ifdef TP_EMU_UCONTEXT
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = f.stack_size;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
#else
    // the frame tp_emu_swap pops: FP control, r15..r12, rbx, rbp, then it
    // returns into fiber_main as if called (rsp = 8 mod 16 at its entry)
    uintptr_t top = ((uintptr_t)(f.stack + f.stack_size)) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)top;
    *--sp = 0;                          // fiber_main's return address: none
    *--sp = (uint64_t)(uintptr_t)fiber_main;
    for (int i = 0; i < 6; i++)
        *--sp = 0; // rbp, rbx, r12..r15
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    *--sp = (uint64_t)mxcsr | ((uint64_t)fpucw << 32);
    f.sp = sp;
#endif
}

// ---- failures -------------------------------------------------------------------

static std::string describe(const dim3 &d)
{
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

static void record_failure(Scheduler &s, const std::string &what)
{
    if (s.failed)
        return;
    s.failed = true;
    s.failure = std::string("tp_emu: kernel ") + s.kernel + ", block " + describe(s.grid.block_idx) + ": " + what;
}

// Called on a fiber, which is then abandoned: nothing on its stack may own
// heap memory when it switches out (no destructor would run).
void fail_in_kernel(const char *fmt, ...)
{
    char buf[640];
    int len = 0;
    if (cur_fiber)
        len = snprintf(buf, sizeof buf, "thread (%u,%u,%u): ", cur_fiber->tid.x, cur_fiber->tid.y, cur_fiber->tid.z);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, sizeof buf - (size_t)len, fmt, ap);
    va_end(ap);
    record_failure(*sched, buf);
    if (cur_fiber)
        switch_out(true); // the scheduler abandons the block
    fprintf(stderr, "%s\n", buf);
    abort();
}

// ---- barriers and collectives --------------------------------------------------

static Scheduler &in_kernel(const char *what)
{
    if (!sched || !cur_fiber) {
        fprintf(stderr, "tp_emu: %s called outside a kernel\n", what);
        abort();
    }
    return *sched;
}

void yield_point()
{
    if (!sched || !cur_fiber)
        return; // host code (a test) may use the atomics directly
    Scheduler &s = *sched;
    make_runnable(s, cur_fiber->linear);
    switch_out(false);
}

static dim3 block_of(const dim3 &grid, uint64_t id)
{
    return dim3((unsigned)(id % grid.x), (unsigned)(id / grid.x % grid.y),
                (unsigned)(id / ((uint64_t)grid.x * grid.y)));
}

// A poll of the count, as an atomic; while it is short, the thread waits
// AT_COUNT and the scheduler runs the rest of its block, then other blocks,
// and makes it runnable once the count is reached (wake_counting).
void wait_count_at_least(const int *count, int at_least)
{
    Scheduler &s = in_kernel("tp_block_wait_turn");
    Fiber &f = *cur_fiber;
    yield_point();
    while (*count < at_least) {
        f.state = AT_COUNT;
        f.count = count;
        f.at_least = at_least;
        s.counting.push_back(f.linear);
        switch_out(false);
    }
    auto raiser = raised_by.find(count);
    if (raiser != raised_by.end() && raiser->second > s.block) {
        const dim3 me = s.grid.block_idx, them = block_of(s.grid.grid, raiser->second);
        fail_in_kernel("block (%u,%u,%u) waited for block (%u,%u,%u), which a GPU dispatches after it (a higher "
                       "linear index): a grid larger than the GPU holds at once would deadlock (the count at %p, "
                       "waited for %d)",
                       me.x, me.y, me.z, them.x, them.y, them.z, (const void *)count, at_least);
    }
    // a turn is taken once: past it, two blocks took one turn or one was skipped
    if (*count != at_least)
        fail_in_kernel("the count at %p holds %d when its turn %d comes: a turn taken twice, or one skipped",
                       (const void *)count, *count, at_least);
}

// The raise, then, one time in two, the block is preempted: other blocks
// (those waiting for the count among them) run before its other threads
// go on, which shows a raise before the block's own writes are done.
void raise_count(int *count, int by)
{
    Scheduler &s = in_kernel("tp_block_pass_turn");
    yield_point();
    *count += by;
    uint64_t &top = raised_by.emplace(count, s.block).first->second;
    top = std::max(top, s.block);
    s.preempted = random_below(2) == 0;
    yield_point();
}

// whether block s was preempted, or one of its threads waits for a count
// that has been reached
static bool may_resume(const Scheduler &s)
{
    if (!s.runnable.empty())
        return true;
    for (int id : s.counting) {
        const Fiber &f = s.fibers[(size_t)id];
        if (*f.count >= f.at_least)
            return true;
    }
    return false;
}

// makes those threads runnable; false when there are none
static bool wake_counting(Scheduler &s)
{
    bool woke = false;
    for (size_t i = 0; i < s.counting.size();) {
        Fiber &f = s.fibers[(size_t)s.counting[i]];
        if (*f.count < f.at_least) {
            i++;
            continue;
        }
        f.state = RUNNABLE;
        make_runnable(s, f.linear);
        s.counting[i] = s.counting.back();
        s.counting.pop_back();
        woke = true;
    }
    return woke;
}

static void wait_at_barrier()
{
    Scheduler &s = in_kernel("__syncthreads");
    Fiber &f = *cur_fiber;
    f.state = AT_BARRIER;
    if (++s.at_barrier == s.nthreads) { // everyone is here: release the block
        s.runnable.clear(); // empty: every thread was waiting here
        for (int i = 0; i < s.nthreads; i++) { // the pool may hold more fibers than the block
            s.fibers[(size_t)i].state = RUNNABLE;
            s.runnable.push_back(i);
        }
        s.at_barrier = 0;
        new_phase(s);
    }
    switch_out(false);
}

// The lane whose value lane `l` reads, or -1 for its own value (the source
// lies beyond its width-segment). PTX shfl: segments of `width` lanes;
// idx wraps within the segment, up/down clamp to it, xor may read earlier
// segments but not later ones.
static int source_lane(CollectiveOp op, int l, int param, int width)
{
    const int seg = l & ~(width - 1);
    switch (op) {
    case SHFL_IDX: return seg + (param & (width - 1));
    case SHFL_UP: return (l - param) < seg ? -1 : l - param;
    case SHFL_DOWN: return (l + param) >= seg + width ? -1 : l + param;
    case SHFL_XOR: {
        int src = l ^ param;
        return src >= seg + width ? -1 : src;
    }
    default: return -1;
    }
}

// every lane of c.mask has arrived: compute each one's result, wake them
static void complete(Scheduler &s, int warp, const Collective &c)
{
    Fiber *lanes = &s.fibers[(size_t)warp * 32];
    if (c.op == WARP_CALL && lanes[0].call) { // the mask is full
        void *args[32];
        for (int l = 0; l < 32; l++)
            args[l] = reinterpret_cast<void *>(lanes[l].value);
        lanes[0].call(args);
    }
    uint64_t ballot = 0;
    for (int l = 0; l < 32; l++)
        if (c.mask >> l & 1)
            ballot |= (uint64_t)(lanes[l].value != 0) << l;
    for (int l = 0; l < 32; l++) {
        if (!(c.mask >> l & 1))
            continue;
        Fiber &f = lanes[l];
        switch (c.op) {
        case SHFL_IDX:
        case SHFL_UP:
        case SHFL_DOWN:
        case SHFL_XOR: {
            int src = source_lane(c.op, l, f.param, f.width);
            if (src < 0)
                f.result = f.value;
            else if (src < 32 && (c.mask >> src & 1))
                f.result = lanes[src].value;
            else
                f.result = ~0ull; // a lane outside mask: undefined, so poison
            break;
        }
        case BALLOT: f.result = ballot; break;
        case ALL: f.result = (ballot & c.mask) == c.mask; break;
        case ANY: f.result = ballot != 0; break;
        case SYNCWARP:
        case WARP_CALL: f.result = 0; break;
        }
        f.state = RUNNABLE;
        make_runnable(s, f.linear);
    }
}

uint64_t collective(CollectiveOp op, const char *name, unsigned mask, uint64_t value, int param, int width,
                   void (*call)(void *const lanes[32]))
{
    Scheduler &s = in_kernel(name);
    Fiber &f = *cur_fiber;
    Warp &w = s.warps[f.warp];
    if (!(mask >> f.lane & 1))
        fail_in_kernel("%s with mask 0x%08x, which does not include the calling lane %d", name, mask, f.lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail_in_kernel("%s with width %d (a power of two up to 32)", name, width);
    if (unsigned missing = mask & ~w.exists)
        fail_in_kernel("%s with mask 0x%08x: lane %d does not exist (the block's last warp is partial)", name,
                       mask, __builtin_ctz(missing));
    if (unsigned gone = mask & w.exited)
        fail_in_kernel("%s with mask 0x%08x: lane %d has exited", name, mask, __builtin_ctz(gone));
    f.op = op;
    f.op_name = name;
    f.mask = mask;
    f.value = value;
    f.param = param;
    f.width = width;
    f.call = call;
    f.state = AT_WARP;
    // join the open collective over the same lanes, or open one
    Collective *c = nullptr;
    for (Collective &o : w.open) {
        if (o.mask == mask && !(o.arrived >> f.lane & 1)) {
            c = &o;
            break;
        }
        if (o.mask & mask)
            fail_in_kernel("%s with mask 0x%08x while lanes 0x%08x of the warp wait in %s with mask 0x%08x", name,
                           mask, o.arrived, o.name, o.mask);
    }
    if (!c) {
        w.open.push_back({op, name, mask, 0});
        c = &w.open.back();
    }
    if (c->op != op || (op == WARP_CALL && strcmp(c->name, name)))
        fail_in_kernel("lane %d calls %s while lanes 0x%08x of its warp wait in %s (mask 0x%08x)", f.lane, name,
                       c->arrived, c->name, mask);
    c->arrived |= 1u << f.lane;
    if (c->arrived == mask) {
        Collective done = *c;
        w.open.erase(w.open.begin() + (c - w.open.data()));
        complete(s, f.warp, done);
    }
    switch_out(false);
    return f.result;
}

void warp_call(const char *name, void *args, void (*fn)(void *const lanes[32]))
{
    collective(WARP_CALL, name, 0xffffffffu, reinterpret_cast<uint64_t>(args), 0, 32, fn);
}

static void do_copy(const AsyncCopy &c)
{
    std::memcpy(c.dst, c.src, c.src_bytes);
    std::memset((char *)c.dst + c.src_bytes, 0, c.n - c.src_bytes);
}

// The hardware may do a copy at any time between its issue and the wait
// that completes it. Here each copy is done either at once, so a thread
// that overwrites what others still read shows, or as late as the wait,
// so a thread that reads without waiting sees the poison still there.
void cp_async(void *dst, const void *src, size_t n, size_t src_bytes)
{
    in_kernel("cp.async");
    if ((uintptr_t)dst % n || (uintptr_t)src % n)
        fail_in_kernel("cp.async of %zu bytes from %p to %p: both must be %zu-byte aligned", n, src, dst, n);
    if (src_bytes > n)
        fail_in_kernel("cp.async: src-size %zu exceeds the copy's %zu bytes", src_bytes, n);
    const AsyncCopy c = {dst, src, n, src_bytes};
    if (random_below(2))
        do_copy(c);
    else
        cur_fiber->open_copies.push_back(c);
}

void cp_async_commit(void)
{
    Fiber &f = *cur_fiber;
    f.copy_groups.push_back(std::move(f.open_copies));
    f.open_copies.clear();
}

void cp_async_wait(int pending)
{
    Fiber &f = *cur_fiber;
    while ((int)f.copy_groups.size() > pending) {
        for (const AsyncCopy &c : f.copy_groups.front())
            do_copy(c);
        f.copy_groups.erase(f.copy_groups.begin());
    }
}

void *shared_static(const void *site, size_t bytes, size_t align)
{
    Scheduler &s = in_kernel("a __shared__ declaration");
    for (auto &e : s.statics)
        if (e.first == site)
            return s.arena + e.second;
    size_t off = (s.used + align - 1) & ~(align - 1);
    const size_t statics = off + bytes - s.dynamic_bytes;
    if (statics > kSharedLimit)
        fail_in_kernel("static shared memory: %zu bytes exceed 48 KiB, which no opt-in raises: use dynamic shared "
                       "memory",
                       statics);
    if (statics > s.static_limit && s.opted_in < 0)
        fail_in_kernel("shared memory: %zu bytes (dynamic %zu) exceed the 48 KiB a block gets without opt-in: "
                       "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first",
                       off + bytes, s.dynamic_bytes);
    if (statics > s.static_limit)
        fail_in_kernel("shared memory: %zu static bytes and the %ld dynamic the kernel opted in to exceed the %zu "
                       "bytes a block may have with opt-in (sm_80): opt in to less",
                       statics, s.opted_in, kSharedOptinLimit);
    s.statics.push_back({site, off});
    s.used = off + bytes;
    return s.arena + off;
}

void *shared_dynamic()
{
    Scheduler &s = in_kernel("extern __shared__");
    return s.arena; // dynamic memory first, the static declarations after it
}

static void diagnose_deadlock(Scheduler &s)
{
    int waiting_warp = 0;
    const Fiber *first_exit = nullptr, *first_warp = nullptr;
    for (int i = 0; i < s.nthreads; i++) {
        const Fiber &f = s.fibers[(size_t)i];
        if (f.state == EXITED && !first_exit)
            first_exit = &f;
        if (f.state == AT_WARP) {
            waiting_warp++;
            if (!first_warp)
                first_warp = &f;
        }
    }
    char buf[512];
    if (s.at_barrier > 0 && s.exited > 0)
        snprintf(buf, sizeof buf,
                 "__syncthreads not reached by all threads: %d wait at __syncthreads, %d have exited (first: "
                 "thread %s)",
                 s.at_barrier, s.exited, describe(first_exit->tid).c_str());
    else if (first_warp)
        snprintf(buf, sizeof buf,
                 "deadlock: thread %s waits in %s (mask 0x%08x) for lanes that never arrive (%d threads at "
                 "__syncthreads, %d exited)",
                 describe(first_warp->tid).c_str(), first_warp->op_name, first_warp->mask, s.at_barrier,
                 s.exited);
    else
        snprintf(buf, sizeof buf, "deadlock: %d threads at __syncthreads, %d in warp collectives", s.at_barrier,
                 waiting_warp);
    record_failure(s, buf);
}

// ---- launching ------------------------------------------------------------------

// block `id` of the launch s is set up for, from its start
static void start_block(Scheduler &s, uint64_t id)
{
    s.block = id;
    s.grid.block_idx = block_of(s.grid.grid, id);
    std::memset(s.arena, 0xff, s.dynamic_bytes + s.static_limit); // poison: NaN as float and bf16
    s.used = s.dynamic_bytes;
    s.statics.clear();
    s.exited = s.at_barrier = 0;
    s.runnable.clear();
    s.counting.clear();
    for (Warp &w : s.warps) {
        w.exited = 0;
        w.open.clear();
    }
    const dim3 b = s.grid.block;
    for (int i = 0; i < s.nthreads; i++) {
        Fiber &f = s.fibers[(size_t)i];
        f.tid = dim3((unsigned)i % b.x, (unsigned)i / b.x % b.y, (unsigned)i / (b.x * b.y));
        f.linear = i;
        f.warp = i / 32;
        f.lane = i % 32;
        f.state = RUNNABLE;
        init_fiber(f);
        s.runnable.push_back(i);
    }
    new_phase(s);
}

// Runs block s until it has exited, failed, or nothing in it can run while
// threads wait for counts not reached yet (it is suspended). A thread at a
// barrier then is no deadlock of its own: the waiting threads may still
// arrive, unless a thread has exited.
static void run_block(Scheduler &s)
{
    sched = &s;
    cur_grid = &s.grid;
    s.preempted = false;
    do {
        while (!s.runnable.empty() && !s.failed && !s.preempted)
            switch_to(s, s.fibers[(size_t)pick(s)]);
    } while (!s.failed && !s.preempted && wake_counting(s)); // a count its own threads raised
    if (!s.failed && !s.preempted && s.exited != s.nthreads &&
        (s.counting.empty() || (s.at_barrier > 0 && s.exited > 0)))
        diagnose_deadlock(s);
}

// Whether block s wrote shared memory past what it may use: the dynamic
// bytes its launch asked for, then its static declarations. Those bytes
// stay poisoned in the arena here; on a GPU the writes would reach another
// block's memory or fault. *at: the first such byte.
static bool wrote_past_shared(const Scheduler &s, size_t *at)
{
    static const std::vector<unsigned char> poison(kSharedOptinLimit, 0xff);
    const size_t ranges[2][2] = {{s.dynamic_asked, s.dynamic_bytes}, {s.used, s.dynamic_bytes + s.static_limit}};
    for (const auto &r : ranges)
        if (r[1] > r[0] && std::memcmp(s.arena + r[0], poison.data(), r[1] - r[0]) != 0) {
            *at = r[0];
            while (s.arena[*at] == 0xff)
                ++*at;
            return true;
        }
    return false;
}

// Every block left waits for a count no block can raise any more: the
// failure names the lowest block's first waiting thread, and is that block's.
static const Scheduler *diagnose_deadlock_across_blocks(const std::vector<Scheduler *> &live)
{
    Scheduler &s = **std::min_element(live.begin(), live.end(),
                                      [](const Scheduler *a, const Scheduler *b) { return a->block < b->block; });
    const Fiber &f = s.fibers[(size_t)*std::min_element(s.counting.begin(), s.counting.end())];
    char buf[512];
    snprintf(buf, sizeof buf,
             "deadlock across blocks: thread %s waits for the count at %p to reach %d, and it holds %d (%zu "
             "blocks wait for counts, none of them reached, and no block is left to start)",
             describe(f.tid).c_str(), (const void *)f.count, f.at_least, *f.count, live.size());
    record_failure(s, buf);
    return &s;
}

// a refused launch or runtime call
static cudaError_t fail_call(cudaError_t err, const std::string &why)
{
    last_failure = why;
    fprintf(stderr, "%s\n", why.c_str());
    last_error = err;
    return err;
}

} // namespace tp_emu

using namespace tp_emu;

// ---- which kernels ran (tp_emu_launches_of, TP_EMU_LAUNCH_LOG)

namespace {
std::mutex launches_lock;
std::map<std::string, size_t> launches; // by kernel name

void count_launch(const char *name)
{
    std::lock_guard<std::mutex> hold(launches_lock);
    if (launches[name]++)
        return;
    const char *log = getenv("TP_EMU_LAUNCH_LOG");
    if (!log || !*log)
        return;
    FILE *f = fopen(log, "a");
    bool ok = f && fprintf(f, "%s\n", name) >= 0;
    if (f && fclose(f))
        ok = false;
    if (!ok) {
        fprintf(stderr, "tp_emu: cannot append to TP_EMU_LAUNCH_LOG %s\n", log);
        abort();
    }
}

// the dynamic shared memory each kernel (by address) opted in to
std::mutex optin_lock;
std::unordered_map<const void *, long> optin_bytes;
} // namespace

size_t tp_emu_launches_of(const char *part)
{
    std::lock_guard<std::mutex> hold(launches_lock);
    size_t n = 0;
    for (const auto &kv : launches)
        if (kv.first.find(part) != std::string::npos)
            n += kv.second;
    return n;
}

cudaError_t cudaFuncSetAttribute(const void *func, cudaFuncAttribute attr, int value)
{
    if (!func)
        return fail_call(cudaErrorInvalidDeviceFunction, "tp_emu: cudaFuncSetAttribute of no kernel");
    std::string bad;
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
        bad = "attribute " + std::to_string((int)attr) +
              ": the emulator has only cudaFuncAttributeMaxDynamicSharedMemorySize";
    else if (value < 0 || (size_t)value > kSharedOptinLimit)
        bad = std::to_string(value) + " bytes of dynamic shared memory: a block may have 0 to " +
              std::to_string(kSharedOptinLimit) + " (sm_80, with opt-in)";
    if (!bad.empty())
        return fail_call(cudaErrorInvalidValue, "tp_emu: cudaFuncSetAttribute: " + bad);
    std::lock_guard<std::mutex> hold(optin_lock);
    optin_bytes[func] = value;
    return cudaSuccess;
}

cudaError_t tp_emu_launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t shmem,
                          const std::function<void()> &body)
{
    if (sched) {
        fprintf(stderr, "tp_emu: %s launched from inside a kernel\n", name);
        abort();
    }
    const uint64_t nthreads = (uint64_t)block.x * block.y * block.z;
    const uint64_t nblocks = (uint64_t)grid.x * grid.y * grid.z;
    long opted_in = -1;
    if (kernel) {
        std::lock_guard<std::mutex> hold(optin_lock);
        auto it = optin_bytes.find(kernel);
        if (it != optin_bytes.end())
            opted_in = it->second;
    }
    std::string bad;
    if (nblocks == 0 || nthreads == 0)
        bad = "an empty grid or block";
    else if (block.x > 1024 || block.y > 1024 || block.z > 64 || nthreads > 1024)
        bad = "more than 1024 threads per block";
    else if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
        bad = "grid.x > 2^31-1 or grid.y/z > 65535";
    else if (opted_in < 0 && shmem > kSharedLimit)
        bad = "dynamic shared memory exceeds the 48 KiB a block gets without opt-in: cudaFuncSetAttribute(kernel, "
              "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) first";
    else if (opted_in >= 0 && shmem > (size_t)opted_in)
        bad = "dynamic shared memory exceeds the " + std::to_string(opted_in) +
              " bytes the kernel opted in to: cudaFuncSetAttribute(kernel, "
              "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) with more";
    if (!bad.empty())
        return fail_call(cudaErrorInvalidConfiguration, std::string("tp_emu: kernel ") + name + ": invalid launch: " +
                                                             describe(grid) + " x " + describe(block) + ", " +
                                                             std::to_string(shmem) + " bytes shared: " + bad);

    count_launch(name);
    const uint64_t serial = ++launch_serial;
    raised_by.clear();
    // schedulers (fibers and their stacks) of no live block, reused across
    // blocks and launches: a launch whose blocks never wait uses one. Never
    // freed, and a pointer, so that they stay reachable until the end.
    static thread_local std::vector<Scheduler *> *pool = nullptr;
    if (!pool)
        pool = new std::vector<Scheduler *>();
    std::vector<Scheduler *> &idle = *pool;
    auto take_scheduler = [&]() -> Scheduler & {
        if (idle.empty())
            idle.push_back(new Scheduler());
        Scheduler &s = *idle.back();
        idle.pop_back();
        if (s.launch == serial)
            return s;
        s.launch = serial;
        s.nthreads = (int)nthreads;
        if (s.fibers.size() < nthreads) {
            s.fibers.resize(nthreads);
            s.priority.resize(nthreads);
        }
        s.warps.assign((nthreads + 31) / 32, Warp());
        for (uint64_t i = 0; i < nthreads; i++)
            s.warps[i / 32].exists |= 1u << (i % 32);
        s.body = &body;
        s.kernel = name;
        s.failed = false;
        s.failure.clear();
        s.dynamic_asked = shmem;
        s.dynamic_bytes = (shmem + 127) & ~(size_t)127;
        s.opted_in = opted_in;
        // statics: 48 KiB of their own, and as much as the opt-in leaves
        s.static_limit = opted_in < 0 ? kSharedLimit - s.dynamic_bytes
                                      : std::min(kSharedLimit, kSharedOptinLimit - (size_t)opted_in);
        const size_t need = (s.dynamic_bytes + s.static_limit + 127) & ~(size_t)127;
        if (s.arena_size < need) {
            free(s.arena);
            s.arena = static_cast<unsigned char *>(aligned_alloc(128, need));
            if (!s.arena) {
                fprintf(stderr, "tp_emu: out of memory allocating %zu bytes of shared memory\n", need);
                abort();
            }
            s.arena_size = need;
        }
        s.grid.grid = grid;
        s.grid.block = block;
        return s;
    };

    // blocks start in a random order: no block may rely on another having run
    std::vector<uint64_t> order(nblocks);
    for (uint64_t i = 0; i < nblocks; i++)
        order[i] = i;
    for (uint64_t i = nblocks; i > 1; i--)
        std::swap(order[i - 1], order[random_below(i)]);

    // Blocks run one at a time, each until it exits or is suspended waiting
    // for a count. Next, drawn at random: a suspended block whose count has
    // been reached, or the next block to start.
    std::vector<Scheduler *> live, ready; // started, not exited; of those, the ones that may resume
    uint64_t started = 0;
    std::string failure;
    for (;;) {
        ready.clear();
        for (Scheduler *b : live)
            if (may_resume(*b))
                ready.push_back(b);
        // a block to start takes its scheduler's stacks, and new ones for
        // the threads it has none for: idle schedulers' go first
        uint64_t have = 0;
        for (size_t i = 0; !idle.empty() && i < idle.back()->fibers.size() && i < nthreads; i++)
            have += idle.back()->fibers[i].stack != nullptr;
        // (then those of threads past this launch's block, left by wider blocks)
        auto over = [&] { return mapped_stacks + nthreads - have > kMaxWaitingThreads; };
        for (size_t i = 0; i + 1 < idle.size() && over(); i++)
            release_stacks(idle[i]->fibers);
        for (size_t i = 0; i < live.size() && over(); i++)
            release_stacks(live[i]->fibers, nthreads);
        if (!idle.empty() && over())
            release_stacks(idle.back()->fibers, nthreads);
        const bool room = live.empty() || !over();
        const size_t choices = ready.size() + (started < nblocks && room);
        if (choices == 0) {
            if (started < nblocks)
                failure = std::string("tp_emu: kernel ") + name + ": " + std::to_string(live.size()) +
                          " blocks of " + std::to_string(nthreads) + " threads wait at once, and the emulator " +
                          "holds at most " + std::to_string(kMaxWaitingThreads) +
                          " waiting threads (each keeps its stack): a smaller grid";
            break;
        }
        const size_t k = choices == 1 ? 0 : random_below(choices);
        Scheduler *b;
        if (k < ready.size()) {
            b = ready[k];
            wake_counting(*b);
        } else {
            b = &take_scheduler();
            start_block(*b, order[started++]);
            live.push_back(b);
        }
        run_block(*b);
        if (b->failed) {
            failure = b->failure;
            break;
        }
        if (size_t at; b->exited == b->nthreads && wrote_past_shared(*b, &at)) {
            failure = std::string("tp_emu: kernel ") + name + ", block " + describe(b->grid.block_idx) +
                      ": wrote shared memory byte " + std::to_string(at) + ", past the " +
                      std::to_string(b->dynamic_asked) + " dynamic bytes its launch asked for and its " +
                      std::to_string(b->used - b->dynamic_bytes) + " static ones";
            break;
        }
        if (b->exited == b->nthreads) {
            *std::find(live.begin(), live.end(), b) = live.back();
            live.pop_back();
            idle.push_back(b);
        }
    }
    if (failure.empty() && !live.empty())
        failure = diagnose_deadlock_across_blocks(live)->failure;
    sched = nullptr;
    cur_grid = nullptr;
    for (Scheduler *b : live) // a failed launch's blocks, abandoned (start_block sets a scheduler up afresh)
        idle.push_back(b);
    if (!failure.empty())
        return fail_call(cudaErrorLaunchFailure, failure);
    return cudaSuccess;
}

void __syncthreads(void) { wait_at_barrier(); }

unsigned __activemask(void)
{
    Scheduler &s = in_kernel("__activemask");
    const Warp &w = s.warps[cur_fiber->warp];
    return w.exists & ~w.exited;
}

const char *tp_emu_last_failure(void) { return last_failure.c_str(); }

void tp_emu_set_seed(uint64_t seed)
{
    rng_state = seed;
    rng_seeded = true;
}

uint64_t tp_emu_switches(void) { return switches; }

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t err)
{
    switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t)
{
    if (bytes)
        std::memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind, cudaStream_t)
{
    if (bytes)
        std::memmove(dst, src, bytes);
    return cudaSuccess;
}

// ---- "device" memory ------------------------------------------------------------

namespace {
constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;
struct AllocHeader {
    size_t bytes;
    uint64_t magic;
    unsigned char pad[kGuard - 16];
};
static_assert(sizeof(AllocHeader) == kGuard, "header is one guard span");
constexpr uint64_t kMagic = 0x7470656d75616c6cull;
} // namespace

void *tp_emu_alloc(size_t bytes)
{
    // header (size + magic) | guard | payload | guard, payload 128-aligned
    const size_t front = 128;
    unsigned char *raw = (unsigned char *)aligned_alloc(128, front + ((bytes + kGuard + 127) & ~(size_t)127));
    if (!raw) {
        fprintf(stderr, "tp_emu: out of memory allocating %zu bytes\n", bytes);
        abort();
    }
    AllocHeader *h = (AllocHeader *)raw;
    h->bytes = bytes;
    h->magic = kMagic;
    std::memset(raw + sizeof *h, kGuardByte, front - sizeof *h);
    std::memset(raw + front, 0xff, bytes);
    std::memset(raw + front + bytes, kGuardByte, kGuard);
    return raw + front;
}

bool tp_emu_free(void *p)
{
    if (!p)
        return true;
    unsigned char *raw = (unsigned char *)p - 128;
    AllocHeader *h = (AllocHeader *)raw;
    if (h->magic != kMagic) {
        fprintf(stderr, "tp_emu: tp_emu_free(%p): not from tp_emu_alloc, or its header was overwritten\n", p);
        return false;
    }
    bool ok = true;
    for (size_t i = sizeof *h; i < 128; i++)
        ok &= raw[i] == kGuardByte;
    for (size_t i = 0; i < kGuard; i++)
        ok &= raw[128 + h->bytes + i] == kGuardByte;
    if (!ok)
        fprintf(stderr, "tp_emu: buffer %p of %zu bytes: a kernel wrote outside it (guard bytes changed)\n", p,
                h->bytes);
    free(raw);
    return ok;
}
