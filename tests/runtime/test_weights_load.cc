// runtime/exec/weights_load.c: a rank's weights reach the backend with the
// same bits whichever way they travel — read in place into host memory
// (the CPU backend), or staged through a bounded buffer a few rows at a
// time (any other backend: here the CPU's table with host_memory off, so
// its copies are plain memcpy) in fp32 or rounded to bf16, with the fp32
// values kept for master weights — against tp_checkpoint_read of every
// whole slice. Rank 1 of 2 of a Llama (row and column slices, the vocab
// padded) and a Phi-3 (packed qkv and gate_up segments), and the seeded
// initialisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "runtime/exec/weights_load.h"
#include "runtime/train/gather.h"
#include "sched/load.h"
}

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::source_path;

namespace {

// The staged backend's staging allocations: their largest size.
size_t staged_largest;
void *staged_alloc(size_t bytes)
{
    staged_largest = std::max(staged_largest, bytes);
    return malloc(bytes);
}

tr_weights_sink sink_of(void *region, tp_dtype dtype, float *fp32_copy, size_t staging_bytes)
{
    tr_weights_sink k{};
    k.region = region;
    k.dtype = dtype;
    k.fp32_copy = fp32_copy;
    k.staging_bytes = staging_bytes;
    return k;
}

// Every weight's whole slices, one after another, as the old loader read them.
std::vector<float> reference(const tr_schedule &s, tp_checkpoint *c, uint64_t seed)
{
    std::vector<float> host((size_t)s.weight_elems);
    char err[1024];
    for (int i = 0; i < s.nweights; i++) {
        float *dst = host.data() + s.weights[i].region_offset;
        for (int k = 0; k < (s.weights[i].nsegments ? s.weights[i].nsegments : 1); k++) {
            tp_weight_slice ws = tr_weight_slice(&s.weights[i], s.rank, k);
            if (c) {
                EXPECT_EQ(tp_checkpoint_read(c, &ws, dst, err, sizeof err), 0) << err;
            } else {
                EXPECT_GE(tp_weight_init_seeded(&ws, seed, dst), 0);
            }
            dst += tp_weight_slice_numel(&ws);
        }
    }
    return host;
}

void expect_same_everywhere(const std::string &plan, const std::string &fixture, bool seeded)
{
    const std::string dir = source_path("tests/fixtures/hf/" + fixture);
    tpcc_test::TempDir tmp;
    const std::string sched = tmp.path + "/m.sched";
    tpcc_test::Proc p = tpcc_test::run_tpcc({source_path(plan), "--hf-config", dir + "/config.json", "-D", "tp=2",
                                             "-D", "seq=16", "-D", "batch=2", "-o", sched});
    ASSERT_EQ(p.code(), 0) << p.err;
    char err[1024];
    tr_schedule s;
    ASSERT_EQ(tr_schedule_load(&s, sched.c_str(), 1, 2, err, sizeof err), 0) << err;
    tp_checkpoint *c = nullptr;
    if (!seeded) {
        ASSERT_EQ(tp_checkpoint_open(&c, (dir + "/model.safetensors").c_str(), err, sizeof err), 0) << err;
    }
    const std::vector<float> want = reference(s, c, 3);
    const size_t n = want.size();

    tp_backend staged = *tp_backend_cpu();
    staged.name = "staged";
    staged.host_memory = false;
    staged.alloc_staging = staged_alloc;
    tr_weight_source src{};
    src.ckpt = c;
    src.seed = 3;
    tr_exec x{};
    x.s = &s;

    // in place
    x.be = tp_backend_cpu();
    std::vector<float> direct(n, -1.0f), copy(n, -1.0f);
    tr_weights_sink sink = sink_of(direct.data(), TP_F32, copy.data(), 0);
    ASSERT_EQ(tr_weights_load(&x, &src, &sink, err, sizeof err), 0) << err;
    EXPECT_EQ(memcmp(direct.data(), want.data(), n * sizeof(float)), 0) << fixture << ": in place";
    EXPECT_EQ(memcmp(copy.data(), want.data(), n * sizeof(float)), 0) << fixture << ": in place, the fp32 copy";

    // staged, fp32 and bf16, under bounds below one row, of a few rows and the default
    x.be = &staged;
    for (size_t bound : {(size_t)64, (size_t)1000, (size_t)0}) {
        staged_largest = 0;
        std::vector<float> f32(n, -1.0f), kept(n, -1.0f);
        sink = sink_of(f32.data(), TP_F32, nullptr, bound);
        ASSERT_EQ(tr_weights_load(&x, &src, &sink, err, sizeof err), 0) << err;
        EXPECT_EQ(memcmp(f32.data(), want.data(), n * sizeof(float)), 0) << fixture << ": staged, bound " << bound;
        std::vector<uint16_t> bf16(n, 0xdead);
        sink = sink_of(bf16.data(), TP_BF16, kept.data(), bound);
        ASSERT_EQ(tr_weights_load(&x, &src, &sink, err, sizeof err), 0) << err;
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += bf16[i] != tp_f32_to_bf16(want[i]);
        EXPECT_EQ(wrong, 0u) << fixture << ": bf16, bound " << bound;
        EXPECT_EQ(memcmp(kept.data(), want.data(), n * sizeof(float)), 0) << fixture << ": bf16's fp32 copy";
        // a bound below one row stages one row (the widest: hidden 32 floats, or ffn 64)
        if (bound) {
            EXPECT_LE(staged_largest, std::max(bound, (size_t)512)) << fixture;
        }
    }
    tp_checkpoint_close(c);
    tr_schedule_free(&s);
}

TEST(WeightsLoad, LlamaSameBitsInPlaceAndStaged)
{
    expect_same_everywhere("plans/llama-sp.plan", "llama2-gqa", false);
}

TEST(WeightsLoad, Phi3PackedSegmentsSameBitsInPlaceAndStaged)
{
    expect_same_everywhere("plans/phi3-sp.plan", "phi3-gqa", false);
}

TEST(WeightsLoad, SeededSameBitsInPlaceAndStaged)
{
    expect_same_everywhere("plans/llama-sp.plan", "llama2-gqa", true);
}

}  // namespace
