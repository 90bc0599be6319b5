// tprun end to end, as processes over MPI: the same seeded weights give
// the same logits at tp = 1, 2 and 4 for every shipped plan (and at -O0);
// tp = 1 matches the independent NumPy reference, and so do tp = 1 and 2
// with norm eps and RoPE theta from a config.json; the profile's bytes are
// the schedule's; failures give a message and end every rank promptly.
//
// Tolerance: logits agree to 1e-4 absolute. Ranks sum partial products in
// a different order than one rank does (fp32 rounding, ~1e-7 relative) and
// the tiny models' logits are O(1), so 1e-4 leaves a wide margin while a
// wrong shard or a missed reduction is off by O(0.01) or more.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <jansson.h>
#include <stdlib.h>
#include <unistd.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"

extern "C" {
#include "sched/load.h"
}

using namespace tpcc_test;
namespace fs = std::filesystem;

namespace {

using tpcc_test::kTpcc;
using tpcc_test::kTprun;
const char *const kTolerance = "1e-4";

// One BLAS thread per rank: 4 ranks share 2 cores.
const std::vector<std::string> kEnv = {"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1"};

// Sizes small enough for 4 ranks on 2 cores, divisible by 4.
std::vector<std::string> tiny(const std::string &plan, int tp)
{
    std::vector<std::string> d = {"vocab=256", "hidden=64", "layers=2", "heads=8", "ffn=128", "seq=16", "batch=2",
                                  "tp=" + std::to_string(tp)};
    if (contains(std::filesystem::path(plan).filename().string(), "gpt2"))
        d.push_back("positions=32");
    else
        d.push_back("kv_heads=4");
    std::vector<std::string> flags;
    for (auto &x : d) {
        flags.push_back("-D");
        flags.push_back(x);
    }
    return flags;
}

std::string compile(const TempDir &dir, const std::string &plan, int tp, const std::vector<std::string> &extra = {})
{
    std::string out = dir.path + "/" + fs::path(plan).stem().string() + "-tp" + std::to_string(tp) + ".sched";
    std::vector<std::string> args = {plan, "-o", out};
    for (auto &f : tiny(plan, tp))
        args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    Proc p = run_program(kTpcc, args);
    EXPECT_EQ(p.code(), 0) << p.describe();
    return out;
}

Proc tprun(int ranks, const std::string &sched, const std::vector<std::string> &args, int timeout = 120)
{
    std::vector<std::string> a;
    if (ranks > 1)
        a = {"-n", std::to_string(ranks)};
    a.push_back(sched);
    a.insert(a.end(), args.begin(), args.end());
    return run_program(kTprun, a, kEnv, timeout);
}

class Parity : public ::testing::TestWithParam<std::string> {};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string> &b)
{
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

TEST_P(Parity, SameLogitsAtTp1_2_4AndAtO0)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    const std::string plan = GetParam();
    TempDir dir;
    std::string ref = dir.path + "/tp1.npy";
    std::string sched1 = compile(dir, plan, 1);
    const std::vector<std::string> labels = labels_for(kTpcc, sched1);
    Proc one = tprun(1, sched1, with(labels, {"--out", ref, "-q"}));
    ASSERT_EQ(one.code(), 0) << one.describe();
    for (int tp : {2, 4}) {
        Proc p = tprun(tp, compile(dir, plan, tp), with(labels, {"--compare", ref, "--tolerance", kTolerance}));
        EXPECT_EQ(p.code(), 0) << "tp=" << tp << "\n" << p.describe();
        EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
    }
    std::string o0 = compile(dir, plan, 2, {"-O0"});
    Proc p = tprun(2, o0, with(labels, {"--compare", ref, "--tolerance", kTolerance}));
    EXPECT_EQ(p.code(), 0) << "-O0\n" << p.describe();
}

std::vector<std::string> shipped_plans()
{
    std::vector<std::string> v;
    for (const auto &p : files_in("plans", ".plan"))
        if (!contains(p, "405b"))          // the benchmark's plan: same shape as llama-sp
            v.push_back(p);
    // valid, with a redistribution -O1 removes because the next one undoes it
    v.push_back(source_path("tests/bad/redundant-redistribute.plan"));
    return v;
}

INSTANTIATE_TEST_SUITE_P(Shipped, Parity, ::testing::ValuesIn(shipped_plans()), [](const auto &info) {
    std::string s = fs::path(info.param).stem().string();
    for (auto &c : s)
        if (!isalnum((unsigned char)c))
            c = '_';
    return s;
});

