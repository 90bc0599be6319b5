// standin.cc: host stand-ins for the CUDA runtime, cuBLAS and NCCL calls
// of runtime/backends/cuda/backend_cuda.c and runtime/backends/cuda/comm_nccl.c, so the whole CUDA
// backend — executor, backend table, cuBLAS path, NCCL communicator and its
// watchdog — runs on a machine without a GPU (tprun_emulated). Test-only.
//
//   memory      "device" memory is host memory from tests/runtime/cuda_emu's
//               tp_emu_alloc: filled with 0xFF bytes (NaN as float or bf16),
//               with guard bytes that cudaFree checks. Every copy, memset,
//               GEMM operand and collective buffer is checked against the
//               allocations: a host pointer where device memory belongs, a
//               copy in the wrong direction or an operand running past its
//               allocation is an error (cudaErrorInvalidValue,
//               CUBLAS_STATUS_INVALID_VALUE, ncclInvalidArgument) with a
//               note on stderr.
//   cuBLAS      OpenBLAS sgemm; bf16 operands widened to fp32 and the
//               result rounded to bf16 once (CUBLAS_COMPUTE_32F).
//   NCCL        MPI: ncclCommInitRank's communicator is a duplicate of
//               MPI_COMM_WORLD (NCCL rank = MPI rank) and checks that every
//               rank passed the same ncclUniqueId made by ncclGetUniqueId;
//               ncclCommSplit's is MPI_Comm_split of its parent's, so a
//               group's collectives run over the group only. Before each
//               collective runs, the ranks of its communicator compare
//               the call, count, type and operation: ranks issuing
//               different collectives on one communicator (real NCCL
//               hangs or corrupts memory) get ncclInvalidUsage as the
//               communicator's asynchronous error, with a note.
//               bf16 reductions sum in fp32 and round once.
//   streams     memory copies, memsets and GEMMs run when called, in stream
//               order. NCCL operations are *queued* on their stream and run
//               only when something waits for them: cudaStreamWaitEvent on
//               an event recorded after them, cudaStreamSynchronize,
//               cudaEventSynchronize, cudaDeviceSynchronize, ncclCommFinalize.
//               So a compute stream that does not wait for a collective reads
//               its output before it exists (0xFF poison or stale data) and
//               the logits show it. The other direction is checked when a
//               collective is queued: its stream must have waited (through
//               events) for every stand-in-visible operation queued on every
//               other stream, else ncclInvalidUsage. Kernel launches go
//               through the emulator and are invisible here, so an event
//               recorded before the last kernel but after the last copy or
//               GEMM is not caught.
//   events      cudaEventQuery is lock-free (the NCCL watchdog thread calls
//               it while the main thread may be inside a collective).
//
// Environment (tests):
//   TP_STANDIN_DEVICES=N          devices reported (default 8; 0: no device)
//   TP_STANDIN_NO_DRIVER=1        cudaErrorInsufficientDriver, as without libcuda.so
//   TP_STANDIN_NCCL_STALL_RANK=r  rank r (of MPI_COMM_WORLD) never finishes
//                                 its first collective
//   TP_STANDIN_NCCL_ERROR_RANK=r  rank r's communicator reports ncclRemoteError
//                                 asynchronously after its first collective
//   TP_STANDIN_NCCL_FAULT_COMM=k  the two above apply to the k-th communicator
//                                 the rank makes (from 0, ncclCommInitRank's;
//                                 default: every one)
//   TP_STANDIN_GEMM_FAIL=r:n      rank r's n-th GEMM (from 1) returns
//                                 CUBLAS_STATUS_EXECUTION_FAILED
//   TP_STANDIN_DEVICE_PEAK=path   each process appends to path, when it
//                                 exits, the most device memory it held at
//                                 once (bytes of cudaMalloc not yet freed)
#include "cublas_v2.h"
#include "cuda_runtime.h"
#include "nccl.h"

#include <atomic>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <cblas.h>
#include <fcntl.h>
#include <mpi.h>
#include <time.h>
#include <unistd.h>

// tests/runtime/cuda_emu/cuda_emu.cpp: 0xFF-filled, guarded allocations
void *tp_emu_alloc(size_t bytes);
bool tp_emu_free(void *p);

