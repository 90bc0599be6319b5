// The CUDA backend, end to end, as processes.
//
// Emulated.* run tprun_emulated: tprun's own sources — the executor, the
// CUDA backend (runtime/backends/cuda/backend_cuda.c), the NCCL communicator
// (runtime/backends/cuda/comm_nccl.c) and the kernels (runtime/kernels/*.cu under the
// host emulation of tests/runtime/cuda_emu) — against host stand-ins of the CUDA
// runtime, cuBLAS and NCCL (tests/runtime/cuda_standin: host memory, OpenBLAS, MPI).
// They need no GPU and no nvcc. Every shipped plan at tp = 1 and 2, in fp32
// and bf16, must give the CPU backend's logits and loss; training on a
// dp x tp mesh (NCCL communicators split per group) the CPU backend's
// steps; failures of the collectives (an error, a stall), in any group,
// must end every rank with a message. The host-staged communicator
// (runtime/backends/cuda/comm_staged.c: --comm mpi, or ranks sharing a GPU)
// must give the CPU's results and NCCL's.
//
// Gpu.* and GpuDataParallel.* (ctest label gpu) run the real tprun with
// --backend cuda and skip where no GPU is usable; with fewer GPUs than
// ranks, the ranks share them through the host-staged communicator. These
// are the suite's only skips: a missing tool (mpiexec) is a failure.
//
// Tolerances, absolute, on the logits of the tiny seeded models of
// test_tprun.cc (standard deviation 0.16, largest magnitude 0.62):
//   fp32  1e-4, as between CPU runs: the kernels and the GEMMs accumulate in
//         fp32 where the CPU twin accumulates norms and softmaxes in double;
//         measured under emulation: at most 2.4e-7. A wrong shard or a
//         missed reduction is off by 1e-2 or more.
//   bf16  1.5e-2 (loss 1e-3): every weight and activation is rounded to 8
//         significant bits (relative 2^-9 = 2e-3 per rounding) and errors
//         compound over 2 layers. Measured under emulation on every shipped
//         plan at tp = 1 and 2: logits at most 5.8e-3, loss 3.2e-4; the
//         tolerances leave a 2.5x margin and stay a tenth of the logits'
//         spread, while a collective the compute stream does not wait for
//         is off by 0.6 (checked by mutation). The Gemmas take 3e-2: their
//         head dimension of 256 puts attention on tensor cores (the
//         probabilities rounded to bf16) and their norms round up to four
//         times a layer, so gemma-sp measures 9.4e-3 and gemma2-sp 1.6e-2
//         (1.25e-2 with the fp32 attention kernel), a twentieth of its
//         logits' spread (std 0.31).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <jansson.h>
#include <stdlib.h>

#include "tests/support/grad_files.h"
#include "tests/support/plan_harness.h"
#include "tests/support/process.h"
#include "tests/support/token_files.h"
#include "tests/support/train_harness.h"

using namespace tpcc_test;
namespace fs = std::filesystem;

namespace {

using tpcc_test::kTpcc;
using tpcc_test::kTprun;
const std::string kEmulated = TPRUN_EMULATED;   // "" when not built
// ctest leaves Emulated* out of a build without tprun_emulated (tests/CMakeLists.txt)
const char *const kEmulatedNotBuilt =
    "tprun_emulated is not built: configure with -DTPCC_CUDA_EMULATION=ON (the default)";
const char *const kFp32Tolerance = "1e-4";
const char *const kBf16Tolerance = "1.5e-2";     // see the top of the file
const char *const kGemmaBf16Tolerance = "3e-2";
const double kBf16LossTolerance = 1e-3;

const std::vector<std::string> kEnv = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"};

// The sizes of test_tprun.cc: small enough for 4 ranks on 2 cores; `over`
// replaces some ("heads=2").
std::vector<std::string> tiny(const std::string &plan, int tp, const std::vector<std::string> &over = {})
{
    std::vector<std::string> d = {"vocab=256", "hidden=64", "layers=2", "heads=8", "ffn=128", "seq=16", "batch=2",
                                  "tp=" + std::to_string(tp)};
    d.push_back(contains(std::filesystem::path(plan).filename().string(), "gpt2") ? "positions=32" : "kv_heads=4");
    for (const std::string &o : over)
        for (auto &x : d)
            if (x.substr(0, x.find('=')) == o.substr(0, o.find('=')))
                x = o;
    std::vector<std::string> flags;
    for (auto &x : d) {
        flags.push_back("-D");
        flags.push_back(x);
    }
    return flags;
}

std::string compile(const TempDir &dir, const std::string &plan, int tp, const std::string &dtype,
                    const std::vector<std::string> &over = {}, bool train = false,
                    const std::vector<std::string> &extra = {})
{
    std::string out = dir.path + "/" + fs::path(plan).stem().string() + "-tp" + std::to_string(tp) + "-" + dtype +
                      (train ? "-train" : "") + ".sched";
    std::vector<std::string> args = {plan, "-o", out, "--dtype", dtype};
    if (train)
        args.push_back("--train");
    for (auto &f : tiny(plan, tp, over))
        args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    Proc p = run_program(kTpcc, args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    return out;
}

Proc run(const std::string &program, int ranks, const std::string &sched, const std::vector<std::string> &args,
         const std::vector<std::string> &env = {}, int timeout = 240)
{
    std::vector<std::string> a;
    if (ranks > 1)
        a = {"-n", std::to_string(ranks)};
    a.push_back(sched);
    a.insert(a.end(), args.begin(), args.end());
    std::vector<std::string> e = kEnv;
    e.insert(e.end(), env.begin(), env.end());
    return run_program(program, a, e, timeout);
}

std::string loss_of(const std::string &out)
{
    size_t at = out.find("  loss");
    if (at == std::string::npos)
        return "";
    std::string rest = out.substr(at + 6);
    size_t b = rest.find_first_not_of(' ');
    return rest.substr(b, rest.find('\n') - b);
}

// The CPU backend's logits (fp32, tp = 1) of a plan, written to ref, and
// its loss.
std::string cpu_reference(const TempDir &dir, const std::string &plan, const std::string &ref,
                          const std::vector<std::string> &over = {})
{
    std::string sched = compile(dir, plan, 1, "fp32", over);
    std::vector<std::string> args = labels_for(kTpcc, sched);
    args.insert(args.end(), {"--backend", "cpu", "--out", ref});
    Proc p = run(kTprun, 1, sched, args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    return loss_of(p.out);
}

std::vector<std::string> shipped_plans()
{
    std::vector<std::string> v;
    for (const auto &p : files_in("plans", ".plan"))
        if (!contains(p, "405b"))
            v.push_back(p);
    return v;
}

std::string plan_name(const std::string &plan)
{
    std::string s = fs::path(plan).stem().string();
    for (auto &c : s)
        if (!isalnum((unsigned char)c))
            c = '_';
    return s;
}

// The communicator a multi-rank CUDA run's header names for `comm` (--comm
// mpi: the host-staged one; nccl, or none asked, NCCL).
std::string collectives_of(const std::string &comm)
{
    return comm == "mpi" ? ", mpi-staged collectives)" : ", nccl collectives)";
}

// Run `program` with --backend cuda (and --comm `comm` unless empty) at each
// tp in fp32 and bf16 against the CPU twin (fp32, tp = 1). On real GPUs
// (gpu_run), "no usable GPU" and "too few GPUs for tp ranks" are skips, not
// failures.
void check_against_cpu(const std::string &program, const std::string &plan, const std::vector<int> &tps,
                       bool gpu_run, const std::vector<std::string> &over = {}, const std::string &comm = "")
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    std::string ref = dir.path + "/cpu.npy";
    double cpu_loss = atof(cpu_reference(dir, plan, ref, over).c_str());
    for (int tp : tps)
        for (std::string dtype : {"fp32", "bf16"}) {
            const bool gemma = contains(fs::path(plan).filename().string(), "gemma");
            const char *tol = dtype == "fp32" ? kFp32Tolerance : gemma ? kGemmaBf16Tolerance : kBf16Tolerance;
            std::string sched = compile(dir, plan, tp, dtype, over);
            std::vector<std::string> args = labels_for(kTpcc, sched);
            args.insert(args.end(), {"--backend", "cuda", "--compare", ref, "--tolerance", tol});
            if (!comm.empty())
                args.insert(args.end(), {"--comm", comm});
            Proc p = run(program, tp, sched, args);
            if (gpu_run && (contains(p.err, "no CUDA device") || contains(p.err, "usable GPU")))
                GTEST_SKIP() << "tp=" << tp << ": " << p.err;
            EXPECT_EQ(p.code(), 0) << "tp=" << tp << " " << dtype << "\n" << p.describe();
            EXPECT_TRUE(contains(p.out, "cuda backend")) << p.describe();
            if (tp > 1 && !comm.empty()) {
                EXPECT_TRUE(contains(p.out, collectives_of(comm))) << p.describe();
            }
            EXPECT_TRUE(contains(p.out, ": ok")) << "tp=" << tp << " " << dtype << "\n" << p.describe();
            EXPECT_NEAR(atof(loss_of(p.out).c_str()), cpu_loss, dtype == "fp32" ? 1e-4 : kBf16LossTolerance)
                << "tp=" << tp << " " << dtype << "\n" << p.out;
        }
}

// One training step of `plan` at tp 1 (the seeded weights, the llama
// fixture's tokens): `program` with --backend cuda in bf16 against the CPU
// backend's step in fp32, the first step's gathered gradients within
// `bound` of each tensor's largest entry. Returns the error (-1 on a skip).
// One row of 80 tokens for a masked step: 10 of left padding (id 0), then
// documents ended by id 2 at 30 and 63, so the queries from 64 on see no
// key of the first block of 64 (the tensor-core kernels skip that tile).
std::string masked_tokens(const TempDir &dir)
{
    std::vector<int32_t> ids(80);
    for (int t = 0; t < 80; t++)
        ids[t] = t < 10 ? 0 : t == 30 || t == 63 ? 2 : 3 + (t * 37) % 250;
    return dir.write("masked.npy", tpcc_test::npy("<i4", tpcc_test::raw(ids), "(80,)"));
}

double check_training_against_cpu(const std::string &program, const std::string &plan, bool gpu_run,
                                  const std::vector<std::string> &over, double bound, bool masked)
{
    TempDir dir;
    const std::string tokens = masked ? masked_tokens(dir) : source_path("tests/fixtures/train/llama/tokens.npy");
    std::string sched[2], grads[2];
    for (int bf16 = 0; bf16 < 2; bf16++) {
        sched[bf16] = compile(dir, plan, 1, bf16 ? "bf16" : "fp32", over, true,
                              masked ? std::vector<std::string>{"--segments"} : std::vector<std::string>{});
        grads[bf16] = dir.path + (bf16 ? "/bf16" : "/fp32") + "-grads.safetensors";
        std::vector<std::string> args = {"--backend", bf16 ? "cuda" : "cpu", "--steps", "1", "--data", tokens,
                                         "--grads-out", grads[bf16], "-q"};
        if (masked)
            args.insert(args.end(), {"--pad-id", "0", "--eos-id", "2"});
        Proc p = run(bf16 ? program : kTprun, 1, sched[bf16], args);
        if (gpu_run && bf16 && (contains(p.err, "no CUDA device") || contains(p.err, "usable GPU")))
            return -1.0;
        EXPECT_EQ(p.code(), 0) << p.describe();
        if (p.code())
            return INFINITY;
    }
    const double worst = worst_relative(read_weights_of(grads[1], sched[1]), read_weights_of(grads[0], sched[0]));
    EXPECT_LT(worst, bound) << plan;
    return worst;
}

// ---- emulated: the whole backend on the host ------------------------------------------

class Emulated : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override
    {
        ASSERT_FALSE(kEmulated.empty()) << kEmulatedNotBuilt;
    }
};

TEST_P(Emulated, CudaBackendMatchesCpuAtTp1And2) { check_against_cpu(kEmulated, GetParam(), {1, 2}, false); }

INSTANTIATE_TEST_SUITE_P(Shipped, Emulated, ::testing::ValuesIn(shipped_plans()),
                         [](const auto &info) { return plan_name(info.param); });

// Head dimensions 64, 128, 96 and 256, where bf16 attention runs on tensor
// cores (attention_flash.cuh), over 80 positions: a whole block of 64
// queries and a ragged one; GQA.
const std::vector<std::string> kHeadDim64 = {"hidden=256", "heads=4", "kv_heads=2", "ffn=256", "seq=80"};
const std::vector<std::string> kHeadDim128 = {"hidden=256", "heads=2", "kv_heads=1", "ffn=256", "seq=80"};
const std::vector<std::string> kHeadDim96 = {"hidden=192", "heads=2", "kv_heads=1", "ffn=256", "seq=80"};
const std::vector<std::string> kHeadDim256 = {"hidden=512", "heads=2", "kv_heads=1", "ffn=256", "seq=80"};
const double kTensorCoreTrainingBound = 5e-2;

class EmulatedRun : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_FALSE(kEmulated.empty()) << kEmulatedNotBuilt;
        ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    }
    TempDir dir;
    std::string plan = source_path("plans/llama-sp.plan");
};