// Phi-3's fused weights under packed_colwise: rank r reads its share of
// each segment (q, k, v; gate, up) as ranges of rows; ranges that overlap
// are refused.
TEST(Weights, PackedSegmentsLoadAsRanges)
{
    TempDir dir;
    std::string sched = compile(dir, source_path("plans/phi3-sp.plan"), 2);
    tr_schedule s;
    char err[512];
    ASSERT_EQ(tr_schedule_load(&s, sched.c_str(), 1, 2, err, sizeof err), 0) << err;
    int seen = 0;
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight &w = s.weights[i];
        if (!contains(w.name, "qkv_proj"))
            continue;
        seen++;   // q 8 heads x 8, k and v 4 heads x 8: rank 1 holds the second half of each
        ASSERT_EQ(w.nsegments, 3) << w.name;
        EXPECT_EQ(w.offset[0], 32);
        EXPECT_EQ(w.offset[1], 64 + 16);
        EXPECT_EQ(w.offset[2], 96 + 16);
        EXPECT_EQ(w.length[0] + w.length[1] + w.length[2], 64);
        EXPECT_EQ(w.local_elems, 64 * 64);
    }
    EXPECT_EQ(seen, 2);
    tr_schedule_free(&s);

    std::string text = tpcc_test::slurp(sched);
    size_t at = text.find("{\"offset\": 80, ");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 13, "{\"offset\": 60");   // into rank 1's q range [32, 64)
    std::string bad = dir.write("overlap.sched", text);
    EXPECT_EQ(tr_schedule_load(&s, bad.c_str(), 1, 2, err, sizeof err), -1);
    EXPECT_TRUE(contains(err, "segment 1 overlaps or precedes segment 0")) << err;
}

// A vocabulary tp does not divide (129 at tp = 2 and 4) is padded to a
// multiple of tp; the logits, padding dropped, are those of one rank.
TEST(UnevenVocab, SameLogitsAtTp1_2_4)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    const std::string plan = source_path("plans/llama-megatron.plan");
    const std::vector<std::string> vocab = {"-D", "vocab=129"};
    TempDir dir;
    std::string ref = dir.path + "/tp1.npy";
    Proc one = tprun(1, compile(dir, plan, 1, vocab), {"--labels", "tokens", "--out", ref, "-q"});
    ASSERT_EQ(one.code(), 0) << one.describe();
    for (int tp : {2, 4}) {
        Proc p = tprun(tp, compile(dir, plan, tp, vocab), {"--labels", "tokens", "--compare", ref, "--tolerance",
                                                           kTolerance});
        EXPECT_EQ(p.code(), 0) << "tp=" << tp << "\n" << p.describe();
        EXPECT_TRUE(contains(p.out, "logits      [2, 16, 129]")) << p.describe();
        EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
    }
}

// --- models that return logits ---------------------------------------------------------

void replace_once(std::string &text, const std::string &from, const std::string &to)
{
    size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
}

// A shipped plan on the shipped Llama model called without labels: the
// same file with the root forward returning the logits, as
// LlamaForCausalLM does without labels. `lm_head` replaces the plan's
// lm_head entry when given. The plan names the variant in models/ below it.
std::string logits_only(const TempDir &dir, const std::string &plan, const std::string &lm_head = "")
{
    std::string model = slurp(source_path("models/llama.model")), text = slurp(source_path(plan));
    replace_once(model, "def forward(input_ids: [batch, seq], labels: [batch, seq]) {",
                 "def forward(input_ids: [batch, seq]) {");
    replace_once(model, "return cross_entropy(logits, labels)", "return logits");
    if (!lm_head.empty()) {
        size_t at = text.find("\"lm_head\": ");
        EXPECT_NE(at, std::string::npos);
        text.replace(at, text.find('\n', at) - at, "\"lm_head\": " + lm_head);
    }
    replace_once(text, "\"../models/", "\"models/");   // below the plan, where a plan may read it
    fs::create_directories(dir.path + "/plans/models");
    dir.write("plans/models/llama.model", model);
    return dir.write("plans/" + fs::path(plan).filename().string(), text);
}

struct LogitsCase {
    const char *plan;
    const char *lm_head;   // "": the plan's own entry
    const char *what;
};

void PrintTo(const LogitsCase &c, std::ostream *os) { *os << c.plan << " " << c.what; }

class LogitsOnly : public ::testing::TestWithParam<LogitsCase> {};

// The logits-only model's schedule outputs the logits the loss model
// computes, at tp = 1, 2 and 4, however they leave lm_head: replicated,
// a vocab-sharded DTensor (llama-tiny, under loss_parallel(), which then
// has nothing to do) or a plain vocab shard (which PyTorch hands back per
// rank; tprun gathers it).
TEST_P(LogitsOnly, SameLogitsAsTheLossModelAtTp1_2_4)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    const LogitsCase &c = GetParam();
    TempDir dir, variant;
    std::string ref = dir.path + "/reference.npy";
    Proc loss = tprun(1, compile(dir, source_path(c.plan), 1), {"--labels", "tokens", "--out", ref, "-q"});
    ASSERT_EQ(loss.code(), 0) << loss.describe();
    std::string plan = logits_only(variant, c.plan, c.lm_head);
    for (int tp : {1, 2, 4}) {
        std::string sched = compile(variant, plan, tp);
        Proc dump = run_program(kTpcc, {"--dump", sched});
        EXPECT_FALSE(contains(dump.out, "cross_entropy") || contains(dump.out, "ce_max")) << dump.out;
        Proc p = tprun(tp, sched, {"--compare", ref, "--tolerance", kTolerance});
        EXPECT_EQ(p.code(), 0) << "tp=" << tp << "\n" << p.describe();
        EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
        EXPECT_FALSE(contains(p.out, "\n  loss ")) << p.describe();
    }
}