namespace {

void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void note(const char *fmt, ...)
{
    char msg[1000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tprun stand-in: %s\n", msg);
}

int env_int(const char *name, int fallback)
{
    const char *s = getenv(name);
    return s && *s ? atoi(s) : fallback;
}

// ---- devices and errors --------------------------------------------------

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current_device = 0;

cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

// cudaSuccess when the stand-in has devices, else what CUDA says
cudaError_t driver_state(int *count)
{
    if (env_int("TP_STANDIN_NO_DRIVER", 0))
        return cudaErrorInsufficientDriver;
    int n = env_int("TP_STANDIN_DEVICES", 8);
    if (count)
        *count = n;
    return n > 0 ? cudaSuccess : cudaErrorNoDevice;
}

// ---- device memory -------------------------------------------------------

std::mutex alloc_mu;
std::map<const char *, size_t> allocs;   // base -> bytes
size_t live_bytes, peak_bytes;           // of allocs, now and at most
bool peak_reported;                      // append_device_peak registered, or not wanted

void append_device_peak()
{
    const char *path = getenv("TP_STANDIN_DEVICE_PEAK");
    FILE *f = fopen(path, "a");
    bool ok = f && fprintf(f, "%zu\n", peak_bytes) >= 0;
    if (f && fclose(f))
        ok = false;
    if (!ok)
        note("cannot append to TP_STANDIN_DEVICE_PEAK %s", path);
}

// Counts an allocation of cudaMalloc (bytes > 0) or a release (< 0);
// called under alloc_mu.
void count_device_bytes(long long bytes)
{
    if (!peak_reported) {
        peak_reported = true;
        const char *path = getenv("TP_STANDIN_DEVICE_PEAK");
        if (path && *path && atexit(append_device_peak))
            note("cannot report the device memory peak to %s", path);
    }
    live_bytes = (size_t)((long long)live_bytes + bytes);
    if (live_bytes > peak_bytes)
        peak_bytes = live_bytes;
}

// [p, p + bytes) lies inside one allocation
bool on_device(const void *p, size_t bytes)
{
    std::lock_guard<std::mutex> lock(alloc_mu);
    const char *c = static_cast<const char *>(p);
    auto it = allocs.upper_bound(c);
    if (it == allocs.begin())
        return false;
    --it;
    return c >= it->first && c + bytes <= it->first + it->second;
}

bool touches_device(const void *p) { return on_device(p, 1); }

const char *kind_name(cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    default: return "Default";
    }
}

bool copy_ok(const char *call, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    if (!bytes || kind == cudaMemcpyDefault)
        return true;
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    bool ok = (dst_dev ? on_device(dst, bytes) : !touches_device(dst)) &&
              (src_dev ? on_device(src, bytes) : !touches_device(src));
    if (!ok)
        note("%s(%s, %zu bytes): the %s %p is %s", call, kind_name(kind), bytes,
             (dst_dev ? on_device(dst, bytes) : !touches_device(dst)) ? "source" : "destination",
             (dst_dev ? on_device(dst, bytes) : !touches_device(dst)) ? src : static_cast<const void *>(dst),
             "not where the copy kind says (device memory, whole, or host memory)");
    return ok;
}

// ---- streams and events --------------------------------------------------

struct Deferred {
    long seq;
    std::function<void()> run;
};

}  // namespace

struct CUstream_st {
    int id = 0;
    long enq = 0;                          // operations queued
    std::atomic<long> done{0};             // operations run (in order)
    long last_work = 0;                    // position of the last copy / memset / GEMM / collective
    std::deque<Deferred> pending;          // collectives not run yet
    std::map<CUstream_st *, long> clock;   // how far this stream has waited for each other one
};

struct CUevent_st {
    std::atomic<CUstream_st *> stream{nullptr};
    std::atomic<long> seq{0};
    std::map<CUstream_st *, long> clock;   // the stream's clock when recorded, itself included
};