// No shipped plan reshards with an all-to-all; this variant of llama-sp
// does: the MLP's input, a sequence shard (Shard(1)), is asked for as a
// feature shard (Shard(2)), which gate_proj and up_proj then gather. It
// goes through ncclSend / ncclRecv in one group.
std::string all_to_all_plan(const TempDir &dir)
{
    std::string text = slurp(source_path("plans/llama-sp.plan"));
    const std::string from = "desired_input_layouts=(Replicate(),),", to = "desired_input_layouts=(Shard(2),),";
    size_t at = text.rfind(from);
    EXPECT_NE(at, std::string::npos);
    text.replace(at, from.size(), to);
    fs::create_directories(dir.path + "/plans");
    fs::create_directory_symlink(source_path("models"), dir.path + "/models");
    return dir.write("plans/llama-sp-all-to-all.plan", text);
}

TEST_F(EmulatedRun, AllToAllAtTp2And4)
{
    std::string a2a = all_to_all_plan(dir), ref = dir.path + "/cpu.npy";
    cpu_reference(dir, a2a, ref);
    for (int tp : {2, 4})
        for (std::string dtype : {"fp32", "bf16"}) {
            std::string sched = compile(dir, a2a, tp, dtype);
            Proc dump = run_program(kTpcc, {"--dump", sched});
            ASSERT_TRUE(contains(dump.out, "all_to_all")) << dump.out;
            Proc p = run(kEmulated, tp, sched,
                         {"--backend", "cuda", "--labels", "tokens", "--compare", ref, "--tolerance",
                          dtype == "fp32" ? kFp32Tolerance : kBf16Tolerance});
            EXPECT_EQ(p.code(), 0) << "tp=" << tp << " " << dtype << "\n" << p.describe();
            EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
        }
}

// The executor's per-op synchronisation (profile, trace) and the bytes of
// bf16 collectives: the profile reports the schedule's bytes.
TEST_F(EmulatedRun, ProfileBytesOfABf16ScheduleAreTheSchedules)
{
    std::string sched = compile(dir, plan, 2, "bf16"), prof = dir.path + "/p.json", trace = dir.path + "/t.json";
    Proc p = run(kEmulated, 2, sched, {"--backend", "cuda", "--labels", "tokens", "--profile-json", prof, "--trace", trace, "-q"});
    ASSERT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *s = json_load_file(sched.c_str(), 0, &e), *j = json_load_file(prof.c_str(), 0, &e);
    ASSERT_TRUE(s && j) << e.text;
    for (int r = 0; r < 2; r++) {
        double comm = 0;
        size_t i;
        json_t *op;
        json_array_foreach(json_object_get(json_array_get(json_object_get(s, "ranks"), (size_t)r), "ops"), i, op)
        if (json_object_get(op, "bytes"))
            comm += (double)json_integer_value(json_object_get(op, "bytes"));
        json_t *pr = json_array_get(json_object_get(j, "ranks"), (size_t)r);
        EXPECT_GT(comm, 0);
        EXPECT_EQ(json_number_value(json_object_get(pr, "collective_bytes")), comm) << "rank " << r;
    }
    json_decref(s);
    json_decref(j);
}

// --repeat on the CUDA backend: the same device arena for every step, the
// last step's logits the same as one step's, one time per step per rank.
TEST_F(EmulatedRun, RepeatGivesTheSameLogits)
{
    std::string sched = compile(dir, plan, 2, "bf16"), once = dir.path + "/once.npy", thrice = dir.path + "/thrice.npy",
                prof = dir.path + "/p.json";
    Proc p1 = run(kEmulated, 2, sched, {"--backend", "cuda", "--labels", "tokens", "--out", once, "-q"});
    ASSERT_EQ(p1.code(), 0) << p1.describe();
    Proc p3 = run(kEmulated, 2, sched,
                  {"--backend", "cuda", "--labels", "tokens", "--out", thrice, "--repeat", "3", "--profile-json", prof});
    ASSERT_EQ(p3.code(), 0) << p3.describe();
    EXPECT_TRUE(contains(p3.out, "(median of 3 steps)")) << p3.describe();
    EXPECT_EQ(slurp(once), slurp(thrice)) << "the third step's logits differ from one step's";
    json_error_t e;
    json_t *j = json_load_file(prof.c_str(), 0, &e);
    ASSERT_TRUE(j) << e.text;
    for (size_t r = 0; r < 2; r++)
        EXPECT_EQ(json_array_size(json_object_get(json_array_get(json_object_get(j, "ranks"), r), "steps")), 3u) << r;
    json_decref(j);
}

// The kernels the emulated runs launch while it lives (TP_EMU_LAUNCH_LOG,
// inherited by every rank), to show which a launcher chose; each log
// starts empty.
class LaunchLog {
  public:
    explicit LaunchLog(const TempDir &dir) : path_(dir.path + "/launches.txt")
    {
        fs::remove(path_);
        EXPECT_EQ(setenv("TP_EMU_LAUNCH_LOG", path_.c_str(), 1), 0);
    }
    ~LaunchLog() { unsetenv("TP_EMU_LAUNCH_LOG"); }
    LaunchLog(const LaunchLog &) = delete;
    LaunchLog &operator=(const LaunchLog &) = delete;
    bool ran(const std::string &kernel) const { return contains(slurp(path_), kernel); }

  private:
    std::string path_;
};

TEST_F(EmulatedRun, TensorCoreAttentionMatchesCpu)
{
    for (const auto &sizes : {kHeadDim64, kHeadDim128, kHeadDim96, kHeadDim256}) {
        LaunchLog log(dir);
        check_against_cpu(kEmulated, plan, {1}, false, sizes);
        EXPECT_TRUE(log.ran("flash_attention_kernel<D, kBarriers>")) << sizes[0];
        // -O1's rope_attention: in bf16 q and k rotated in the kernels' loads, from a table
        EXPECT_TRUE(log.ran("rope_table_kernel")) << sizes[0];
    }
}

// A bf16 training step where attention's gradients run on tensor cores
// too (attention_flash_grad.cuh), one sequence of 80: bf16 weights,
// activations and gradients put the first step's gradients within 1.4e-2
// (d 64, GQA), 1.3e-2 (d 128), 1.5e-2 (d 96) and 1.3e-2 (d 256, dv and
// dk with dq in two launches) of each tensor's largest entry of the CPU's
// fp32 step (measured; kTensorCoreTrainingBound is 5e-2). A dk off by half
// its scale is off by 0.5. Two tests of two head dimensions each, so that
// neither outlasts ctest's limit under the sanitizers.
struct TensorCoreCase {
    const char *name;
    const std::vector<std::string> &sizes;
    bool masked = false; /* padding and documents: masked_tokens, tpcc --segments */
};