const LogitsCase kLogitsCases[] = {
    {"plans/llama-sp.plan", "", "replicated"},
    {"plans/llama-tiny.plan", "", "dtensor_vocab_shard"},
    {"plans/llama-megatron.plan", "ColwiseParallel(),", "plain_vocab_shard"},
};

INSTANTIATE_TEST_SUITE_P(Llama, LogitsOnly, ::testing::ValuesIn(kLogitsCases),
                         [](const auto &info) { return std::string(info.param.what); });

// --labels goes with a loss and only with one; a loss given none scores
// the input ids, as model(input_ids, labels=input_ids) does: the same loss
// as --labels tokens.
TEST(Labels, InputIdsByDefaultRefusedForLogits)
{
    TempDir dir, variant;
    const std::string sched = compile(dir, source_path("plans/llama-sp.plan"), 1);
    Proc plain = tprun(1, sched, {}), given = tprun(1, sched, {"--labels", "tokens"});
    ASSERT_EQ(plain.code(), 0) << plain.describe();
    ASSERT_EQ(given.code(), 0) << given.describe();
    EXPECT_TRUE(contains(plain.out, " (labels: the input ids)")) << plain.describe();
    const std::string loss = given.out.substr(given.out.find("  loss"), 22);
    EXPECT_EQ(plain.out.substr(plain.out.find("  loss"), 22), loss) << plain.out << given.out;
    Proc extra = tprun(1, compile(variant, logits_only(variant, "plans/llama-sp.plan"), 1), {"--labels", "tokens"});
    EXPECT_EQ(extra.code(), 1) << extra.describe();
    EXPECT_TRUE(contains(extra.err, "computes no loss (its model returns the logits); drop --labels"))
        << extra.describe();
}

// PyTorch's test Transformer (tests/models/torch_transformer.model) as
// PyTorch's tests parallelize it, with and without sequence parallelism:
// 1-D positions from arange(seq), a Shard(0) position embedding added to a
// Shard(1) token embedding, logits returned without a loss; and returning
// them as a Partial DTensor, which the caller's full_tensor() sums.
class TorchTransformer : public ::testing::TestWithParam<std::string> {};

TEST_P(TorchTransformer, SameLogitsAtTp1_2_4)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    std::string plan = source_path("tests/plans/torch-transformer-" + GetParam() + ".plan"), ref = dir.path + "/tp1.npy";
    auto sched = [&](int tp) {
        std::string out = dir.path + "/tp" + std::to_string(tp) + ".sched";
        Proc p = run_program(kTpcc, {plan, "-o", out, "-D", "tp=" + std::to_string(tp)});
        EXPECT_EQ(p.code(), 0) << p.describe();
        return out;
    };
    Proc one = tprun(1, sched(1), {"--out", ref, "-q"});
    ASSERT_EQ(one.code(), 0) << one.describe();
    for (int tp : {2, 4}) {
        Proc p = tprun(tp, sched(tp), {"--compare", ref, "--tolerance", kTolerance});
        EXPECT_EQ(p.code(), 0) << "tp=" << tp << "\n" << p.describe();
        EXPECT_TRUE(contains(p.out, "logits      [2, 16, 8]")) << p.describe();
        EXPECT_TRUE(contains(p.out, ": ok")) << p.describe();
    }
}

INSTANTIATE_TEST_SUITE_P(Plans, TorchTransformer, ::testing::Values("sp", "tp", "partial-output"),
                         [](const auto &info) {
                             std::string s = info.param;
                             for (char &c : s)
                                 c = c == '-' ? '_' : c;
                             return s;
                         });

// The test Transformer with its root forward's return replaced by `ret`;
// the plan names the variant in models/ below it.
std::string torch_transformer_returning(const TempDir &dir, const std::string &plan, const std::string &ret)
{
    std::string model = slurp(source_path("tests/models/torch_transformer.model"));
    replace_once(model, "return output(h)                  # the logits; no loss", "return " + ret);
    std::string text = slurp(source_path(plan));
    replace_once(text, "\"../models/", "\"models/");   // below the plan, where a plan may read it
    fs::create_directories(dir.path + "/plans/models");
    dir.write("plans/models/torch_transformer.model", model);
    return dir.write("plans/" + fs::path(plan).filename().string(), text);
}