namespace {

CUstream_st legacy_stream;                 // stream 0
std::vector<CUstream_st *> streams = {&legacy_stream};
std::set<CUevent_st *> events;
int next_stream_id = 1;

CUstream_st *stream_of(cudaStream_t s) { return s ? s : &legacy_stream; }

// Run the queued collectives of st up to position upto.
void flush(CUstream_st *st, long upto)
{
    while (!st->pending.empty() && st->pending.front().seq <= upto) {
        Deferred d = std::move(st->pending.front());
        st->pending.pop_front();
        d.run();
        st->done.store(d.seq);
    }
    st->done.store(st->pending.empty() ? st->enq : st->pending.front().seq - 1);
}

void flush_all()
{
    for (CUstream_st *st : streams)
        flush(st, st->enq);
}

// An operation that runs now, in stream order: whatever is queued before
// it runs first.
void run_now(CUstream_st *st, bool work)
{
    flush(st, st->enq);
    st->enq++;
    st->done.store(st->enq);
    if (work)
        st->last_work = st->enq;
}

// ---- bf16 ----------------------------------------------------------------

uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float f32_of(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

}  // namespace

// ==== CUDA runtime ==========================================================

extern "C" {

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 0;
    cudaError_t e = driver_state(count);
    if (e != cudaSuccess)
        *count = 0;
    return e == cudaSuccess ? cudaSuccess : fail(e);
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    int n = 0;
    cudaError_t e = driver_state(&n);
    if (e != cudaSuccess)
        return fail(e);
    if (device < 0 || device >= n)
        return fail(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "tprun host stand-in %d", device);
    prop->totalGlobalMem = (size_t)1 << 30;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
    int n = 0;
    cudaError_t e = driver_state(&n);
    if (e != cudaSuccess)
        return fail(e);
    if (device < 0 || device >= n)
        return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    *device = current_device;
    return cudaSuccess;
}

// Device d of the stand-in is on bus d: processes of one job that take the
// same device number share a device, as on one machine.
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    int n = 0;
    cudaError_t e = driver_state(&n);
    if (e != cudaSuccess)
        return fail(e);
    if (device < 0 || device >= n || len < 13)
        return fail(cudaErrorInvalidValue);
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", device);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    flush_all();
    return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
    *least = 0;
    *greatest = -5;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = nullptr;
    cudaError_t e = driver_state(nullptr);
    if (e != cudaSuccess)
        return fail(e);
    void *q = tp_emu_alloc(bytes ? bytes : 1);
    if (!q)
        return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(alloc_mu);
    allocs[static_cast<const char *>(q)] = bytes ? bytes : 1;
    count_device_bytes((long long)(bytes ? bytes : 1));
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    flush_all();    // cudaFree waits for the device
    {
        std::lock_guard<std::mutex> lock(alloc_mu);
        auto it = allocs.find(static_cast<const char *>(p));
        if (it == allocs.end()) {
            note("cudaFree(%p): not an allocation of cudaMalloc", p);
            return fail(cudaErrorInvalidValue);
        }
        count_device_bytes(-(long long)it->second);
        allocs.erase(it);
    }
    if (!tp_emu_free(p)) {   // a guard byte was overwritten: a kernel wrote out of bounds
        note("cudaFree(%p): memory around the allocation was overwritten", p);
        return fail(cudaErrorLaunchFailure);
    }
    return cudaSuccess;
}

// Pinned host memory: plain host memory here, remembered so that
// cudaFreeHost refuses anything else (and device memory never passes for it).
static std::set<const void *> host_allocs;

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = malloc(bytes ? bytes : 1);
    if (!*p)
        return fail(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> lock(alloc_mu);
    host_allocs.insert(*p);
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    flush_all();    // cudaFreeHost waits for the device
    {
        std::lock_guard<std::mutex> lock(alloc_mu);
        if (!host_allocs.erase(p)) {
            note("cudaFreeHost(%p): not an allocation of cudaMallocHost", p);
            return fail(cudaErrorInvalidValue);
        }
    }
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (!copy_ok("cudaMemcpy", dst, src, bytes, kind))
        return fail(cudaErrorInvalidValue);
    flush_all();    // synchronous: after everything queued
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    if (!copy_ok("cudaMemcpyAsync", dst, src, bytes, kind))
        return fail(cudaErrorInvalidValue);
    run_now(stream_of(stream), true);
    if (bytes)
        memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *dst, int value, size_t bytes)
{
    if (bytes && !on_device(dst, bytes)) {
        note("cudaMemset(%p, %zu bytes): not device memory", dst, bytes);
        return fail(cudaErrorInvalidValue);
    }
    flush_all();
    memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream)
{
    if (bytes && !on_device(dst, bytes)) {
        note("cudaMemsetAsync(%p, %zu bytes): not device memory", dst, bytes);
        return fail(cudaErrorInvalidValue);
    }
    run_now(stream_of(stream), true);
    memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority)
{
    (void)flags;
    (void)priority;
    cudaError_t e = driver_state(nullptr);
    if (e != cudaSuccess)
        return fail(e);
    CUstream_st *st = new CUstream_st;
    st->id = next_stream_id++;
    streams.push_back(st);
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) { return cudaStreamCreateWithPriority(s, flags, 0); }
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithPriority(s, 0, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s)
        return fail(cudaErrorInvalidResourceHandle);
    flush(s, s->enq);
    for (CUevent_st *e : events)
        if (e->stream.load() == s)
            e->stream.store(nullptr);
    for (CUstream_st *st : streams)
        st->clock.erase(s);
    for (size_t i = 0; i < streams.size(); i++)
        if (streams[i] == s) {
            streams.erase(streams.begin() + (long)i);
            delete s;
            return cudaSuccess;
        }
    return fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    CUstream_st *st = stream_of(s);
    flush(st, st->enq);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags)
{
    (void)flags;
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    CUstream_st *st = stream_of(s), *src = e->stream.load();
    if (!src)      // never recorded: nothing to wait for
        return cudaSuccess;
    flush(src, e->seq.load());
    for (auto &kv : e->clock)
        if (kv.first != st && st->clock[kv.first] < kv.second)
            st->clock[kv.first] = kv.second;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    *e = new CUevent_st;
    events.insert(*e);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    CUstream_st *st = stream_of(s);
    e->clock = st->clock;
    e->clock[st] = st->enq;
    e->seq.store(st->enq);
    e->stream.store(st);
    return cudaSuccess;
}