void tensor_core_training(const TempDir &dir, const std::string &plan, const std::vector<TensorCoreCase> &cases)
{
    for (const TensorCoreCase &c : cases) {
        LaunchLog log(dir);
        std::vector<std::string> one = c.sizes;
        one.push_back("batch=1");
        std::printf("%s: first-step gradients within %.3g of each tensor's largest entry\n", c.name,
                    check_training_against_cpu(kEmulated, plan, false, one, kTensorCoreTrainingBound, c.masked));
        EXPECT_TRUE(log.ran("flash_attention_kernel<D, kBarriers>")) << c.name;
        EXPECT_FALSE(log.ran("rope_kernel<T>")) << c.name << ": q and k rotated in attention's loads";
        // every size here has several query heads a kv head: dk and dv split by query head
        for (const char *kernel : {"attention_dsum_kernel<T>", "flash_attention_grad_kernel<D, true, kPart, kTakeTurns>",
                                   "flash_dq_store_kernel", "flash_kv_reduce_kernel"})
            EXPECT_TRUE(log.ran(kernel)) << c.name << ": " << kernel;
        EXPECT_FALSE(log.ran("attention_dq_kernel<T>")) << c.name << ": the fp32 attention gradients ran";
    }
}

TEST_F(EmulatedRun, TensorCoreTrainingMatchesCpu)
{
    tensor_core_training(dir, plan, {{"d 64", kHeadDim64}, {"d 128", kHeadDim128}});
}

// The same bf16 step on a row of left padding and three documents (tpcc
// --segments, --pad-id, --eos-id): the tensor-core forward and gradient
// kernels mask by document and skip the tile no query of the last block
// reaches, against the CPU's fp32 step on the same masks.
TEST_F(EmulatedRun, MaskedTensorCoreTrainingMatchesCpu)
{
    tensor_core_training(dir, plan, {{"d 64, masked", kHeadDim64, true}});
}

TEST_F(EmulatedRun, TensorCoreTrainingMatchesCpuAtD96AndD256)
{
    tensor_core_training(dir, plan, {{"d 96", kHeadDim96}, {"d 256", kHeadDim256}});
}

// Attention masks (tpcc --segments, tprun --pad-id and --eos-id) on the
// CUDA backend: transformers' training on left-padded packed documents
// (tools/mask_fixtures.py), fp32 at tp 2: the positions by document, RoPE
// at them and the masked attention and its gradients take PyTorch's steps.
TEST_F(EmulatedRun, DocumentsTrainLikeTransformers)
{
    const std::string fixture = source_path("tests/fixtures/train/llama-documents/"), sched = dir.path + "/docs.sched",
                      log = dir.path + "/log.json";
    Proc c = run_program(kTpcc, {plan, "--hf-config", fixture + "config.json", "-D", "vocab_multiple=1", "-D", "tp=2",
                                 "-D", "seq=16", "-D", "batch=2", "--train", "--segments", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    Proc p = run(kEmulated, 2, sched, {"--backend", "cuda", "--weights", fixture, "--data", fixture + "tokens.npy",
                                       "--labels", fixture + "labels.npy", "--pad-id", "0", "--eos-id", "2", "--steps",
                                       "5", "--warmup", "2", "--log-json", log, "-q"});
    ASSERT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *got = json_load_file(log.c_str(), 0, &e), *ref = json_load_file((fixture + "train.json").c_str(), 0, &e);
    ASSERT_TRUE(got && ref) << e.text;
    json_t *steps = json_object_get(got, "steps"), *want = json_object_get(ref, "steps");
    ASSERT_EQ(json_array_size(steps), json_array_size(want));
    for (size_t i = 0; i < json_array_size(want); i++) {
        const double a = json_number_value(json_object_get(json_array_get(steps, i), "loss")),
                     b = json_number_value(json_object_get(json_array_get(want, i), "loss"));
        EXPECT_NEAR(a, b, 1e-5 * b) << "step " << i + 1;
    }
    json_decref(got);
    json_decref(ref);
}

// tpcc --report's memory of a step (a training step when `train`) is what
// tprun's CUDA backend allocates: each rank's peak of device memory
// (TP_STANDIN_DEVICE_PEAK) over a step at tp 2 is the report's total and
// the bytes tprun adds to its buffers: one to each of the arena, the
// weights and the two staging buffers, and for training one to each of
// AdamW's two moments and the bf16 schedule's master weights, and the
// optimizer's two floats of sums. `scratch_floats` is the CUDA kernels'
// scratch the report must find. Leaving out any part of the workspace
// (staging, cuBLAS's, the scratch) is off by kilobytes to megabytes.
// `recompute`: a training step's activation recomputation.
void expect_report_is_the_peak(const TempDir &dir, const std::string &plan, const std::vector<std::string> &sizes,
                               const std::string &dtype, json_int_t scratch_floats, bool train = true,
                               const std::string &recompute = "none")
{
    const std::string tokens = source_path("tests/fixtures/train/llama/tokens.npy");
    const std::string what = fs::path(plan).stem().string() + " " + dtype +
                             (train ? " training, recompute " + recompute : " forward");
    const std::vector<std::string> modes = {"--recompute", recompute};
    std::vector<std::string> args = {plan, "--report", "--report-format=json", "--dtype", dtype};
    if (train)
        args.insert(args.end(), {"--train", "--recompute", recompute});
    for (auto &f : tiny(plan, 2, sizes))
        args.push_back(f);
    Proc report = run_program(kTpcc, args);
    ASSERT_EQ(report.code(), 0) << report.describe();
    json_error_t error;
    json_t *root = json_loads(report.out.c_str(), 0, &error);
    ASSERT_NE(root, nullptr) << error.text << "\n" << report.out;
    json_t *step = json_object_get(root, train ? "training" : "forward"), *workspace = json_object_get(step, "workspace");
    json_int_t total = json_integer_value(json_object_get(step, "total_bytes"));
    json_int_t scratch = json_integer_value(json_object_get(workspace, "cuda_scratch_bytes"));
    json_int_t staging = json_integer_value(json_object_get(workspace, "staging_bytes"));
    json_decref(root);
    EXPECT_EQ(scratch, scratch_floats * (json_int_t)sizeof(float)) << what;
    EXPECT_GT(staging, 0) << what;

    std::string peaks = dir.path + "/peak.txt";
    fs::remove(peaks);
    std::vector<std::string> run_args = {"--backend", "cuda", "-q"};
    if (train)
        run_args.insert(run_args.end(), {"--steps", "1", "--data", tokens});
    else
        run_args.insert(run_args.end(), {"--labels", "tokens"});
    Proc p = run(kEmulated, 2, compile(dir, plan, 2, dtype, sizes, train, train ? modes : std::vector<std::string>{}),
                 run_args, {"TP_STANDIN_DEVICE_PEAK=" + peaks});
    ASSERT_EQ(p.code(), 0) << p.describe();
    std::istringstream lines(slurp(peaks));
    const json_int_t padding = train ? (dtype == "bf16" ? 7 : 6) + 2 * (json_int_t)sizeof(float) : 4;
    int ranks = 0;
    for (json_int_t peak; lines >> peak; ranks++)
        EXPECT_EQ(peak, total + padding) << what;
    EXPECT_EQ(ranks, 2) << what;
}

// A rank holds 2 query heads of 64 over 80 positions. Llama with a kv head
// for the two: bf16 splits dk and dv by query head, whose sums are most of
// the scratch, then dq's fp32 sum and its turns (2 ints a tile of 16
// queries), fp32 keeps only each query's D = dy . O. GPT-2 (LayerNorm, a
// kv head a query head, tied weights): in bf16 D, dq's sum and the turns,
// no split. Llama with a hidden size of 68: norm weights of 68 leave gaps
// in the weight region, where each weight starts at a multiple of 8
// elements.
constexpr json_int_t kDsum = 80 * 2, kSplitSums = 2 * 80 * 2 * 64, kDqSum = 80 * 2 * 64, kTurns = 2 * 2 * 5;

// Llama's attention rotates q and k (-O1's rope_attention). In bf16 the
// tensor-core kernels rotate them as they load them, reading a table of
// cos and sin, a float each for each of the 32 frequencies at each of the
// 80 positions; in fp32 the rope kernel rotates copies into scratch, q's
// 80 x 2 x 64 and k's 80 x 64 floats. The gradient's scratch starts with
// attention's gradient's, rounded up to 64 floats, then holds the table,
// or the rotated q and k and their gradients. The ragged Llama's rank
// holds one query and one kv head of 34, each part rounded up to 64 floats.
constexpr json_int_t kRopeTable = 80 * 64, kRotatedFp32 = 80 * 2 * 64 + 80 * 64, kRotatedRagged = 2 * 2752;
constexpr json_int_t round64(json_int_t floats) { return (floats + 63) / 64 * 64; }

TEST_F(EmulatedRun, TrainingStepHoldsWhatTheReportSays)
{
    std::vector<std::string> sizes = kHeadDim64;
    sizes.push_back("batch=1");
    expect_report_is_the_peak(dir, plan, sizes, "bf16", round64(kDsum + kSplitSums + kDqSum + kTurns) + kRopeTable);
    expect_report_is_the_peak(dir, plan, sizes, "fp32", round64(kDsum) + 2 * kRotatedFp32);
}

// The same for GPT-2 and the ragged Llama (a test of its own: each
// emulated step is slow under the sanitizers).
TEST_F(EmulatedRun, TrainingStepOfGpt2AndRaggedHiddenHoldsWhatTheReportSays)
{
    const std::vector<std::string> gpt2 = {"hidden=256", "heads=4", "ffn=256", "seq=80", "positions=128", "batch=1"};
    expect_report_is_the_peak(dir, source_path("plans/gpt2-sp-tied.plan"), gpt2, "bf16", kDsum + kDqSum + kTurns);
    const std::vector<std::string> ragged = {"hidden=68", "heads=2", "kv_heads=2", "ffn=256", "seq=80", "batch=1"};
    expect_report_is_the_peak(dir, plan, ragged, "fp32", round64(80 * 1) + 2 * kRotatedRagged);
}

// Recomputation changes the arena only, which the report follows: at
// batch 2 (twice the scratch) full recomputation takes 8% off it, and the
// peak is still the report's total. (Selective's arena against the report:
// Recompute.ReportedArenaFallsFullBelowSelectiveBelowNone; one case here,
// as each emulated step is slow under the sanitizers.)
TEST_F(EmulatedRun, TrainingStepWithRecomputationHoldsWhatTheReportSays)
{
    std::vector<std::string> two = kHeadDim64;
    two.push_back("batch=2");
    expect_report_is_the_peak(dir, plan, two, "bf16", round64(2 * (kDsum + kSplitSums + kDqSum + kTurns)) + 2 * kRopeTable,
                              true, "full");
}

// Activation recomputation on the CUDA backend, in bf16 with the
// tensor-core attention: the recomputed ops run the forward's kernels on
// the forward's inputs, so two steps at tp 2 give the gradients, losses
// and norms of no recomputation, bit for bit.
TEST_F(EmulatedRun, RecomputationChangesNoBitOfABf16Step)
{
    const std::string tokens = source_path("tests/fixtures/train/llama/tokens.npy");
    // head dimension 64 (tensor cores) at a size the sanitizers' build
    // emulates in seconds
    const std::vector<std::string> sizes = {"hidden=128", "heads=2", "kv_heads=2", "ffn=128", "seq=32", "batch=1"};
    std::vector<std::string> grads;
    std::vector<std::vector<double>> logged;   // each step's loss and gradient norm
    for (const char *mode : {"none", "full", "selective"}) {
        std::string g = dir.path + "/grads-" + mode + ".safetensors", log = dir.path + "/log-" + mode + ".json";
        Proc p = run(kEmulated, 2, compile(dir, plan, 2, "bf16", sizes, true, {"--recompute", mode}),
                     {"--backend", "cuda", "--steps", "2", "--data", tokens, "--grads-out", g, "--log-json", log, "-q"});
        ASSERT_EQ(p.code(), 0) << mode << ": " << p.describe();
        grads.push_back(slurp(g));
        json_error_t e;
        json_t *root = json_load_file(log.c_str(), 0, &e);
        ASSERT_NE(root, nullptr) << e.text;
        std::vector<double> numbers;
        size_t i;
        json_t *step;
        json_array_foreach(json_object_get(root, "steps"), i, step) {
            numbers.push_back(json_number_value(json_object_get(step, "loss")));
            numbers.push_back(json_number_value(json_object_get(step, "grad_norm")));
        }
        json_decref(root);
        logged.push_back(numbers);
    }
    EXPECT_FALSE(grads[0].empty());
    EXPECT_EQ(logged[0].size(), 4u);
    for (size_t m = 1; m < grads.size(); m++) {
        EXPECT_TRUE(grads[m] == grads[0]) << "mode " << m << ": the gradients differ";
        EXPECT_EQ(logged[m], logged[0]) << "mode " << m;
    }
}

// A forward step: the weights, the arena, the staging and cuBLAS's
// workspace; its kernels ask for no scratch but Llama's rope table (bf16)
// or rotated q and k (fp32).
TEST_F(EmulatedRun, ForwardStepHoldsWhatTheReportSays)
{
    std::vector<std::string> sizes = kHeadDim64;
    sizes.push_back("batch=1");
    expect_report_is_the_peak(dir, plan, sizes, "bf16", kRopeTable, false);
    const std::vector<std::string> ragged = {"hidden=68", "heads=2", "kv_heads=2", "ffn=256", "seq=80", "batch=1"};
    expect_report_is_the_peak(dir, plan, ragged, "fp32", kRotatedRagged, false);
    const std::vector<std::string> gpt2 = {"hidden=256", "heads=4", "ffn=256", "seq=80", "positions=128", "batch=1"};
    expect_report_is_the_peak(dir, source_path("plans/gpt2-sp-tied.plan"), gpt2, "bf16", 0, false);
}

// Where a GPU is usable the default backend is cuda; where none is, cpu.
TEST_F(EmulatedRun, DefaultBackendFollowsTheDevices)
{
    std::string sched = compile(dir, plan, 1, "fp32");
    Proc gpu = run(kEmulated, 1, sched, {"--labels", "tokens"});
    EXPECT_EQ(gpu.code(), 0) << gpu.describe();
    EXPECT_TRUE(contains(gpu.out, "cuda backend")) << gpu.describe();
    Proc none = run(kEmulated, 1, sched, {"--labels", "tokens"}, {"TP_STANDIN_DEVICES=0"});
    EXPECT_EQ(none.code(), 0) << none.describe();
    EXPECT_TRUE(contains(none.out, "cpu backend")) << none.describe();
}

TEST_F(EmulatedRun, BackendCudaWithoutDeviceOrDriverSaysSo)
{
    std::string sched = compile(dir, plan, 1, "fp32");
    Proc none = run(kEmulated, 1, sched, {"--backend", "cuda"}, {"TP_STANDIN_DEVICES=0"});
    EXPECT_EQ(none.code(), 2) << none.describe();
    EXPECT_TRUE(contains(none.err, "no CUDA device: no CUDA-capable device is detected (driver not found / no GPU)"))
        << none.describe();
    Proc nodriver = run(kEmulated, 1, sched, {"--backend", "cuda"}, {"TP_STANDIN_NO_DRIVER=1"});
    EXPECT_EQ(nodriver.code(), 2) << nodriver.describe();
    EXPECT_TRUE(contains(nodriver.err, "no CUDA device: CUDA driver version is insufficient")) << nodriver.describe();
    // four ranks on a node showing two GPUs share them: NCCL needs one per
    // rank, so the collectives stage through host memory, with a warning
    // from rank 0 (StagedComm* below)
    Proc two = run(kEmulated, 4, compile(dir, plan, 4, "fp32"), {"--backend", "cuda", "--labels", "tokens"},
                   {"TP_STANDIN_DEVICES=2"}, 120);
    EXPECT_FALSE(two.timed_out) << two.describe();
    EXPECT_EQ(two.code(), 0) << two.describe();
    EXPECT_TRUE(contains(two.err, "tprun: warning: 4 ranks share 2 GPUs on node 0 (")) << two.describe();
    EXPECT_TRUE(contains(two.out, "(4 ranks, cuda backend, mpi-staged collectives)")) << two.describe();
}

// A collective that never completes (a rank stalls inside it): the
// watchdog of TPRUN_NCCL_TIMEOUT ends every rank, naming the collective.
TEST_F(EmulatedRun, StalledCollectiveEndsEveryRank)
{
    Proc p = run(kEmulated, 2, compile(dir, plan, 2, "fp32"), {"--backend", "cuda", "--labels", "tokens"},
                 {"TP_STANDIN_NCCL_STALL_RANK=1", "TPRUN_NCCL_TIMEOUT=2"}, 60);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.err, "has not completed after 2 s")) << p.describe();
    EXPECT_TRUE(contains(p.err, "aborting NCCL and ending every rank")) << p.describe();
}