// Logits computed by an elementwise op are traced to no weight: the
// schedule still says how many columns they have, and tprun gives the
// same logits at every tp.
TEST(LogitsOutput, FromAnElementwiseOpRunAtTp1_2)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    std::string plan = torch_transformer_returning(dir, "tests/plans/torch-transformer-tp.plan",
                                                   "output(h) + output(h)"),
                ref = dir.path + "/tp1.npy";
    for (int tp : {1, 2}) {
        std::string sched = dir.path + "/tp" + std::to_string(tp) + ".sched";
        Proc c = run_program(kTpcc, {plan, "-o", sched, "-D", "tp=" + std::to_string(tp)});
        ASSERT_EQ(c.code(), 0) << c.describe();
        EXPECT_TRUE(contains(slurp(sched), "\"vocab\": 8}")) << slurp(sched).substr(0, 2000);
        Proc p = tprun(tp, sched, tp == 1 ? std::vector<std::string>{"--out", ref} : std::vector<std::string>{"--compare", ref, "--tolerance", kTolerance});
        EXPECT_EQ(p.code(), 0) << "tp=" << tp << "\n" << p.describe();
        EXPECT_TRUE(contains(p.out, "logits      [2, 16, 8]")) << p.describe();
    }
}

// A result that is neither a loss nor logits [batch, seq, vocab] is no
// output a schedule can hold: tpcc says so rather than dropping it.
TEST(LogitsOutput, OtherResultsAreAnError)
{
    struct Case {
        const char *ret, *says;
    } cases[] = {
        {"pos", "the model returns a tensor of shape [16]"},
        {"p", "the model returns a tensor of shape [16, 16]"},
    };
    for (const Case &c : cases) {
        TempDir d;
        std::string plan = torch_transformer_returning(d, "tests/plans/torch-transformer-tp.plan", c.ret);
        Proc r = run_program(kTpcc, {plan, "-o", d.path + "/s.sched"});
        EXPECT_EQ(r.code(), 1) << r.describe();
        EXPECT_TRUE(contains(r.err, c.says)) << r.describe();
        EXPECT_TRUE(contains(r.err, "[model-output]")) << r.describe();
        EXPECT_FALSE(fs::exists(d.path + "/s.sched")) << r.describe();
    }
}

// A schedule without logits (a loss only) gives --out and --compare
// nothing: tprun says so rather than exiting 0 having compared nothing.
TEST(LogitsOutput, OutAndCompareNeedLogits)
{
    TempDir dir;
    std::string sched = compile(dir, source_path("plans/llama-sp.plan"), 1), text = slurp(sched);
    size_t at = text.find("\"logits\": {");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, text.find('}', at) + 1 - at, "\"logits\": null");
    std::string loss_only = dir.write("loss-only.sched", text);
    for (const char *flag : {"--out", "--compare"}) {
        Proc p = tprun(1, loss_only, {"--labels", "tokens", flag, dir.path + "/l.npy"});
        EXPECT_EQ(p.code(), 1) << p.describe();
        EXPECT_TRUE(contains(p.err, "outputs no logits: " + std::string(flag) + " has nothing to")) << p.describe();
    }
    Proc ok = tprun(1, loss_only, {"--labels", "tokens", "-q"});
    EXPECT_EQ(ok.code(), 0) << ok.describe();
}

// --- against the NumPy reference -------------------------------------------------------

// The value on the line that starts with "loss" (tprun's summary,
// reference.py's output); a plan's path may contain "loss" too.
std::string loss_of(const std::string &out)
{
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
        size_t at = line.find_first_not_of(' ');
        if (at == std::string::npos || line.compare(at, 5, "loss ") != 0)
            continue;
        size_t value = line.find_first_not_of(' ', at + 5);
        return value == std::string::npos ? "" : line.substr(value);
    }
    return "";
}

// tprun at `tp` ranks on a checkpoint against reference.py on the same one;
// tpcc_flags are added to the compilation.
void check_reference(const std::string &family, const std::string &plan, const std::vector<std::string> &ckpt_config,
                     const std::vector<std::string> &ref_config, int tp = 1,
                     const std::vector<std::string> &tpcc_flags = {})
{
    std::string py = python_with_numpy();   // the reference and checkpoint tools need it
    ASSERT_FALSE(py.empty()) << kInstallNumpy;
    TempDir dir;
    std::string ckpt = dir.path + "/model.safetensors";
    std::vector<std::string> mk = {source_path("tools/make_checkpoint.py"), "--family", family, "--out", ckpt,
                                   "--seed", "3", "--config"};
    mk.insert(mk.end(), ckpt_config.begin(), ckpt_config.end());
    Proc m = run_program(py, mk);
    ASSERT_EQ(m.code(), 0) << m.describe();
    std::string tokens = "5,17,250,3,99,100,0,255,42,42,7,8,9,10,11,12,200,201,13,1,2,3,4,5,6,7,8,9,10,11,12,13";
    std::string ours = dir.path + "/ours.npy", theirs = dir.path + "/ref.npy";
    std::string sched = compile(dir, source_path(plan), tp, tpcc_flags);
    Proc t = tprun(tp, sched, {"--weights", ckpt, "--tokens", tokens, "--labels", "tokens", "--out", ours});
    ASSERT_EQ(t.code(), 0) << t.describe();
    std::vector<std::string> ref = {source_path("tools/reference.py"), "--family", family, "--weights", ckpt,
                                    "--tokens", tokens, "--labels", tokens, "--out", theirs, "--config"};
    ref.insert(ref.end(), ref_config.begin(), ref_config.end());
    Proc r = run_program(py, ref);
    ASSERT_EQ(r.code(), 0) << r.describe();
    Proc cmp = tprun(tp, sched, {"--weights", ckpt, "--tokens", tokens, "--labels", "tokens", "--compare", theirs, "--tolerance", kTolerance});
    EXPECT_EQ(cmp.code(), 0) << cmp.describe();
    double a = atof(loss_of(t.out).c_str()), b = atof(loss_of(r.out).c_str());
    EXPECT_NEAR(a, b, 1e-4) << t.out << r.out;
}

