// The CPU backend's backward kernels composed by a real training schedule:
// `tpcc --train` on the fixtures of tests/fixtures/train (tiny transformers
// models), run once by the executor on one rank, every weight's gradient
// (outputs.grads) against PyTorch autograd's (grads.safetensors, step 1),
// and the loss against train.json's.
// Covers Llama (rmsnorm, RoPE and its inverse, SiLU, attention), GQA,
// Qwen3's q/k norms, and GPT-2 (layernorm, gelu_new, Conv1D, biases,
// learned positions, the embedding tied to the output head).
#include <gtest/gtest.h>

#include <jansson.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
#include "runtime/backends/backend.h"
#include "runtime/comm/comm.h"
#include "runtime/exec/exec.h"
#include "runtime/io/npy.h"
#include "runtime/io/weights.h"
#include "runtime/train/gather.h"
#include "sched/load.h"
}

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

// Reads weight w's rank-0 slice of a checkpoint into dst as tprun does: a
// packed weight's segments (row ranges) one after another.
void read_slices(tp_checkpoint *c, const tr_weight *w, float *dst)
{
    char err[1024];
    for (int k = 0; k < (w->nsegments ? w->nsegments : 1); k++) {
        tp_weight_slice s = tr_weight_slice(w, 0, k);
        ASSERT_EQ(tp_checkpoint_read(c, &s, dst, err, sizeof err), 0) << err;
        dst += tp_weight_slice_numel(&s);
    }
}

void expect_pytorch_gradients(const std::string &fixture, const std::string &plan)
{
    const std::string dir = source_path("tests/fixtures/train/" + fixture);
    TempDir tmp;
    const std::string sched = tmp.path + "/train.sched";
    tpcc_test::Proc p = tpcc_test::run_tpcc({source_path(plan), "--hf-config", dir, "--train", "-D", "tp=1", "-D",
                                             "seq=16", "-D", "batch=2", "-o", sched});
    ASSERT_EQ(p.code(), 0) << p.err;

    char err[1024];
    tr_schedule s;
    ASSERT_EQ(tr_schedule_load(&s, sched.c_str(), 0, 1, err, sizeof err), 0) << err;
    ASSERT_NE(s.grads, nullptr);
    tp_comm comm;
    ASSERT_EQ(tp_comm_single(&comm), 0);
    tr_exec x;
    ASSERT_EQ(tr_exec_init(&x, &s, tp_backend_cpu(), &comm, err, sizeof err), 0) << err;

    tp_checkpoint *model = nullptr, *grads = nullptr;
    ASSERT_EQ(tp_checkpoint_open(&model, (dir + "/model.safetensors").c_str(), err, sizeof err), 0) << err;
    ASSERT_EQ(tp_checkpoint_open(&grads, (dir + "/grads.safetensors").c_str(), err, sizeof err), 0) << err;
    std::vector<float> host(s.weight_elems + 1);
    for (int i = 0; i < s.nweights; i++)
        read_slices(model, &s.weights[i], host.data() + s.weights[i].region_offset);
    tr_exec_write_weights(&x, host.data());

    // step 1's batch: the first 2 x 16 tokens, as input ids and as labels
    int32_t *tokens;
    int64_t shape[2];
    int ndim;
    ASSERT_EQ(tp_npy_read_tokens((dir + "/tokens.npy").c_str(), &tokens, shape, &ndim, err, sizeof err), 0) << err;
    ASSERT_GE(shape[0], 32);
    tr_exec_write_buf(&x, s.input_ids, tokens);
    tr_exec_write_buf(&x, s.labels, tokens);
    free(tokens);
    ASSERT_EQ(tr_exec_run(&x, err, sizeof err), 0) << err;

    // the loss of the same forward (train.json's step 1)
    json_error_t jerr;
    json_t *train = json_load_file((dir + "/train.json").c_str(), 0, &jerr);
    ASSERT_NE(train, nullptr) << jerr.text;
    json_t *step1 = json_array_get(json_object_get(train, "steps"), 0);
    const double want_loss = json_number_value(json_object_get(step1, "loss"));
    json_decref(train);
    float loss;
    tr_exec_read_buf(&x, s.loss, &loss);
    EXPECT_NEAR(loss, want_loss, 1e-5 * want_loss) << fixture;

    double worst = 0;
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight *w = &s.weights[i];
        ASSERT_GE(s.grads[i], 0) << w->name;
        std::vector<float> got(tr_buf_elems(&s.bufs[s.grads[i]])), want(w->local_elems);
        ASSERT_EQ(got.size(), want.size()) << w->name;
        tr_exec_read_buf(&x, s.grads[i], got.data());
        read_slices(grads, w, want.data());
        double diff = 0, scale = 0;
        for (size_t k = 0; k < want.size(); k++) {
            diff = std::max(diff, std::fabs((double)got[k] - want[k]));
            scale = std::max(scale, std::fabs((double)want[k]));
        }
        // both sides float32 with different summation orders: measured at
        // most 3e-6 of the tensor's largest element
        EXPECT_GT(scale, 0.0) << fixture << ": " << w->name << "'s gradient is 0 in PyTorch's";
        EXPECT_LE(diff, 2e-5 * scale) << fixture << ": " << w->name;
        worst = std::max(worst, diff / scale);
    }
    std::printf("[ gradient ] %-12s every weight within %.1e of PyTorch's (relative to its largest element)\n",
                fixture.c_str(), worst);
    tp_checkpoint_close(model);
    tp_checkpoint_close(grads);
    tr_exec_free(&x);
    tr_schedule_free(&s);
}

TEST(CpuTrainingStep, LlamaGradientsMatchPytorch) { expect_pytorch_gradients("llama", "plans/hf/llama.plan"); }

TEST(CpuTrainingStep, LlamaGqaGradientsMatchPytorch) { expect_pytorch_gradients("llama-gqa", "plans/hf/llama.plan"); }

TEST(CpuTrainingStep, Qwen3GradientsMatchPytorch) { expect_pytorch_gradients("qwen3", "plans/hf/qwen3.plan"); }

TEST(CpuTrainingStep, Gpt2TiedGradientsMatchPytorch)
{
    expect_pytorch_gradients("gpt2-tied", "plans/gpt2-hf-sp.plan");
}

} // namespace