// An asynchronous NCCL error on one rank: reported with the op, every rank ends.
TEST_F(EmulatedRun, AsyncNcclErrorEndsEveryRank)
{
    Proc p = run(kEmulated, 2, compile(dir, plan, 2, "fp32"), {"--backend", "cuda", "--labels", "tokens"},
                 {"TP_STANDIN_NCCL_ERROR_RANK=1"}, 60);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.err, "rank 1")) << p.describe();
    EXPECT_TRUE(contains(p.err, "NCCL reports an asynchronous error: remote process exited")) << p.describe();
}

// A failing call inside the backend (here cuBLAS, on rank 1): the message
// names the rank, the schedule op, the call and where it is; every rank ends.
TEST_F(EmulatedRun, FailingGemmNamesTheOpAndEndsEveryRank)
{
    Proc p = run(kEmulated, 2, compile(dir, plan, 2, "fp32"), {"--backend", "cuda", "--labels", "tokens"}, {"TP_STANDIN_GEMM_FAIL=1:3"}, 60);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.err, "tprun: rank 1: cuBLAS error in op ")) << p.describe();
    EXPECT_TRUE(contains(p.err, "op 6 (matmul in 'model.layers.0.self_attn.v_proj')")) << p.describe();
    EXPECT_TRUE(contains(p.err, "cublasSgemm(")) << p.describe();
    EXPECT_TRUE(contains(p.err, "failed: the GPU program failed to execute [backend_cuda.c:")) << p.describe();
}

// TPRUN_CUDA_SYNC=1 checks after every backend call; the results are the same.
TEST_F(EmulatedRun, SyncEachOpGivesTheSameLogits)
{
    std::string ref = dir.path + "/cpu.npy";
    cpu_reference(dir, plan, ref);
    Proc p = run(kEmulated, 2, compile(dir, plan, 2, "bf16"),
                 {"--backend", "cuda", "--labels", "tokens", "--compare", ref, "--tolerance", kBf16Tolerance}, {"TPRUN_CUDA_SYNC=1"});
    EXPECT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
}

TEST_F(EmulatedRun, BadTimeoutIsRefused)
{
    Proc p = run(kEmulated, 2, compile(dir, plan, 2, "fp32"), {"--backend", "cuda", "--labels", "tokens"}, {"TPRUN_NCCL_TIMEOUT=soon"}, 60);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.err, "TPRUN_NCCL_TIMEOUT takes a positive number of seconds, not 'soon'")) << p.describe();
}