TEST(Reference, LlamaMatchesNumPy)
{
    check_reference("llama", "plans/llama-megatron.plan",
                    {"vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4", "ffn=128"},
                    {"vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4", "ffn=128", "seq=16", "batch=2"});
}

TEST(Reference, Gpt2MatchesNumPy)
{
    check_reference("gpt2", "plans/gpt2-sp-tied.plan",
                    {"vocab=256", "hidden=64", "layers=2", "heads=8", "ffn=128", "positions=32"},
                    {"vocab=256", "hidden=64", "layers=2", "heads=8", "ffn=128", "positions=32", "seq=16", "batch=2"});
}

// Gemma's (1 + w) norms (the checkpoint's ones make a scale of 2), its
// sqrt(hidden) normaliser and tanh GELU, with head_dim apart from
// hidden / heads; Gemma 2 adds its sandwich norms, the
// query_pre_attn_scalar scale and soft-capping at Gemma2Config's 50 and 30.
TEST(Reference, GemmaAndGemma2MatchNumPy)
{
    const std::vector<std::string> sizes = {"vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4",
                                            "ffn=128",   "head_dim=16", "tie_embeddings=1"};
    std::vector<std::string> ref = sizes;
    ref.insert(ref.end(), {"seq=16", "batch=2"});
    for (const char *family : {"gemma", "gemma2"})
        for (int tp : {1, 2}) {
            SCOPED_TRACE(std::string(family) + " tp=" + std::to_string(tp));
            check_reference(family, std::string("plans/") + family + "-sp.plan", sizes, ref, tp,
                            {"-D", "head_dim=16"});
        }
}

// Llama 3's attributes from a config.json reach every rmsnorm and rope op.
// On these weights eps 1e-6 instead of 1e-5 moves the logits by ~7e-3 and
// theta 10000 instead of 500000 by ~2e-3, far beyond the tolerance, so a
// schedule that fell back to either default fails here.
TEST(Reference, LlamaAttributesFromAConfigJsonMatchNumPy)
{
    std::vector<std::string> sizes = {"vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4", "ffn=128"};
    std::vector<std::string> ref = sizes;
    ref.insert(ref.end(), {"seq=16", "batch=2", "rms_norm_eps=1e-5", "rope_theta=500000.0"});
    for (int tp : {1, 2}) {
        SCOPED_TRACE("tp=" + std::to_string(tp));
        check_reference("llama", "plans/llama-megatron.plan", sizes, ref, tp,
                        {"--hf-config", source_path("tests/fixtures/llama3-attrs.config.json")});
    }
}

// RoPE scaling from a config.json against the reference's own formulas of
// transformers' llama3, linear and yarn inv_freq: with original_max_position_embeddings
// 8 at 16 positions (llama3, yarn with its attention factor), or factor 2
// (linear), the scaling moves these logits far beyond the tolerance.
TEST(Reference, LlamaRopeScalingMatchesNumPy)
{
    std::vector<std::string> sizes = {"vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4", "ffn=128"};
    struct Case {
        const char *config;
        std::vector<std::string> ref;
    } cases[] = {
        {"tests/fixtures/llama3-scaled-attrs.config.json",
         {"rms_norm_eps=1e-5", "rope_theta=500000.0", "rope_scaling=llama3", "rope_factor=8.0",
          "rope_low_freq_factor=1.0", "rope_high_freq_factor=4.0", "rope_original_max_positions=8"}},
        {"tests/fixtures/llama-linear-attrs.config.json", {"rope_scaling=linear", "rope_factor=2.0"}},
        {"tests/fixtures/llama-yarn-attrs.config.json",
         {"rope_scaling=yarn", "rope_factor=4.0", "rope_original_max_positions=8", "rope_beta_slow=2.0",
          "rope_truncate=false", "rope_mscale=2.0", "rope_mscale_all_dim=1.0"}},
    };
    for (const Case &c : cases)
        for (int tp : {1, 2}) {
            SCOPED_TRACE(std::string(c.config) + " tp=" + std::to_string(tp));
            std::vector<std::string> ref = sizes;
            ref.insert(ref.end(), {"seq=16", "batch=2"});
            ref.insert(ref.end(), c.ref.begin(), c.ref.end());
            check_reference("llama", "plans/llama-megatron.plan", sizes, ref, tp,
                            {"--hf-config", source_path(c.config)});
        }
}