// lock-free: the watchdog thread polls it
cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e)
        return cudaErrorInvalidResourceHandle;
    CUstream_st *st = e->stream.load();
    if (!st)
        return cudaSuccess;
    return st->done.load() >= e->seq.load() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e)
        return fail(cudaErrorInvalidResourceHandle);
    if (CUstream_st *st = e->stream.load())
        flush(st, e->seq.load());
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    (void)start;
    (void)end;
    *ms = 0.0f;    // no device clock: the emulated run's times mean nothing
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    if (!e || !events.erase(e))
        return fail(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

}  // extern "C"

// ==== cuBLAS ================================================================

struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

// The stored matrix of an operand: op(X) is rows x cols; stored
// column-major it is rows x cols (OP_N) or cols x rows (OP_T), with leading
// dimension ld. Checks ld and that every element lies in one allocation.
bool operand_ok(const char *name, const void *p, size_t elem, cublasOperation_t op, int rows, int cols, int ld)
{
    int srows = op == CUBLAS_OP_N ? rows : cols, scols = op == CUBLAS_OP_N ? cols : rows;
    if (ld < (srows > 1 ? srows : 1)) {
        note("GEMM operand %s: leading dimension %d below its %d rows", name, ld, srows);
        return false;
    }
    size_t extent = ((size_t)(scols - 1) * (size_t)ld + (size_t)srows) * elem;
    if (!on_device(p, extent)) {
        note("GEMM operand %s (%d x %d, ld %d) at %p is not inside one device allocation", name, srows, scols, ld, p);
        return false;
    }
    return true;
}

// widen a stored operand (ld x cols) to fp32
std::vector<float> widen(const void *p, cudaDataType t, size_t n)
{
    std::vector<float> v(n);
    if (t == CUDA_R_32F)
        memcpy(v.data(), p, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++)
            v[i] = f32_of(static_cast<const uint16_t *>(p)[i]);
    return v;
}

CBLAS_TRANSPOSE cblas_op(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

// TP_STANDIN_GEMM_FAIL=r:n: is this GEMM the one to fail?
bool gemm_fault()
{
    static long calls = 0;
    const char *spec = getenv("TP_STANDIN_GEMM_FAIL");
    int r = -1, n = 0, me = 0, inited = 0;
    calls++;
    if (!spec || sscanf(spec, "%d:%d", &r, &n) != 2)
        return false;
    if (MPI_Initialized(&inited) == MPI_SUCCESS && inited)
        MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me != r || calls != n)
        return false;
    note("rank %d's GEMM %d fails (TP_STANDIN_GEMM_FAIL)", r, n);
    return true;
}

cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const float *alpha, const void *A, int lda, const void *B, int ldb, const float *beta, void *C,
                    int ldc, cudaDataType type)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (gemm_fault())
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m < 0 || n < 0 || k < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) || (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    size_t elem = type == CUDA_R_32F ? 4 : 2;
    if ((k > 0 && (!operand_ok("A", A, elem, ta, m, k, lda) || !operand_ok("B", B, elem, tb, k, n, ldb))) ||
        !operand_ok("C", C, elem, CUBLAS_OP_N, m, n, ldc))
        return CUBLAS_STATUS_INVALID_VALUE;
    run_now(stream_of(h->stream), true);
    size_t na = (size_t)lda * (size_t)(ta == CUBLAS_OP_N ? k : m), nb = (size_t)ldb * (size_t)(tb == CUBLAS_OP_N ? n : k);
    size_t nc = (size_t)ldc * (size_t)n;
    std::vector<float> a = k > 0 ? widen(A, type, na) : std::vector<float>(1),
                       b = k > 0 ? widen(B, type, nb) : std::vector<float>(1),
                       c = *beta != 0.0f ? widen(C, type, nc) : std::vector<float>(nc, 0.0f);
    if (k > 0)
        cblas_sgemm(CblasColMajor, cblas_op(ta), cblas_op(tb), m, n, k, *alpha, a.data(), lda, b.data(), ldb, *beta,
                    c.data(), ldc);
    else
        for (float &x : c)
            x *= *beta;
    for (int j = 0; j < n; j++)          // only the m x n matrix: rows beyond m keep their values
        for (int i = 0; i < m; i++) {
            size_t at = (size_t)j * (size_t)ldc + (size_t)i;
            if (type == CUDA_R_32F)
                static_cast<float *>(C)[at] = c[at];
            else
                static_cast<uint16_t *>(C)[at] = bf16_of(c[at]);
        }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (driver_state(nullptr) != cudaSuccess)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    *handle = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes)
{
    if (!handle)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !on_device(workspace, bytes)) {
        note("cublasSetWorkspace: the workspace is not device memory");
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc)
{
    return gemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    (void)algo;
    // what tprun uses: one storage type for all three, fp32 accumulation
    if (Atype != Btype || Atype != Ctype || (Atype != CUDA_R_32F && Atype != CUDA_R_16BF) ||
        computeType != CUBLAS_COMPUTE_32F) {
        note("cublasGemmEx: only matching fp32 or bf16 operands with CUBLAS_COMPUTE_32F are emulated");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return gemm(handle, transa, transb, m, n, k, static_cast<const float *>(alpha), A, lda, B, ldb,
                static_cast<const float *>(beta), C, ldc, Atype);
}

}  // extern "C"

// ==== NCCL ==================================================================

struct ncclComm {
    MPI_Comm mpi = MPI_COMM_NULL;
    int rank = 0, nranks = 1;          // in this communicator
    int world_rank = 0;                // in MPI_COMM_WORLD, for notes
    std::atomic<int> async{ncclSuccess};
    std::atomic<bool> aborted{false};
    bool stall = false, inject_error = false;
    long executed = 0;
};

namespace {

const char kIdMagic[] = "tprun-standin-nccl-id";
int comms_made = 0;                    // communicators this rank made (TP_STANDIN_NCCL_FAULT_COMM)

// A communicator over `mpi` (which it owns), with the faults the
// environment injects into it.
ncclResult_t make_comm(MPI_Comm mpi, ncclComm **out)
{
    ncclComm *c = new ncclComm;
    c->mpi = mpi;
    if (MPI_Comm_rank(mpi, &c->rank) != MPI_SUCCESS || MPI_Comm_size(mpi, &c->nranks) != MPI_SUCCESS ||
        MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank) != MPI_SUCCESS) {
        MPI_Comm_free(&c->mpi);
        delete c;
        return ncclSystemError;
    }
    int which = env_int("TP_STANDIN_NCCL_FAULT_COMM", -1);
    bool faulty = which < 0 || which == comms_made++;
    c->stall = faulty && env_int("TP_STANDIN_NCCL_STALL_RANK", -1) == c->world_rank;
    c->inject_error = faulty && env_int("TP_STANDIN_NCCL_ERROR_RANK", -1) == c->world_rank;
    *out = c;
    return ncclSuccess;
}

// What each rank of a communicator must pass alike to a collective: its
// call, count, type and operation (FNV-1a of them).
uint64_t signature(const char *call, size_t count, ncclDataType_t t, int op)
{
    uint64_t h = 14695981039346656037ull;
    auto mix = [&h](const void *p, size_t n) {
        for (size_t i = 0; i < n; i++)
            h = (h ^ static_cast<const unsigned char *>(p)[i]) * 1099511628211ull;
    };
    mix(call, strlen(call));
    mix(&count, sizeof count);
    mix(&t, sizeof t);
    mix(&op, sizeof op);
    return h;
}

// Every rank of c passed the same signature: AND of {sig, ~sig} over the
// ranks gives back both only then.
bool same_everywhere(ncclComm *c, uint64_t sig, int *mpi_rc)
{
    uint64_t mine[2] = {sig, ~sig}, all[2];
    *mpi_rc = MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_BAND, c->mpi);
    return *mpi_rc == MPI_SUCCESS && all[0] == sig && all[1] == ~sig;
}