// A schedule the CPU backend runs whose sizes pass a limit of the CUDA
// kernels (runtime/kernels/launch_limits.h) is refused
// before anything is allocated or loaded, with the op, the size, the limit
// and what to do: a non-zero exit, no abort, no output. Head dimension 320:
// attention holds at most 256 (at tp 1 and 2, fp32 and bf16).
TEST_F(EmulatedRun, ScheduleBeyondAKernelLimitIsRefusedBeforeItRuns)
{
    struct Case {
        std::vector<std::string> sizes;
        int tp;
        std::string dtype, expect;
    };
    // -O1 rotates q and k in the attention, whose head_dim bound (256)
    // keeps its rotary dims within rope's (512)
    const std::string attention = "(rope_attention in 'model.layers.0.self_attn'): head_dim 320 is above the cuda "
                                  "backend's limit of 256; ";
    const std::vector<Case> cases = {
        {{"hidden=640", "heads=2", "kv_heads=2"}, 1, "fp32", attention},
        {{"hidden=640", "heads=2", "kv_heads=2"}, 2, "bf16", attention},
    };
    const std::string out = dir.path + "/logits.npy";
    for (const Case &c : cases) {
        std::string sched = compile(dir, plan, c.tp, c.dtype, c.sizes);
        std::string what = "tp " + std::to_string(c.tp) + " " + c.dtype;
        Proc gpu = run(kEmulated, c.tp, sched, {"--backend", "cuda", "--labels", "tokens", "--out", out}, {}, 60);
        EXPECT_FALSE(gpu.timed_out) << what << "\n" << gpu.describe();
        EXPECT_EQ(gpu.code(), 1) << what << "\n" << gpu.describe();
        EXPECT_TRUE(contains(gpu.err, c.expect)) << what << "\n" << gpu.describe();
        EXPECT_TRUE(contains(gpu.err, "; run the schedule with --backend cpu, or compile it for a model with a "
                                      "smaller head dimension\n"))
            << gpu.describe();
        EXPECT_FALSE(contains(gpu.err, "kernel precondition failed")) << gpu.describe();
        EXPECT_FALSE(fs::exists(out)) << what;
        if (c.dtype == "bf16")
            continue;   // the CPU backend computes fp32 schedules
        Proc cpu = run(kEmulated, c.tp, sched, {"--backend", "cpu", "--labels", "tokens", "--out", out});
        EXPECT_EQ(cpu.code(), 0) << what << "\n" << cpu.describe();
        EXPECT_TRUE(fs::exists(out)) << what;
        fs::remove(out);
    }
}

// ---- data parallelism: NCCL communicators split per dp and tp group ----

// The dp x tp variant of llama-sp on the llama training fixture, its
// weights and two steps of tokens (dp 2 x batch 2 x seq 16 each): for the
// emulated CUDA backend here, and for real GPUs (GpuDataParallel).
class DataParallelRuns : public ::testing::Test {
protected:
    void SetUp() override
    {
        ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
        ASSERT_NO_FATAL_FAILURE(dp_plan(dir, dp));
        std::vector<int32_t> toks;
        for (int i = 0; i < 2 * 64; i++)
            toks.push_back(int32_t((i * 37 + i / 16) % 128));
        data = dir.write("tokens.bin", llmc(20240801, 7, toks));
    }
    // `plan` (default: dp) compiled for dp_size x tp ranks
    std::string sched(int dp_size, int tp, int batch, const std::string &dtype = "fp32", const std::string &plan = "")
    {
        std::string out = dir.path + "/" + fs::path(plan.empty() ? dp : plan).stem().string() + "-dp" +
                          std::to_string(dp_size) + "tp" + std::to_string(tp) + dtype + ".sched";
        Proc c = compile_dp(plan.empty() ? dp : plan, dp_size, tp, batch, out, true, dtype);
        EXPECT_EQ(c.code(), 0) << c.describe();
        return out;
    }
    std::vector<std::string> train_args(int steps) const
    {
        return {"--weights", weights, "--data", data, "--steps", std::to_string(steps), "--schedule", "constant"};
    }
    // Two steps of `program` on the dp x tp schedule of `plan` (default:
    // dp; the CPU on one rank: dp 1, tp 1, the global batch of 4) with
    // `extra` arguments: the losses, and the first step's full gradients;
    // the run, to tell a missing GPU. --backend cpu for kTprun unless
    // `extra` names a backend, else cuda.
    struct Steps {
        std::vector<double> losses;
        std::vector<std::vector<float>> grads;
        Proc run;
    };
    Steps two_steps(const std::string &program, int dp_size, int tp, const std::string &dtype = "fp32",
                    const std::vector<std::string> &extra = {}, const std::string &plan = "",
                    const std::vector<std::string> &env = {})
    {
        std::string tag = fs::path(plan.empty() ? dp : plan).stem().string() + "-dp" + std::to_string(dp_size) + "tp" +
                          std::to_string(tp) + dtype + std::to_string(runs++),
                    s = sched(dp_size, tp, 4 / dp_size, dtype, plan), log = dir.path + "/" + tag + ".json",
                    g = dir.path + "/" + tag + "-grads.safetensors";
        std::vector<std::string> args = train_args(2);
        args.insert(args.end(), {"--log-json", log, "--grads-out", g, "-q"});
        if (std::find(extra.begin(), extra.end(), "--backend") == extra.end())
            args.insert(args.end(), {"--backend", program == kTprun ? "cpu" : "cuda"});
        args.insert(args.end(), extra.begin(), extra.end());
        Steps steps;
        steps.run = run(program, dp_size * tp, s, args, env);
        if (steps.run.code() == 0)
            steps = {logged_losses(log), read_weights_of(g, s), steps.run};
        return steps;
    }
    // The CUDA backend's steps at dp 2 x tp against the CPU's on one rank.
    void check_against_cpu(int tp, const std::vector<std::string> &extra = {})
    {
        Steps want = two_steps(kTprun, 1, 1), got = two_steps(kEmulated, 2, tp, "fp32", extra);
        ASSERT_EQ(want.run.code(), 0) << want.run.describe();
        ASSERT_EQ(got.run.code(), 0) << got.run.describe();
        ASSERT_EQ(want.losses.size(), 2u);
        ASSERT_EQ(got.losses.size(), 2u);
        for (size_t i = 0; i < 2; i++)
            EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << "step " << i + 1;
        double worst = worst_relative(got.grads, want.grads);
        EXPECT_LT(worst, 1e-4);
        std::printf("first-step gradients within %.3g of each tensor's largest entry\n", worst);
    }
    TempDir dir;
    std::string dp, data, weights = source_path("tests/fixtures/train/llama/");
    int runs = 0;     /* tells the logs of two runs of one schedule apart */
};

class EmulatedDataParallel : public DataParallelRuns {
protected:
    void SetUp() override
    {
        ASSERT_FALSE(kEmulated.empty()) << kEmulatedNotBuilt;
        ASSERT_NO_FATAL_FAILURE(DataParallelRuns::SetUp());
    }
};

// dp 2 x tp 2 on 4 ranks and dp 2 x tp 1 on 2 ranks of the CUDA backend
// (the tp collectives on each replica's group, the gradient averaging on
// each tp rank's) take the steps the CPU backend takes on one rank with
// the global batch of 4: tolerances of TrainRun.DataParallelEqualsOneRank
// OnTheGlobalBatch (losses 1e-5 relative, first-step gradients 1e-4 of
// each tensor's largest entry).
TEST_F(EmulatedDataParallel, Dp2Tp2EqualsTheCpuOnOneRank) { check_against_cpu(2); }

TEST_F(EmulatedDataParallel, Dp2Tp1EqualsTheCpuOnOneRank) { check_against_cpu(1); }

// bf16 with fp32 masters at dp 2 x tp 2 tracks fp32 on the CPU on one rank
// with the global batch: the gradients averaged over dp in bf16, then the
// masters' update. Tolerances of Bf16Training.TracksFp32TrainingOnTheCpu
// for the losses (5e-3 relative; measured 1.6e-4 and 4.0e-4). The first
// step's gradients, rounded to bf16 throughout, were measured within 7.6e-2
// of each tensor's largest entry (7.4e-2 for bf16 on one rank: dp adds
// nothing); the bound, 0.15, still catches gradients summed instead of
// averaged over dp (off by 100%) or left per replica.
TEST_F(EmulatedDataParallel, Dp2Tp2Bf16TracksTheCpuOnOneRank)
{
    Steps want = two_steps(kTprun, 1, 1), got = two_steps(kEmulated, 2, 2, "bf16");
    ASSERT_EQ(want.losses.size(), 2u);
    ASSERT_EQ(got.losses.size(), 2u);
    for (size_t i = 0; i < 2; i++)
        EXPECT_NEAR(got.losses[i], want.losses[i], 5e-3 * want.losses[i]) << "step " << i + 1;
    double worst = worst_relative(got.grads, want.grads);
    EXPECT_LT(worst, 0.15);
    std::printf("losses %.6f %.6f (fp32 %.6f %.6f); first-step gradients within %.3g of each tensor's largest entry\n",
                got.losses[0], got.losses[1], want.losses[0], want.losses[1], worst);
}