// LayerNorm's eps from -D: 1e-5 (GPT-2's) instead of 1e-3 moves these
// logits far beyond the tolerance.
TEST(Reference, Gpt2EpsFromADefineMatchesNumPy)
{
    check_reference("gpt2", "plans/gpt2-sp-tied.plan",
                    {"vocab=256", "hidden=64", "layers=2", "heads=8", "ffn=128", "positions=32"},
                    {"vocab=256", "hidden=64", "layers=2", "heads=8", "ffn=128", "positions=32", "seq=16", "batch=2",
                     "layer_norm_epsilon=1e-3"},
                    2, {"-D", "layer_norm_epsilon=1e-3"});
}

// --- loss_parallel() ---------------------------------------------------------------------

// loss_parallel() over plain replicated logits has no effect in PyTorch: the
// schedule computes the ordinary loss, the same as the plan without it.
TEST(LossParallel, PlainReplicatedLogitsGiveTheOrdinaryLoss)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    std::string ref = dir.path + "/plain.npy";
    Proc plain = tprun(2, compile(dir, source_path("plans/llama-megatron.plan"), 2),
                       {"--labels", "tokens", "--out", ref});
    ASSERT_EQ(plain.code(), 0) << plain.describe();
    Proc lp = tprun(2, compile(dir, source_path("tests/bad/loss-parallel-replicated-logits.plan"), 2),
                    {"--labels", "tokens", "--compare", ref, "--tolerance", kTolerance});
    EXPECT_EQ(lp.code(), 0) << lp.describe();
    ASSERT_FALSE(loss_of(plain.out).empty()) << plain.describe();
    EXPECT_NEAR(atof(loss_of(lp.out).c_str()), atof(loss_of(plain.out).c_str()), 1e-4) << plain.out << lp.out;
}

// --- the profile says what the schedule says --------------------------------------------

// Elements of weight w a rank holds: its slice's length, or its packed
// segments' lengths, times the other dims.
double held_elems(json_t *w)
{
    double n = 1;
    json_t *shape = json_object_get(w, "shape"), *slice = json_object_get(w, "slice");
    for (size_t d = 0; d < json_array_size(shape); d++)
        n *= (double)json_integer_value(json_array_get(shape, d));
    if (!json_is_object(slice))
        return n;
    n /= (double)json_integer_value(json_array_get(shape, (size_t)json_integer_value(json_object_get(slice, "dim"))));
    json_t *segs = json_object_get(slice, "segments");
    double rows = 0;
    for (size_t k = 0; k < (segs ? json_array_size(segs) : 1); k++)
        rows += (double)json_integer_value(json_object_get(segs ? json_array_get(segs, k) : slice, "length"));
    return n * rows;
}

// tprun's profile of `sched` on the f32 checkpoint `ckpt` at tp 2: each
// rank reads exactly its slices and moves exactly the schedule's bytes.
void expect_profile_is_the_schedules(const TempDir &dir, const std::string &sched, const std::string &ckpt)
{
    std::string prof = dir.path + "/p.json";
    Proc p = tprun(2, sched, {"--weights", ckpt, "--labels", "tokens", "--profile-json", prof, "-q"});
    ASSERT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *s = json_load_file(sched.c_str(), 0, &e), *j = json_load_file(prof.c_str(), 0, &e);
    ASSERT_TRUE(s && j) << e.text;
    double file_bytes = (double)fs::file_size(ckpt);
    for (int r = 0; r < 2; r++) {
        json_t *rank = json_array_get(json_object_get(s, "ranks"), (size_t)r);
        double weights = 0, comm = 0;
        size_t i;
        json_t *w, *op;
        json_array_foreach(json_object_get(rank, "weights"), i, w)
        weights += 4 * held_elems(w);   // f32 checkpoint
        json_array_foreach(json_object_get(rank, "ops"), i, op)
        if (json_object_get(op, "bytes"))
            comm += (double)json_integer_value(json_object_get(op, "bytes"));
        json_t *pr = json_array_get(json_object_get(j, "ranks"), (size_t)r);
        EXPECT_EQ(json_number_value(json_object_get(pr, "weight_bytes_read")), weights) << "rank " << r;
        EXPECT_EQ(json_number_value(json_object_get(pr, "collective_bytes")), comm) << "rank " << r;
        EXPECT_LT(weights, file_bytes) << "rank " << r << " read the whole model";
    }
    json_decref(s);
    json_decref(j);
}

TEST(Profile, BytesAreTheSchedules)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    std::string py = python_with_numpy();
    ASSERT_FALSE(py.empty()) << kInstallNumpy;
    TempDir dir;
    std::string ckpt = dir.path + "/model.safetensors";
    Proc m = run_program(py, {source_path("tools/make_checkpoint.py"), "--family", "llama", "--out", ckpt, "--config",
                              "vocab=256", "hidden=64", "layers=2", "heads=8", "kv_heads=4", "ffn=128"});
    ASSERT_EQ(m.code(), 0) << m.describe();
    expect_profile_is_the_schedules(dir, compile(dir, source_path("plans/llama-sp.plan"), 2), ckpt);
}