size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

bool reducible(ncclDataType_t t) { return t == ncclFloat32 || t == ncclBfloat16; }

std::vector<float> to_float(const void *p, ncclDataType_t t, size_t n)
{
    std::vector<float> v(n);
    if (t == ncclFloat32)
        memcpy(v.data(), p, n * sizeof(float));
    else
        for (size_t i = 0; i < n; i++)
            v[i] = f32_of(static_cast<const uint16_t *>(p)[i]);
    return v;
}

void from_float(const std::vector<float> &v, void *p, ncclDataType_t t)
{
    if (t == ncclFloat32)
        memcpy(p, v.data(), v.size() * sizeof(float));
    else
        for (size_t i = 0; i < v.size(); i++)
            static_cast<uint16_t *>(p)[i] = bf16_of(v[i]);
}

bool buffer_ok(const char *call, const char *which, const void *p, size_t bytes)
{
    if (!bytes || on_device(p, bytes))
        return true;
    note("%s: the %s buffer %p (%zu bytes) is not inside one device allocation", call, which, p, bytes);
    return false;
}

// Where a collective runs (when its stream is flushed): fault injection,
// the ranks' signatures compared (sig 0: point-to-point, nothing to
// compare), then MPI. A failing MPI call becomes the communicator's
// asynchronous error, as a failure inside a running NCCL kernel would.
void execute(ncclComm *c, const char *what, uint64_t sig, const std::function<int()> &body)
{
    if (c->aborted.load())
        return;
    if (c->stall && c->executed == 0) {
        note("rank %d stalls in its first collective, %s (TP_STANDIN_NCCL_STALL_RANK)", c->world_rank, what);
        for (;;)
            sleep(1);
    }
    int rc = MPI_SUCCESS;
    if (sig && !same_everywhere(c, sig, &rc) && rc == MPI_SUCCESS) {
        note("%s (collective %ld of a communicator of %d ranks, rank %d of MPI_COMM_WORLD its rank %d): the ranks "
             "issued different collectives, counts, types or operations on it",
             what, c->executed, c->nranks, c->world_rank, c->rank);
        c->async.store(ncclInvalidUsage);
    } else if (rc != MPI_SUCCESS || body() != MPI_SUCCESS) {
        note("%s: MPI failed", what);
        c->async.store(ncclSystemError);
    }
    if (c->inject_error && c->executed == 0) {
        note("rank %d's communicator fails after %s (TP_STANDIN_NCCL_ERROR_RANK)", c->world_rank, what);
        c->async.store(ncclRemoteError);
    }
    c->executed++;
}

// Queue a collective on its stream, after checking that the stream has
// waited for every other stream's visible work.
ncclResult_t enqueue(ncclComm *c, cudaStream_t stream, const char *what, std::function<void()> run)
{
    if (!c)
        return ncclInvalidArgument;
    if (c->aborted.load())
        return ncclInvalidUsage;
    CUstream_st *st = stream_of(stream);
    for (CUstream_st *other : streams) {
        if (other == st || other->last_work == 0)
            continue;
        auto it = st->clock.find(other);
        long seen = it == st->clock.end() ? 0 : it->second;
        if (seen < other->last_work) {
            note("%s on stream %d is not ordered after the work queued on stream %d (its operation %ld; the stream "
                 "has waited up to %ld): cudaEventRecord on that stream + cudaStreamWaitEvent are missing",
                 what, st->id, other->id, other->last_work, seen);
            return ncclInvalidUsage;
        }
    }
    st->enq++;
    st->last_work = st->enq;
    st->pending.push_back(Deferred{st->enq, std::move(run)});
    return ncclSuccess;
}

// ncclGroupStart/End around point-to-point calls
struct P2P {
    bool send;
    void *buf;
    size_t bytes;
    int peer;
};
int group_depth = 0;
std::vector<P2P> group_ops;
ncclComm *group_comm = nullptr;
cudaStream_t group_stream = nullptr;

ncclResult_t enqueue_p2p(ncclComm *c, cudaStream_t stream, std::vector<P2P> ops)
{
    return enqueue(c, stream, "ncclGroupEnd (send/recv)", [c, ops]() {
        execute(c, "send/recv", 0, [&]() {
            std::vector<MPI_Request> req(ops.size());
            for (size_t i = 0; i < ops.size(); i++) {
                int rc = ops[i].send ? MPI_Isend(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 0, c->mpi, &req[i])
                                     : MPI_Irecv(ops[i].buf, (int)ops[i].bytes, MPI_BYTE, ops[i].peer, 0, c->mpi, &req[i]);
                if (rc != MPI_SUCCESS)
                    return rc;
            }
            return MPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE);
        });
    });
}