// ZeRO-1 (train { shard = "optimizer" }) on the CUDA backend: the CPU's
// steps on one rank with the global batch (fp32: losses 1e-5 relative,
// norms 1e-5, first-step gradients 1e-4 of each tensor's scale; bf16 with
// fp32 masters: losses 5e-3 and gradients 0.15, as above), clipping at 0.5
// every step so a wrong norm moves the losses; fp32 at dp 2 x tp 2 and
// bf16 at dp 3 x tp 1 (runs padded, a rank holding none of the norms);
// ZeRO-2 (shard = "gradients", the schedule's dp_reduce_scatter ops on
// the device) in bf16 at dp 2 x tp 2; and FSDP (shard = "parameters",
// the weights kept as runs and gathered by the schedule's dp_all_gather
// ops) in fp32 at dp 3 x tp 1, saved and resumed.
// Each rank's peak of device memory, a --save (and at dp 2 a --resume)
// included, is what tpcc --report --train says to the byte: the
// replicated step's parts with the moments and masters at their runs,
// plus ZeRO's gradient runs and staging, and one byte of padding each of
// tprun's buffers (expect_report_is_the_peak's, and ZeRO's three).
TEST_F(EmulatedDataParallel, ShardedDataParallelTakesTheCpuStepsAndHoldsWhatTheReportSays)
{
    std::string sharded, grads_sharded, fsdp;
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, sharded, "plans/llama-sp.plan", "shard = \"optimizer\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, grads_sharded, "plans/llama-sp.plan", "shard = \"gradients\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, fsdp, "plans/llama-sp.plan", "shard = \"parameters\","));
    const std::vector<std::string> clip = {"--max-grad-norm", "0.5"};
    std::vector<int32_t> toks;
    for (int i = 0; i < 3 * 96; i++)
        toks.push_back(int32_t((i * 37 + i / 16) % 128));     // three steps of 6 x 16
    const std::string data6 = dir.write("tokens6.bin", llmc(20240801, 7, toks));
    auto args_for = [&](int steps) {
        std::vector<std::string> a = {"--data", data6, "--steps", std::to_string(steps), "--schedule", "constant", "-q"};
        a.insert(a.end(), clip.begin(), clip.end());
        return a;
    };
    auto logged = [](const std::string &log, const char *key) {
        std::vector<double> v;
        json_error_t e;
        json_t *got = json_load_file(log.c_str(), 0, &e);
        size_t i;
        json_t *step;
        json_array_foreach(json_object_get(got, "steps"), i, step)
            v.push_back(json_number_value(json_object_get(step, key)));
        json_decref(got);
        return v;
    };
    // the CPU on one rank, global batch 6 (dp 2 of 3 or dp 3 of 2)
    std::string ref = dir.path + "/zero-ref.sched", ref_log = dir.path + "/zero-ref.json",
                ref_grads = dir.path + "/zero-ref-grads.safetensors";
    ASSERT_EQ(compile_dp(dp, 1, 1, 6, ref).code(), 0);
    std::vector<std::string> ref_args = args_for(2);
    ref_args.insert(ref_args.end(), {"--weights", weights, "--backend", "cpu", "--log-json", ref_log, "--grads-out",
                                     ref_grads});
    Proc cpu = run(kTprun, 1, ref, ref_args);
    ASSERT_EQ(cpu.code(), 0) << cpu.describe();
    std::vector<double> want = logged(ref_log, "loss"), want_norms = logged(ref_log, "grad_norm");
    std::vector<std::vector<float>> want_grads = read_weights_of(ref_grads, ref);
    ASSERT_EQ(want.size(), 2u);

    struct Case { int dp, tp; std::string dtype; bool resume; const std::string &plan; const char *stage; };
    for (Case c : {Case{2, 2, "fp32", true, sharded, "zero"}, Case{3, 1, "bf16", false, sharded, "zero"},
                   Case{2, 2, "bf16", false, grads_sharded, "zero2"}, Case{3, 1, "fp32", true, fsdp, "fsdp"}}) {
        std::string tag = c.stage + std::string("-dp") + std::to_string(c.dp) + "tp" + std::to_string(c.tp) + c.dtype,
                    s = dir.path + "/" + tag + ".sched", log = dir.path + "/" + tag + ".json",
                    peaks = dir.path + "/" + tag + "-peak.txt", g = dir.path + "/" + tag + "-grads.safetensors",
                    save = dir.path + "/" + tag + "-save";
        Proc compiled = compile_dp(c.plan, c.dp, c.tp, 6 / c.dp, s, true, c.dtype);
        ASSERT_EQ(compiled.code(), 0) << compiled.describe();
        Proc report = run_program(kTpcc, {c.plan, "--hf-config", weights + "config.json", "-D", "vocab_multiple=1",
                                          "-D", "dp=" + std::to_string(c.dp), "-D", "tp=" + std::to_string(c.tp),
                                          "-D", "seq=16", "-D", "batch=" + std::to_string(6 / c.dp), "--dtype",
                                          c.dtype, "--train", "--report", "--report-format=json"});
        ASSERT_EQ(report.code(), 0) << report.describe();
        json_error_t error;
        json_t *root = json_loads(report.out.c_str(), 0, &error);
        ASSERT_NE(root, nullptr) << error.text;
        json_t *step = json_object_get(root, "training");
        json_int_t total = json_integer_value(json_object_get(step, "total_bytes"));
        EXPECT_GT(json_integer_value(json_object_get(json_object_get(step, "workspace"), "dp_shard_bytes")), 0);
        json_decref(root);

        std::vector<std::string> args = args_for(2);
        args.insert(args.end(), {"--weights", weights, "--backend", "cuda", "--log-json", log, "--grads-out", g,
                                 "--save", save});
        Proc t = run(kEmulated, c.dp * c.tp, s, args, {"TP_STANDIN_DEVICE_PEAK=" + peaks});
        ASSERT_EQ(t.code(), 0) << tag << ": " << t.describe();
        // and resumed from it: the peak of a resume is a step's too
        if (c.resume) {
            std::vector<std::string> again = args_for(3);
            again.insert(again.end(), {"--resume", save, "--backend", "cuda"});
            Proc resumed = run(kEmulated, c.dp * c.tp, s, again, {"TP_STANDIN_DEVICE_PEAK=" + peaks});
            ASSERT_EQ(resumed.code(), 0) << tag << ": " << resumed.describe();
        }

        std::vector<double> losses = logged(log, "loss"), norms = logged(log, "grad_norm");
        ASSERT_EQ(losses.size(), 2u);
        bool fp32 = c.dtype == "fp32";
        for (size_t i = 0; i < 2; i++) {
            EXPECT_NEAR(losses[i], want[i], (fp32 ? 1e-5 : 5e-3) * want[i]) << tag << " step " << i + 1;
            EXPECT_NEAR(norms[i], want_norms[i], (fp32 ? 1e-5 : 5e-2) * want_norms[i]) << tag << " step " << i + 1;
        }
        EXPECT_LT(worst_relative(read_weights_of(g, ref), want_grads), fp32 ? 1e-4 : 0.15) << tag;
        const json_int_t padding = (fp32 ? 6 : 7) + 2 * (json_int_t)sizeof(float) + 3;
        std::istringstream lines(slurp(peaks));
        int ranks = 0;
        for (json_int_t peak; lines >> peak; ranks++)
            EXPECT_EQ(peak, total + padding) << tag << " rank " << ranks % (c.dp * c.tp);
        EXPECT_EQ(ranks, (c.resume ? 2 : 1) * c.dp * c.tp) << tag;   // the training run's and the resumed run's
    }
}

// A collective of a dp group that never completes (rank 1 stalls in its
// first gradient all-reduce: the third communicator it makes, after the
// world's and its tp group's) ends every rank, naming the group. Whichever
// watchdog fires first ends the job: rank 1's or its dp peer's (rank 3),
// or a tp peer's waiting on rank 1 in a later collective.
TEST_F(EmulatedDataParallel, StallInADpGroupEndsEveryRank)
{
    std::vector<std::string> args = train_args(1);
    args.insert(args.end(), {"--backend", "cuda", "-q"});
    Proc p = run(kEmulated, 4, sched(2, 2, 2), args,
                 {"TP_STANDIN_NCCL_STALL_RANK=1", "TP_STANDIN_NCCL_FAULT_COMM=2", "TPRUN_NCCL_TIMEOUT=2"}, 120);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(std::regex_search(p.err, std::regex("rank [0-3]: collective [0-9]+ \\([^)]*\\) in group [01] "
                                                   "\\(rank [01] of 2\\) has not completed after 2 s")))
        << p.describe();
    EXPECT_TRUE(contains(p.err, "aborting NCCL and ending every rank")) << p.describe();
}

// An asynchronous NCCL error in rank 3's dp group: reported with the rank
// and the group, every rank ends.
TEST_F(EmulatedDataParallel, NcclErrorInADpGroupEndsEveryRank)
{
    std::vector<std::string> args = train_args(1);
    args.insert(args.end(), {"--backend", "cuda", "-q"});
    Proc p = run(kEmulated, 4, sched(2, 2, 2), args, {"TP_STANDIN_NCCL_ERROR_RANK=3", "TP_STANDIN_NCCL_FAULT_COMM=2"},
                 120);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.err, "tprun: rank 3: averaging the gradient of ")) << p.describe();
    EXPECT_TRUE(contains(p.err, " over the 2 data-parallel replicas: NCCL reports an asynchronous error in group 1 "
                                "(rank 1 of 2): remote process exited"))
        << p.describe();
}

// ---- collectives staged through host memory over MPI (--comm mpi) -------------------------

// tp 2 through the host-staged communicator (runtime/backends/cuda/comm_staged.c):
// the CPU's logits and loss in fp32 and bf16, within the tolerances NCCL's
// runs meet (CudaBackendMatchesCpuAtTp1And2).
TEST_F(EmulatedRun, StagedCommAtTp2MatchesCpu) { check_against_cpu(kEmulated, plan, {2}, false, {}, "mpi"); }