// Phi-3's fused weights under packed_colwise: a rank reads its share of
// each segment of transformers' own checkpoint, nothing more.
TEST(Profile, PackedWeightsReadOnlyTheirSegments)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    const std::string fixture = source_path("tests/fixtures/hf/phi3-mha");
    std::string sched = dir.path + "/phi3.sched";
    Proc c = run_program(kTpcc, {source_path("plans/phi3-sp.plan"), "--hf-config", fixture, "-D", "tp=2", "-D",
                                 "seq=16", "-D", "batch=2", "-o", sched});
    ASSERT_EQ(c.code(), 0) << c.describe();
    expect_profile_is_the_schedules(dir, sched, fixture + "/model.safetensors");
}

TEST(Trace, OneTrackPerRank)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    std::string trace = dir.path + "/t.json";
    Proc p = tprun(2, compile(dir, source_path("plans/llama-tiny.plan"), 2), {"--labels", "tokens", "--trace", trace, "-q"});
    ASSERT_EQ(p.code(), 0) << p.describe();
    json_error_t e;
    json_t *t = json_load_file(trace.c_str(), 0, &e);
    ASSERT_NE(t, nullptr) << e.text;
    bool pid[2] = {false, false};
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(t, "traceEvents"), i, ev)
    {
        json_int_t r = json_integer_value(json_object_get(ev, "pid"));
        if (r >= 0 && r < 2 && !strcmp(json_string_value(json_object_get(ev, "ph")), "X"))
            pid[r] = true;
    }
    EXPECT_TRUE(pid[0] && pid[1]);
    json_decref(t);
}

// --repeat N runs the forward N times on the same arena: every step computes
// the same logits (nothing relies on fresh memory or on an output written
// once); the profile is the median step's and lists every step's time.
TEST(RepeatSteps, SameLogitsAndATimePerStep)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    for (int tp : {1, 2}) {
        std::string sched = compile(dir, source_path("plans/llama-tiny.plan"), tp), once = dir.path + "/once.npy",
                    thrice = dir.path + "/thrice.npy", prof = dir.path + "/p.json";
        Proc p1 = tprun(tp, sched, {"--labels", "tokens", "--out", once});
        ASSERT_EQ(p1.code(), 0) << p1.describe();
        EXPECT_FALSE(contains(p1.out, "median")) << p1.describe();
        Proc p3 = tprun(tp, sched,
                        {"--labels", "tokens", "--out", thrice, "--repeat", "3", "--profile", "--profile-json", prof});
        ASSERT_EQ(p3.code(), 0) << p3.describe();
        EXPECT_EQ(slurp(once), slurp(thrice)) << "tp " << tp << ": the third step's logits differ from one step's";
        EXPECT_TRUE(contains(p3.out, "(median of 3 steps)")) << p3.describe();
        EXPECT_TRUE(contains(p3.out, "ms forward (median of 3 steps)")) << p3.describe();
        json_error_t e;
        json_t *j = json_load_file(prof.c_str(), 0, &e);
        ASSERT_TRUE(j) << e.text;
        ASSERT_EQ(json_array_size(json_object_get(j, "ranks")), (size_t)tp);
        for (int r = 0; r < tp; r++) {
            json_t *rank = json_array_get(json_object_get(j, "ranks"), (size_t)r);
            json_t *steps = json_object_get(rank, "steps");
            ASSERT_EQ(json_array_size(steps), 3u) << "rank " << r;
            std::vector<double> t;
            for (size_t i = 0; i < 3; i++)
                t.push_back(json_number_value(json_array_get(steps, i)));
            std::sort(t.begin(), t.end());
            EXPECT_GT(t[0], 0.0) << "rank " << r;
            EXPECT_EQ(json_number_value(json_object_get(rank, "forward_seconds")), t[1])
                << "rank " << r << ": the median";
            EXPECT_TRUE(json_object_get(json_object_get(rank, "ops"), "rope_attention")) << "rank " << r;
        }
        json_decref(j);
    }
}

TEST(RepeatSteps, BadCountsAreRefused)
{
    TempDir dir;
    std::string sched = compile(dir, source_path("plans/llama-tiny.plan"), 1);
    for (std::string bad : {"0", "-2", "three", "", "2x", "100001"}) {
        Proc p = tprun(1, sched, {"--labels", "tokens", "--repeat", bad});
        EXPECT_EQ(p.code(), 2) << bad;
        EXPECT_TRUE(contains(p.err, "tprun: --repeat takes a number of forward steps from 1 to 100000, not '" + bad +
                                        "'")) << p.describe();
    }
}

// --- failures: a message naming the cause, a non-zero exit, no hang ----------------------