ncclResult_t p2p(bool send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm *c, cudaStream_t stream)
{
    if (!c || peer < 0 || peer >= c->nranks)
        return ncclInvalidArgument;
    size_t bytes = count * type_size(t);
    if (!buffer_ok(send ? "ncclSend" : "ncclRecv", send ? "send" : "receive", buf, bytes))
        return ncclInvalidArgument;
    if (group_depth == 0)
        return enqueue_p2p(c, stream, {P2P{send, buf, bytes, peer}});
    if (group_ops.empty()) {
        group_comm = c;
        group_stream = stream;
    } else if (group_comm != c || group_stream != stream) {
        note("one group of send/recv spans communicators or streams: not emulated");
        return ncclInvalidUsage;
    }
    group_ops.push_back(P2P{send, buf, bytes, peer});
    return ncclSuccess;
}

}  // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    memset(id, 0, sizeof *id);
    memcpy(id->internal, kIdMagic, sizeof kIdMagic);
    uint64_t r = (uint64_t)time(nullptr) * 6364136223846793005ull ^ (uint64_t)getpid();
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &r, sizeof r) != (ssize_t)sizeof r)
            r ^= 0x9E3779B97F4A7C15ull;
        close(fd);
    }
    memcpy(id->internal + sizeof kIdMagic, &r, sizeof r);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    *comm = nullptr;
    int inited = 0, size = 0, me = 0;
    if (driver_state(nullptr) != cudaSuccess)
        return ncclUnhandledCudaError;
    if (MPI_Initialized(&inited) != MPI_SUCCESS || !inited) {
        note("ncclCommInitRank: the stand-in runs NCCL over MPI, which is not initialised");
        return ncclInvalidUsage;
    }
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (nranks != size || rank != me) {
        note("ncclCommInitRank(nranks %d, rank %d): the stand-in maps NCCL rank r to MPI rank r of %d (this is %d)",
             nranks, rank, size, me);
        return ncclInvalidArgument;
    }
    // every rank must hold the id rank 0 made: AND == OR byte-wise
    unsigned char band[NCCL_UNIQUE_ID_BYTES], bor[NCCL_UNIQUE_ID_BYTES];
    if (MPI_Allreduce(id.internal, band, NCCL_UNIQUE_ID_BYTES, MPI_UNSIGNED_CHAR, MPI_BAND, MPI_COMM_WORLD) !=
            MPI_SUCCESS ||
        MPI_Allreduce(id.internal, bor, NCCL_UNIQUE_ID_BYTES, MPI_UNSIGNED_CHAR, MPI_BOR, MPI_COMM_WORLD) != MPI_SUCCESS)
        return ncclSystemError;
    if (memcmp(band, bor, sizeof band)) {
        note("ncclCommInitRank: the ranks passed different ncclUniqueIds (was rank 0's id broadcast?)");
        return ncclInvalidArgument;
    }
    if (memcmp(id.internal, kIdMagic, sizeof kIdMagic)) {
        note("ncclCommInitRank: the ncclUniqueId was not made by ncclGetUniqueId");
        return ncclInvalidArgument;
    }
    MPI_Comm dup;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &dup) != MPI_SUCCESS)
        return ncclSystemError;
    return make_comm(dup, comm);
}

// Collective over comm, as MPI_Comm_split is: the ranks passing one color
// make a communicator, ordered by key, then by rank in comm.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config)
{
    if (!comm || !newcomm)
        return ncclInvalidArgument;
    *newcomm = nullptr;
    if (comm->aborted.load()) {
        note("ncclCommSplit: the parent communicator was aborted (ncclCommAbort frees it)");
        return ncclInvalidUsage;
    }
    if (config) {
        note("ncclCommSplit: only a NULL config (the parent's) is emulated");
        return ncclInvalidArgument;
    }
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
        note("ncclCommSplit: color %d (0 or more, or NCCL_SPLIT_NOCOLOR)", color);
        return ncclInvalidArgument;
    }
    flush_all();    // the parent's queued collectives share its MPI communicator with the split
    MPI_Comm child;
    if (MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &child) != MPI_SUCCESS)
        return ncclSystemError;
    if (child == MPI_COMM_NULL)
        return ncclSuccess;
    return make_comm(child, newcomm);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    flush_all();
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    if (!comm->aborted.load())
        MPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