// Two ranks on one GPU without --comm: NCCL would refuse them, so tprun
// stages the collectives through host memory, saying so once (rank 0), and
// the logits are the CPU's; --comm nccl there is an error; -q silences the
// warning.
TEST_F(EmulatedRun, RanksSharingAGpuStageTheirCollectives)
{
    std::string ref = dir.path + "/cpu.npy";
    cpu_reference(dir, plan, ref);
    std::string sched = compile(dir, plan, 2, "fp32");
    const std::vector<std::string> one_gpu = {"TP_STANDIN_DEVICES=1"};
    Proc p = run(kEmulated, 2, sched, {"--backend", "cuda", "--labels", "tokens", "--compare", ref}, one_gpu);
    EXPECT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
    EXPECT_TRUE(contains(p.out, "(2 ranks, cuda backend, mpi-staged collectives)")) << p.describe();
    EXPECT_TRUE(std::regex_search(p.err, std::regex("tprun: warning: 2 ranks share 1 GPU on node 0 \\([^)]+\\): NCCL "
                                                    "needs one GPU per rank; collectives stage through host memory "
                                                    "over MPI \\(--comm mpi\\)\n")))
        << p.describe();
    EXPECT_EQ(p.err.find("warning"), p.err.rfind("warning")) << "printed once: " << p.describe();
    Proc quiet = run(kEmulated, 2, sched, {"--backend", "cuda", "--labels", "tokens", "-q"}, one_gpu);
    EXPECT_EQ(quiet.code(), 0) << quiet.describe();
    EXPECT_FALSE(contains(quiet.err, "warning")) << quiet.describe();
    Proc nccl = run(kEmulated, 2, sched, {"--backend", "cuda", "--comm", "nccl", "--labels", "tokens"}, one_gpu, 60);
    EXPECT_FALSE(nccl.timed_out) << nccl.describe();
    EXPECT_NE(nccl.code(), 0) << nccl.describe();
    EXPECT_TRUE(contains(nccl.err, "2 ranks share 1 GPU on node 0 (")) << nccl.describe();
    EXPECT_TRUE(contains(nccl.err, "NCCL (--comm nccl) needs one GPU per rank; give --comm mpi")) << nccl.describe();
}

// Training at tp 2 (dp 1) and dp 2 x tp 2 through the staged communicator
// takes the CPU's steps on one rank with the global batch (fp32: losses
// 1e-5 relative, first-step gradients 1e-4 of each tensor's largest entry,
// as Dp2Tp2EqualsTheCpuOnOneRank), and NCCL's steps bit for bit, fp32 and
// bf16: the stand-in's NCCL reduces as the staged path does (float32 sums
// of every rank's values, rounded to bf16 once), as NCCL itself does over
// two ranks. An asynchronous NCCL error injected on rank 0 shows NCCL
// is not on the path: the staged runs never create one. Skipping
// the copy back, or rounding the bf16 sums any other way, fails here.
TEST_F(EmulatedDataParallel, StagedCommTakesTheCpuStepsAndNcclsBitForBit)
{
    const std::vector<std::string> staged = {"--comm", "mpi"}, nccl_fails = {"TP_STANDIN_NCCL_ERROR_RANK=0"};
    Steps cpu = two_steps(kTprun, 1, 1);
    ASSERT_EQ(cpu.losses.size(), 2u) << cpu.run.describe();
    struct Case {
        int dp, tp;
        std::string dtype;
    };
    for (const Case &c : {Case{1, 2, "fp32"}, Case{2, 2, "fp32"}, Case{2, 2, "bf16"}}) {
        std::string what = "dp " + std::to_string(c.dp) + " x tp " + std::to_string(c.tp) + " " + c.dtype;
        Steps got = two_steps(kEmulated, c.dp, c.tp, c.dtype, staged, "", nccl_fails);
        Steps nccl = two_steps(kEmulated, c.dp, c.tp, c.dtype);
        ASSERT_EQ(got.run.code(), 0) << what << ": " << got.run.describe();
        ASSERT_EQ(nccl.run.code(), 0) << what << ": " << nccl.run.describe();
        ASSERT_EQ(got.losses.size(), 2u) << what;
        EXPECT_EQ(got.losses, nccl.losses) << what;
        EXPECT_EQ(worst_relative(got.grads, nccl.grads), 0.0) << what;
        for (size_t i = 0; i < 2; i++)
            EXPECT_NEAR(got.losses[i], cpu.losses[i], (c.dtype == "fp32" ? 1e-5 : 5e-3) * cpu.losses[i])
                << what << " step " << i + 1;
        if (c.dtype == "fp32") {
            EXPECT_LT(worst_relative(got.grads, cpu.grads), 1e-4) << what;
        }
    }
}

// ZeRO-1 (train { shard = "optimizer" }: gradients reduce-scattered, the
// updated runs all-gathered over dp) at dp 2 x tp 2 through the staged
// communicator: the CPU's steps on one rank (fp32 1e-5, bf16 5e-3), and
// the replicated optimizer's through the same communicator (fp32, 1e-6);
// FSDP (shard = "parameters": the schedule's dp collectives through it)
// the same in fp32.
TEST_F(EmulatedDataParallel, StagedCommRunsShardedDataParallel)
{
    std::string sharded, fsdp;
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, sharded, "plans/llama-sp.plan", "shard = \"optimizer\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, fsdp, "plans/llama-sp.plan", "shard = \"parameters\","));
    const std::vector<std::string> staged = {"--comm", "mpi"};
    Steps cpu = two_steps(kTprun, 1, 1);
    ASSERT_EQ(cpu.losses.size(), 2u) << cpu.run.describe();
    Steps replicated = two_steps(kEmulated, 2, 2, "fp32", staged);
    ASSERT_EQ(replicated.losses.size(), 2u) << replicated.run.describe();
    struct Case { std::string dtype; const std::string &plan; };
    for (Case c : {Case{"fp32", sharded}, Case{"bf16", sharded}, Case{"fp32", fsdp}}) {
        const std::string &dtype = c.dtype;
        Steps zero = two_steps(kEmulated, 2, 2, dtype, staged, c.plan);
        ASSERT_EQ(zero.run.code(), 0) << dtype << ": " << zero.run.describe();
        ASSERT_EQ(zero.losses.size(), 2u) << dtype;
        for (size_t i = 0; i < 2; i++) {
            EXPECT_NEAR(zero.losses[i], cpu.losses[i], (dtype == "fp32" ? 1e-5 : 5e-3) * cpu.losses[i])
                << dtype << " step " << i + 1;
            if (dtype == "fp32") {
                EXPECT_NEAR(zero.losses[i], replicated.losses[i], 1e-6 * replicated.losses[i]) << "step " << i + 1;
            }
        }
    }
}

// ---- the real tprun on this machine ------------------------------------------------------

// --backend cuda where no GPU (or no driver) is usable: exit 2 and why. An
// empty CUDA_VISIBLE_DEVICES hides every GPU from the CUDA runtime, so the
// test applies on a machine with GPUs too.
TEST(Cli, BackendCudaWithoutAGpuSaysSo)
{
    TempDir dir;
    Proc p = run(kTprun, 1, compile(dir, source_path("plans/llama-tiny.plan"), 1, "fp32"), {"--backend", "cuda", "--labels", "tokens", "-q"},
                 {"CUDA_VISIBLE_DEVICES="});
    EXPECT_EQ(p.code(), 2) << p.describe();
    EXPECT_TRUE(contains(p.err, "tprun: no CUDA device: ")) << p.describe();
    EXPECT_TRUE(contains(p.err, "(driver not found / no GPU)")) << p.describe();
    Proc q = run(kTprun, 1, compile(dir, source_path("plans/llama-tiny.plan"), 1, "fp32"), {"--backend", "tpu"});
    EXPECT_EQ(q.code(), 2) << q.describe();
    EXPECT_TRUE(contains(q.err, "--backend takes cuda or cpu, not 'tpu'")) << q.describe();
}

// --comm takes nccl or mpi, and only for the CUDA backend: the CPU
// backend's ranks always communicate over MPI.
TEST(Cli, CommIsNcclOrMpiForTheCudaBackend)
{
    TempDir dir;
    const std::string sched = compile(dir, source_path("plans/llama-tiny.plan"), 1, "fp32");
    Proc bad = run(kTprun, 1, sched, {"--backend", "cuda", "--comm", "gloo"});
    EXPECT_EQ(bad.code(), 2) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "tprun: --comm takes nccl or mpi, not 'gloo'")) << bad.describe();
    Proc cpu = run(kTprun, 1, sched, {"--backend", "cpu", "--comm", "mpi", "--labels", "tokens"});
    EXPECT_EQ(cpu.code(), 2) << cpu.describe();
    EXPECT_TRUE(contains(cpu.err, "tprun: --comm chooses how the CUDA backend's ranks communicate; the cpu backend's "
                                  "always use MPI: drop --comm"))
        << cpu.describe();
}

// The CUDA libraries load only for --backend cuda (runtime/backends/gpu_module.h):
// tprun --version and a CPU run map none of them, nor the module. LD_DEBUG=files
// names every object the dynamic linker loads, dlopen'ed ones too. Where this
// build has the module, --backend cuda loads it and the CUDA runtime through it,
// GPU or not; a tprun without the module beside it says where it looked.
TEST(Cli, CudaLibrariesLoadOnlyForBackendCuda)
{
    TempDir dir;
    const std::string sched = compile(dir, source_path("plans/llama-tiny.plan"), 1, "fp32");
    const std::vector<std::string> debug = {"LD_DEBUG=files"};
    Proc version = run_program(kTprun, {"--version"}, debug);
    Proc cpu = run(kTprun, 1, sched, {"--backend", "cpu", "--labels", "tokens", "-q"}, debug);
    for (const Proc *p : {&version, &cpu}) {
        EXPECT_EQ(p->code(), 0) << p->describe();
        EXPECT_TRUE(contains(p->err, "file=libc.so")) << "LD_DEBUG=files printed no libc: " << p->describe();
        for (const char *lib : {"libcudart.so", "libcublas.so", "libcublasLt.so", "libnccl.so", "tprun_cuda.so"})
            EXPECT_FALSE(contains(p->err, lib)) << lib << " was loaded: " << p->describe();
    }
    const std::string module = std::string(TPCC_BINARY_DIR) + "/tprun_cuda.so";
    if (!fs::exists(module))
        return;   // a build without CUDA: gpu_none.c says so (BackendCudaWithoutAGpuSaysSo)
    std::vector<std::string> hidden = debug;
    hidden.push_back("CUDA_VISIBLE_DEVICES=");
    Proc cuda = run(kTprun, 1, sched, {"--backend", "cuda", "--labels", "tokens", "-q"}, hidden);
    EXPECT_EQ(cuda.code(), 2) << cuda.describe();
    EXPECT_TRUE(contains(cuda.err, "tprun_cuda.so [0];  dynamically loaded by")) << cuda.describe();
    EXPECT_TRUE(contains(cuda.err, "file=libcudart.so")) << cuda.describe();

    const std::string alone = dir.path + "/tprun";
    fs::copy_file(kTprun, alone);
    Proc missing = run(alone, 1, sched, {"--backend", "cuda", "--labels", "tokens", "-q"});
    EXPECT_EQ(missing.code(), 2) << missing.describe();
    EXPECT_TRUE(contains(missing.err, "the CUDA backend tprun_cuda.so is missing (looked for " + dir.path +
                                          "/tprun_cuda.so and " + dir.path + "/"))
        << missing.describe();
}