TEST(Failure, ScheduleForTwoRanksOnOne)
{
    TempDir dir;
    Proc p = tprun(1, compile(dir, source_path("plans/llama-tiny.plan"), 2), {});
    EXPECT_NE(p.code(), 0);
    EXPECT_TRUE(contains(p.err, "schedule for 2 ranks")) << p.describe();
}

TEST(Failure, ScheduleForTwoRanksOnThree)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    Proc p = tprun(3, compile(dir, source_path("plans/llama-tiny.plan"), 2), {}, 30);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0);
    EXPECT_TRUE(contains(p.err, "is for 2 ranks but 3 were launched")) << p.describe();
}

TEST(Failure, UnreadableSchedule)
{
    TempDir dir;
    Proc p = tprun(1, dir.write("x.sched", std::string("\x7f" "ELF\x00\x01garbage", 12)), {});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "cannot read schedule")) << p.describe();
    Proc q = tprun(1, dir.write("y.sched", "{\"magic\": \"something else\"}"), {});
    EXPECT_TRUE(contains(q.err, "not a tpcc schedule")) << q.describe();
    Proc r = tprun(1, dir.path + "/missing.sched", {});
    EXPECT_NE(r.code(), 0);
    EXPECT_TRUE(contains(r.err, "missing.sched")) << r.describe();
}

// A checkpoint whose tensors do not fit the schedule, and a corrupt one.
TEST(Failure, BadCheckpoints)
{
    std::string py = python_with_numpy();   // the reference and checkpoint tools need it
    ASSERT_FALSE(py.empty()) << kInstallNumpy;
    TempDir dir;
    std::string sched = compile(dir, source_path("plans/llama-megatron.plan"), 1);
    // hidden 32 instead of 64: every shape is wrong
    std::string wrong = dir.path + "/wrong.safetensors";
    ASSERT_EQ(run_program(py, {source_path("tools/make_checkpoint.py"), "--family", "llama", "--out", wrong, "--config",
                               "vocab=256", "hidden=32", "layers=2", "heads=8", "kv_heads=4", "ffn=128"})
                  .code(),
              0);
    Proc p = tprun(1, sched, {"--weights", wrong, "--labels", "tokens"});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "expected")) << p.describe();
    // a GPT-2 checkpoint lacks every Llama tensor
    std::string other = dir.path + "/gpt2.safetensors";
    ASSERT_EQ(run_program(py, {source_path("tools/make_checkpoint.py"), "--family", "gpt2", "--out", other}).code(), 0);
    Proc q = tprun(1, sched, {"--weights", other, "--labels", "tokens"});
    EXPECT_EQ(q.code(), 1) << q.describe();
    EXPECT_TRUE(contains(q.err, "model.embed_tokens.weight")) << q.describe();
    // truncated
    std::string bytes = slurp(wrong);
    Proc r = tprun(1, sched, {"--weights", dir.write("cut.safetensors", bytes.substr(0, bytes.size() / 2)), "--labels", "tokens"});
    EXPECT_EQ(r.code(), 1) << r.describe();
    EXPECT_TRUE(contains(r.err, "cut.safetensors")) << r.describe();
}

TEST(Failure, BadTokens)
{
    TempDir dir;
    std::string sched = compile(dir, source_path("plans/llama-megatron.plan"), 1);
    Proc p = tprun(1, sched, {"--tokens", "1,2,3", "--labels", "tokens"});
    EXPECT_EQ(p.code(), 1);
    EXPECT_TRUE(contains(p.err, "3 ids given")) << p.describe();
    std::string ids;
    for (int i = 0; i < 32; i++)
        ids += (i ? "," : "") + std::to_string(i == 5 ? 9999 : i);
    Proc q = tprun(1, sched, {"--tokens", ids, "--labels", "tokens"});
    EXPECT_EQ(q.code(), 1);
    EXPECT_TRUE(contains(q.err, "outside the vocabulary")) << q.describe();
}

TEST(Failure, Bf16ScheduleOnTheCpu)
{
    TempDir dir;
    Proc p = tprun(1, compile(dir, source_path("plans/llama-megatron.plan"), 1, {"--dtype", "bf16"}), {"--labels", "tokens"});
    EXPECT_EQ(p.code(), 1);
    EXPECT_TRUE(contains(p.err, "fp32")) << p.describe();
}

// Rank 0 fails after the forward step (it cannot write --out) while rank 1
// waits for it in the profile's gather: the job must still end promptly.
TEST(Failure, OneRankFailingEndsEveryRank)
{
    ASSERT_TRUE(on_path("mpiexec")) << kInstallMpich;
    TempDir dir;
    Proc p = tprun(2, compile(dir, source_path("plans/llama-tiny.plan"), 2),
                   {"--labels", "tokens", "--out", "/nonexistent/dir/logits.npy", "--profile"}, 30);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_NE(p.code(), 0);
    EXPECT_TRUE(contains(p.err, "rank 0")) << p.describe();
}

}  // namespace