// Callable from another thread while the comm is in use: marks it dead;
// the process is about to end, so nothing is freed.
ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    comm->aborted.store(true);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm)
        return ncclInvalidArgument;
    *asyncError = (ncclResult_t)comm->async.load();
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream)
{
    if (!c || !reducible(t) || (op != ncclSum && op != ncclMax))
        return ncclInvalidArgument;
    size_t bytes = count * type_size(t);
    if (!buffer_ok("ncclAllReduce", "send", sendbuff, bytes) || !buffer_ok("ncclAllReduce", "receive", recvbuff, bytes))
        return ncclInvalidArgument;
    return enqueue(c, stream, "ncclAllReduce", [=]() {
        execute(c, "ncclAllReduce", signature("ncclAllReduce", count, t, op), [&]() {
            std::vector<float> in = to_float(sendbuff, t, count), out(count);
            int rc = MPI_Allreduce(in.data(), out.data(), (int)count, MPI_FLOAT, op == ncclMax ? MPI_MAX : MPI_SUM, c->mpi);
            from_float(out, recvbuff, t);
            return rc;
        });
    });
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t stream)
{
    if (!c || !reducible(t) || (op != ncclSum && op != ncclMax))
        return ncclInvalidArgument;
    size_t bytes = recvcount * type_size(t);
    if (!buffer_ok("ncclReduceScatter", "send", sendbuff, bytes * (size_t)c->nranks) ||
        !buffer_ok("ncclReduceScatter", "receive", recvbuff, bytes))
        return ncclInvalidArgument;
    return enqueue(c, stream, "ncclReduceScatter", [=]() {
        execute(c, "ncclReduceScatter", signature("ncclReduceScatter", recvcount, t, op), [&]() {
            std::vector<float> in = to_float(sendbuff, t, recvcount * (size_t)c->nranks), out(recvcount);
            int rc = MPI_Reduce_scatter_block(in.data(), out.data(), (int)recvcount, MPI_FLOAT,
                                              op == ncclMax ? MPI_MAX : MPI_SUM, c->mpi);
            from_float(out, recvbuff, t);
            return rc;
        });
    });
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t t, ncclComm_t c,
                           cudaStream_t stream)
{
    if (!c)
        return ncclInvalidArgument;
    size_t bytes = sendcount * type_size(t);
    if (!buffer_ok("ncclAllGather", "send", sendbuff, bytes) ||
        !buffer_ok("ncclAllGather", "receive", recvbuff, bytes * (size_t)c->nranks))
        return ncclInvalidArgument;
    return enqueue(c, stream, "ncclAllGather", [=]() {
        execute(c, "ncclAllGather", signature("ncclAllGather", sendcount, t, 0), [&]() {
            std::vector<char> in(static_cast<const char *>(sendbuff), static_cast<const char *>(sendbuff) + bytes);
            return MPI_Allgather(in.data(), (int)bytes, MPI_BYTE, recvbuff, (int)bytes, MPI_BYTE, c->mpi);
        });
    });
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t t, ncclComm_t c,
                          cudaStream_t stream)
{
    if (!c)
        return ncclInvalidArgument;
    size_t bytes = count * type_size(t), all = bytes * (size_t)c->nranks;
    if (!buffer_ok("ncclAlltoAll", "send", sendbuff, all) || !buffer_ok("ncclAlltoAll", "receive", recvbuff, all))
        return ncclInvalidArgument;
    return enqueue(c, stream, "ncclAlltoAll", [=]() {
        execute(c, "ncclAlltoAll", signature("ncclAlltoAll", count, t, 0), [&]() {
            std::vector<char> in(static_cast<const char *>(sendbuff), static_cast<const char *>(sendbuff) + all);
            return MPI_Alltoall(in.data(), (int)bytes, MPI_BYTE, recvbuff, (int)bytes, MPI_BYTE, c->mpi);
        });
    });
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream)
{
    return p2p(true, const_cast<void *>(sendbuff), count, t, peer, c, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t stream)
{
    return p2p(false, recvbuff, count, t, peer, c, stream);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (group_depth == 0)
        return ncclInvalidUsage;
    if (--group_depth > 0 || group_ops.empty())
        return ncclSuccess;
    std::vector<P2P> ops;
    ops.swap(group_ops);
    return enqueue_p2p(group_comm, group_stream, std::move(ops));
}

}  // extern "C"