// ---- GPUs (ctest -L gpu): skip where there is none ---------------------------------------

std::string gpu_plan() { return source_path("plans/llama-sp.plan"); }

TEST(Gpu, CudaMatchesCpuAtTp1) { check_against_cpu(kTprun, gpu_plan(), {1}, true); }

TEST(Gpu, CudaMatchesCpuAtTp2) { check_against_cpu(kTprun, gpu_plan(), {2}, true); }

TEST(Gpu, TensorCoreAttentionMatchesCpuAtTp1)
{
    check_against_cpu(kTprun, gpu_plan(), {1}, true, kHeadDim64);
    check_against_cpu(kTprun, gpu_plan(), {1}, true, kHeadDim128);
    check_against_cpu(kTprun, gpu_plan(), {1}, true, kHeadDim96);
    check_against_cpu(kTprun, gpu_plan(), {1}, true, kHeadDim256);
}

TEST(Gpu, TensorCoreAttentionMatchesCpuAtTp2) { check_against_cpu(kTprun, gpu_plan(), {2}, true, kHeadDim64); }

// EmulatedRun.TensorCoreTrainingMatchesCpu and its masked step with the
// real instructions
TEST(Gpu, TensorCoreTrainingMatchesCpu)
{
    for (const auto &sizes : {kHeadDim64, kHeadDim128, kHeadDim96, kHeadDim256}) {
        std::vector<std::string> one = sizes;
        one.push_back("batch=1");
        for (bool masked : {false, true})
            if (check_training_against_cpu(kTprun, gpu_plan(), true, one, kTensorCoreTrainingBound, masked) < 0)
                GTEST_SKIP() << "no usable GPU";
    }
}

// Two ranks on this machine's GPUs through the host-staged communicator
// (--comm mpi), one GPU enough: the CPU's logits and loss at tp 2, fp32
// and bf16.
TEST(Gpu, StagedCommMatchesCpuAtTp2) { check_against_cpu(kTprun, gpu_plan(), {2}, true, {}, "mpi"); }

// dp 2 x tp 2, replicated, ZeRO-1, ZeRO-2 and FSDP (train { shard =
// "optimizer" | "gradients" | "parameters" }), on this machine's GPUs (one
// is enough) through the host-staged communicator: the CPU's two steps on
// one rank with the global batch (fp32, cuBLAS without TF32: losses 1e-5
// relative, first-step gradients 1e-4 of each tensor's largest entry, as
// EmulatedDataParallel's).
class GpuDataParallel : public DataParallelRuns {};

TEST_F(GpuDataParallel, StagedCommDp2Tp2ShardedOrNotTakesTheCpuSteps)
{
    std::string zero1, zero2, fsdp;
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, zero1, "plans/llama-sp.plan", "shard = \"optimizer\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, zero2, "plans/llama-sp.plan", "shard = \"gradients\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(dir, fsdp, "plans/llama-sp.plan", "shard = \"parameters\","));
    Steps cpu = two_steps(kTprun, 1, 1);
    ASSERT_EQ(cpu.losses.size(), 2u) << cpu.run.describe();
    for (const std::string &plan : {dp, zero1, zero2, fsdp}) {
        Steps got = two_steps(kTprun, 2, 2, "fp32", {"--backend", "cuda", "--comm", "mpi"}, plan);
        if (contains(got.run.err, "no CUDA device") || contains(got.run.err, "usable GPU"))
            GTEST_SKIP() << got.run.err;
        ASSERT_EQ(got.run.code(), 0) << plan << ": " << got.run.describe();
        ASSERT_EQ(got.losses.size(), 2u) << plan;
        for (size_t i = 0; i < 2; i++)
            EXPECT_NEAR(got.losses[i], cpu.losses[i], 1e-5 * cpu.losses[i]) << plan << " step " << i + 1;
        EXPECT_LT(worst_relative(got.grads, cpu.grads), 1e-4) << plan;
    }
}

TEST(Gpu, Gpt2MatchesCpuAtTp1) { check_against_cpu(kTprun, source_path("plans/gpt2-sp-tied.plan"), {1}, true); }

// Training on a GPU against PyTorch: the fixtures of tests/fixtures/train/
// (tools/train_fixtures.py: transformers' model, torch's autograd, AdamW,
// clip_grad_norm_ and cosine schedule), run by the real tprun with
// --backend cuda, fp32 (cuBLAS without TF32), with test_train_run.cc's
// tolerances for the CPU backend: the kernels sum in another order than
// torch, not in another precision.
const std::string kTrainFixtures = source_path("tests/fixtures/train/");

std::string compile_training(const TempDir &dir, const std::string &fixture, const std::string &plan,
                             const std::vector<std::string> &defines)
{
    std::string sched = dir.path + "/" + fixture + "-" + fs::path(plan).stem().string() + ".sched";
    std::vector<std::string> args = {source_path(plan), "--hf-config", kTrainFixtures + fixture + "/config.json",
                                     "-D", "tp=1", "-D", "seq=16", "-D", "batch=2", "--train", "-o", sched};
    args.insert(args.end(), defines.begin(), defines.end());
    Proc c = run_program(kTpcc, args);
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

// Runs a training schedule on the GPU; false (and the test skips) where
// none is usable.
bool train_on_gpu(const std::string &sched, const std::vector<std::string> &args, Proc &p)
{
    std::vector<std::string> a = {"--backend", "cuda", "-q"};
    a.insert(a.end(), args.begin(), args.end());
    p = run(kTprun, 1, sched, a);
    return !(contains(p.err, "no CUDA device") || contains(p.err, "usable GPU"));
}

double step_value(json_t *steps, size_t i, const char *key)
{
    return json_number_value(json_object_get(json_array_get(steps, i), key));
}

TEST(Gpu, TrainingMatchesPyTorchStepByStep)
{
    TempDir dir;
    std::string fixture = kTrainFixtures + "llama/", sched = compile_training(dir, "llama", "plans/llama-sp.plan",
                                                                            {"-D", "vocab_multiple=1"});
    std::string log = dir.path + "/log.json", grads = dir.path + "/grads.safetensors", save = dir.path + "/five";
    Proc p;
    if (!train_on_gpu(sched, {"--weights", fixture, "--data", fixture + "tokens.npy", "--steps", "5", "--warmup", "2",
                              "--log-json", log, "--grads-out", grads, "--save", save},
                      p))
        GTEST_SKIP() << p.err;
    ASSERT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *got = json_load_file(log.c_str(), 0, &e), *want = json_load_file((fixture + "train.json").c_str(), 0, &e);
    ASSERT_TRUE(got && want) << e.text;
    json_t *gs = json_object_get(got, "steps"), *ws = json_object_get(want, "steps");
    ASSERT_EQ(json_array_size(gs), 5u);
    for (size_t i = 0; i < 5; i++) {
        EXPECT_NEAR(step_value(gs, i, "loss"), step_value(ws, i, "loss"), 1e-5 * step_value(ws, i, "loss")) << i;
        EXPECT_NEAR(step_value(gs, i, "grad_norm"), step_value(ws, i, "grad_norm"), 1e-4 * step_value(ws, i, "grad_norm"))
            << i;
        EXPECT_DOUBLE_EQ(step_value(gs, i, "lr"), step_value(ws, i, "lr")) << i;
    }
    json_decref(got);
    json_decref(want);
    EXPECT_LT(worst_relative(read_weights_of(grads, sched), read_weights_of(fixture + "grads.safetensors", sched)), 1e-4);
    EXPECT_LT(worst_absolute(read_weights_of(save, sched), read_weights_of(fixture + "final.safetensors", sched)), 2e-5);
}

// One step's gathered gradients against autograd's, for each family with
// a torch fixture, and the vocab-parallel loss (llama-tiny).
TEST(Gpu, TrainingGradientsMatchAutograd)
{
    struct Case {
        std::string fixture, plan;
        std::vector<std::string> defines;
    };
    std::vector<Case> cases = {
        {"llama-gqa", "plans/llama-sp.plan", {}},
        {"gpt2-tied", "plans/gpt2-hf-sp.plan", {}},
        {"qwen3", "plans/qwen3-sp.plan", {}},
        {"llama", "plans/llama-tiny.plan",
         {"-D", "vocab=128", "-D", "hidden=32", "-D", "layers=2", "-D", "heads=4", "-D", "kv_heads=4", "-D", "ffn=64"}},
    };
    TempDir dir;
    for (const Case &c : cases) {
        std::string fixture = kTrainFixtures + c.fixture + "/", sched = compile_training(dir, c.fixture, c.plan, c.defines);
        std::string grads = dir.path + "/" + c.fixture + ".safetensors";
        Proc p;
        if (!train_on_gpu(sched, {"--weights", fixture, "--data", fixture + "tokens.npy", "--steps", "1", "--grads-out",
                                  grads},
                          p))
            GTEST_SKIP() << p.err;
        ASSERT_EQ(p.code(), 0) << c.fixture << "\n" << p.describe();
        EXPECT_LT(worst_relative(read_weights_of(grads, sched), read_weights_of(fixture + "grads.safetensors", sched)),
                  1e-4)
            << c.fixture << " " << c.plan;
    }
}

}  // namespace
