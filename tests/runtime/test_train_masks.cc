// Attention masks (tpcc --segments; tprun --pad-id and --eos-id,
// --attention-mask and --position-ids; runtime/train/segments.h): the
// segments tprun builds from the ids and from the streams beside them,
// PyTorch's training on left-padded rows of packed documents
// (tools/mask_fixtures.py) at tp 1 and 2, a forward run whose packed
// document gives the logits it gives alone (GPT-2's learned positions),
// and the combinations refused before anything runs.
#include <gtest/gtest.h>

#include <jansson.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "runtime/io/npy.h"
#include "runtime/train/segments.h"
#include "tests/support/grad_files.h"
#include "tests/support/process.h"
#include "tests/support/train_harness.h"
#include "tests/support/token_files.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const std::string kDir = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama-documents/";

Proc tprun(int ranks, const std::string &sched, const std::vector<std::string> &extra)
{
    std::vector<std::string> args = {"-n", std::to_string(ranks), sched};
    args.insert(args.end(), extra.begin(), extra.end());
    return tpcc_test::run_program(kTprun, args, {}, 300);
}

std::string compile(const TempDir &d, std::vector<std::string> args, const std::string &name)
{
    std::string sched = d.path + "/" + name + ".sched";
    args.insert(args.end(), {"-o", sched});
    Proc c = tpcc_test::run_tpcc(args);
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

std::string llama(const TempDir &d, int tp, bool segments, int dp = 1)
{
    std::string plan = std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan";
    if (dp > 1)   // the global batch of 2 rows, one a replica
        tpcc_test::dp_plan(d, plan);
    std::vector<std::string> args = {plan, "--hf-config", kDir + "config.json", "-D", "vocab_multiple=1", "-D",
                                     "tp=" + std::to_string(tp), "-D", "seq=16", "-D", "batch=" + std::to_string(2 / dp),
                                     "--train"};
    if (dp > 1)
        args.insert(args.end(), {"-D", "dp=" + std::to_string(dp)});
    if (segments)
        args.push_back("--segments");
    return compile(d, args, "llama" + std::to_string(dp) + "x" + std::to_string(tp) + (segments ? "-segments" : ""));
}

double num(json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

TEST(Segments, FromPaddingAndEndsOfDocuments)
{
    const std::vector<int32_t> ids = {0, 0, 5, 2, 7, 8, 2, 9, /* row 2 */ 4, 2, 2, 6, 0, 3, 0, 0};
    std::vector<int32_t> seg(ids.size(), 99);
    auto segments = [&](const int32_t *mask, const int32_t *positions, int64_t pad_id, int64_t eos_id) {
        const tr_segment_marks m = {ids.data(), mask, positions, pad_id, eos_id};
        tr_segments_of(seg.data(), &m, 2, 8);
        return seg;
    };
    const std::vector<int32_t> want = {-1, -1, 0, 0, 1, 1, 1, 2, 0, 0, 1, 2, -1, 2, -1, -1};
    EXPECT_EQ(segments(nullptr, nullptr, 0, 2), want);
    EXPECT_EQ(segments(nullptr, nullptr, TR_NO_ID, TR_NO_ID), std::vector<int32_t>(16, 0));   // one document a row
    EXPECT_EQ(segments(nullptr, nullptr, 0, TR_NO_ID),                                     // padding only
              (std::vector<int32_t>{-1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, -1, -1}));
    // the same from Hugging Face's streams: an attention mask's 0 is padding,
    // a position id's 0 starts a document (the row's first wherever it is)
    const std::vector<int32_t> mask = {0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, 0},
                               positions = {1, 1, 0, 1, 0, 1, 2, 0, 0, 1, 0, 0, 1, 0, 1, 1};
    EXPECT_EQ(segments(mask.data(), nullptr, TR_NO_ID, 2), want);
    // a token after padding has position id 0 (positions restart there):
    // it starts a document of its own, where no EOS ended the one before
    std::vector<int32_t> after = want;
    after[13] = 3;
    EXPECT_EQ(segments(mask.data(), positions.data(), TR_NO_ID, TR_NO_ID), after);
    EXPECT_EQ(segments(nullptr, positions.data(), 0, TR_NO_ID), after);
    // what only a stream says: the pad id 0 a token of the text (row 2's
    // fifth), documents starting without an EOS (row 1 at 4 and 6)
    const std::vector<int32_t> text = {1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0},
                               starts = {0, 1, 2, 3, 0, 1, 0, 1, 0, 0, 1, 2, 3, 4, 0, 0};
    EXPECT_EQ(segments(text.data(), starts.data(), TR_NO_ID, TR_NO_ID),
              (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 2, 2, -1, 0, 0, 0, 0, 0, -1, -1}));
}

// transformers' LlamaForCausalLM on rows of left padding and documents
// ended by EOS, the eager attention given the document mask and the
// positions restarting at each document: tprun's losses, norms and final
// weights at tp 1, tp 2 and 2 replicas x tp 2 (a row each). Without --segments the losses are another's.
TEST(TrainMasks, DocumentsAndPaddingMatchTransformers)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    json_error_t e;
    json_t *ref = json_load_file((kDir + "train.json").c_str(), 0, &e);
    ASSERT_TRUE(ref) << e.text;
    json_t *want = json_object_get(ref, "steps");
    const std::vector<std::string> data = {"--weights", kDir, "--data", kDir + "tokens.npy", "--labels",
                                           kDir + "labels.npy", "--steps", "5", "--warmup", "2", "-q"};
    for (auto [dp, tp] : {std::pair{1, 1}, {1, 2}, {2, 2}}) {
        const std::string what = "dp " + std::to_string(dp) + " tp " + std::to_string(tp),
                          sched = llama(d, tp, true, dp), log = d.path + "/log" + std::to_string(dp * tp) + ".json",
                          out = d.path + "/out" + std::to_string(dp * tp);
        std::vector<std::string> args = data;
        args.insert(args.end(), {"--pad-id", "0", "--eos-id", "2", "--log-json", log, "--save", out});
        Proc t = tprun(dp * tp, sched, args);
        ASSERT_EQ(t.code(), 0) << what << "\n" << t.describe();
        json_t *got = json_load_file(log.c_str(), 0, &e);
        ASSERT_TRUE(got) << e.text;
        json_t *steps = json_object_get(got, "steps");
        ASSERT_EQ(json_array_size(steps), json_array_size(want)) << what;
        for (size_t i = 0; i < json_array_size(want); i++) {
            json_t *s = json_array_get(steps, i), *w = json_array_get(want, i);
            EXPECT_NEAR(num(s, "loss"), num(w, "loss"), 1e-5 * num(w, "loss")) << what << " step " << i + 1;
            EXPECT_NEAR(num(s, "grad_norm"), num(w, "grad_norm"), 1e-4 * num(w, "grad_norm")) << what << " step "
                                                                                                 << i + 1;
        }
        EXPECT_LT(tpcc_test::worst_absolute(tpcc_test::read_weights_of(out, sched),
                                            tpcc_test::read_weights_of(kDir + "final.safetensors", sched)),
                  2e-5) << what;
        json_decref(got);
    }
    // the same data attended causally across documents and padding
    const std::string plain = llama(d, 1, false), log = d.path + "/plain.json";
    std::vector<std::string> args = data;
    args.insert(args.end(), {"--steps", "1", "--log-json", log});
    Proc t = tprun(1, plain, args);
    ASSERT_EQ(t.code(), 0) << t.describe();
    json_t *got = json_load_file(log.c_str(), 0, &e);
    ASSERT_TRUE(got) << e.text;
    const double first = num(json_array_get(want, 0), "loss");
    EXPECT_GT(std::abs(num(json_array_get(json_object_get(got, "steps"), 0), "loss") - first), 1e-3 * first);
    json_decref(got);
    json_decref(ref);
}

// Hugging Face's streams beside the data (--attention-mask,
// --position-ids) give the segments the ids give (--pad-id, --eos-id) on
// the fixture's rows of left padding and documents ended by EOS, whichever
// of the two marks the padding and the documents: the same losses and
// norms, bit for bit.
TEST(TrainMasks, StreamsGiveTheSegmentsOfTheIds)
{
    TempDir d;
    const std::string sched = llama(d, 1, true), mask = kDir + "attention_mask.npy", pos = kDir + "position_ids.npy";
    auto steps = [&](const std::string &name, const std::vector<std::string> &marks) {
        std::vector<std::string> args = {"--weights", kDir, "--data", kDir + "tokens.npy", "--labels",
                                         kDir + "labels.npy", "--steps", "3", "--warmup", "1", "-q", "--log-json",
                                         d.path + "/" + name + ".json"};
        args.insert(args.end(), marks.begin(), marks.end());
        Proc t = tprun(1, sched, args);
        EXPECT_EQ(t.code(), 0) << name << "\n" << t.describe();
        return tpcc_test::logged_fields(d.path + "/" + name + ".json", "loss", "grad_norm");
    };
    const auto ids = steps("ids", {"--pad-id", "0", "--eos-id", "2"});
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(steps("streams", {"--attention-mask", mask, "--position-ids", pos}), ids);
    EXPECT_EQ(steps("mask", {"--attention-mask", mask, "--eos-id", "2"}), ids);
    EXPECT_EQ(steps("positions", {"--pad-id", "0", "--position-ids", pos}), ids);
}

// What only the streams say (tools/mask_fixtures.py llama-streams): the
// pad id 0 is also a token of the text, and documents start without an
// EOS; transformers' LlamaForCausalLM given the attention_mask (as the
// document mask) and the position_ids: tprun's losses and norms at tp 1
// and 2. --pad-id 0 there takes the text's 0s for padding, after which
// the position ids go on: refused, where tprun would number otherwise.
TEST(TrainMasks, StreamsMatchTransformers)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string dir = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama-streams/";
    json_error_t e;
    json_t *ref = json_load_file((dir + "train.json").c_str(), 0, &e);
    ASSERT_TRUE(ref) << e.text;
    std::vector<std::pair<double, double>> want;
    size_t i;
    json_t *step;
    json_array_foreach(json_object_get(ref, "steps"), i, step)
        want.push_back({num(step, "loss"), num(step, "grad_norm")});
    json_decref(ref);
    ASSERT_EQ(want.size(), 5u);
    auto run = [&](int tp, const std::vector<std::string> &padding) {
        std::vector<std::string> args = {"--weights", kDir, "--data", dir + "tokens.npy", "--labels",
                                         dir + "labels.npy", "--position-ids", dir + "position_ids.npy", "--steps",
                                         "5", "--warmup", "2", "-q", "--log-json", d.path + "/log.json"};
        args.insert(args.end(), padding.begin(), padding.end());
        return tprun(tp, llama(d, tp, true), args);
    };
    for (int tp : {1, 2}) {
        Proc t = run(tp, {"--attention-mask", dir + "attention_mask.npy"});
        ASSERT_EQ(t.code(), 0) << t.describe();
        const auto got = tpcc_test::logged_fields(d.path + "/log.json", "loss", "grad_norm");
        ASSERT_EQ(got.size(), want.size()) << "tp " << tp;
        for (size_t k = 0; k < want.size(); k++) {
            EXPECT_NEAR(got[k].first, want[k].first, 1e-5 * want[k].first) << "tp " << tp << " step " << k + 1;
            EXPECT_NEAR(got[k].second, want[k].second, 1e-4 * want[k].second) << "tp " << tp << " step " << k + 1;
        }
    }
    Proc pad = run(1, {"--pad-id", "0"});
    EXPECT_EQ(pad.code(), 1) << pad.describe();
    EXPECT_TRUE(contains(pad.err, "position_ids.npy: position id 6 is 4 at the first token after padding"))
        << pad.describe();
}

std::vector<float> logits(const std::string &path)
{
    float *data = nullptr;
    int64_t shape[TP_NPY_MAX_DIMS];
    int ndim;
    char err[512];
    EXPECT_EQ(tp_npy_read_f32(path.c_str(), &data, shape, &ndim, err, sizeof err), 0) << err;
    int64_t n = 1;
    for (int i = 0; data && i < ndim; i++)
        n *= shape[i];
    std::vector<float> v(data, data + (data ? n : 0));
    free(data);
    return v;
}

// A forward run (GPT-2: learned positions, numbered by positions()): the
// second document of a packed row, after an EOS, gives the logits it gives
// as a sequence of its own.
TEST(TrainMasks, ForwardDocumentIsItsOwnSequence)
{
    TempDir d;
    auto gpt2 = [&](int seq, bool segments) {
        std::vector<std::string> args = {std::string(TPCC_SOURCE_DIR) + "/plans/gpt2-sp-tied.plan"};
        for (std::string def : {"vocab=64", "hidden=32", "layers=2", "heads=4", "ffn=64", "positions=16", "batch=1",
                                "tp=1"})
            args.insert(args.end(), {"-D", def});
        args.insert(args.end(), {"-D", "seq=" + std::to_string(seq)});
        if (segments)
            args.push_back("--segments");
        return compile(d, args, "gpt2-" + std::to_string(seq));
    };
    const int64_t vocab = 64;
    Proc packed = tprun(1, gpt2(8, true), {"--tokens", "5,9,3,1,7,11,13,17", "--labels", "tokens", "--eos-id", "1", "--out",
                                           d.path + "/packed.npy", "-q"});
    ASSERT_EQ(packed.code(), 0) << packed.describe();
    Proc alone = tprun(1, gpt2(4, false), {"--tokens", "7,11,13,17", "--labels", "tokens", "--out", d.path + "/alone.npy", "-q"});
    ASSERT_EQ(alone.code(), 0) << alone.describe();
    std::vector<float> p = logits(d.path + "/packed.npy"), a = logits(d.path + "/alone.npy");
    ASSERT_EQ(p.size(), (size_t)(8 * vocab));
    ASSERT_EQ(a.size(), (size_t)(4 * vocab));
    for (size_t i = 0; i < a.size(); i++)
        ASSERT_NEAR(p[4 * vocab + i], a[i], 1e-5) << i;
}

// --pad-id and --eos-id need a schedule with segments, ids of the
// vocabulary and one id each, the streams too and one source each for the
// padding and the documents, the evaluation's streams the training's;
// refused before any step, saying what to do.
TEST(TrainMasks, BadCombinationsAreRefusedBeforeTraining)
{
    TempDir d;
    const std::string with = llama(d, 1, true), without = llama(d, 1, false);
    const std::string mask = kDir + "attention_mask.npy", pos = kDir + "position_ids.npy";
    const std::vector<std::string> data = {"--weights", kDir, "--data", kDir + "tokens.npy", "--steps", "1", "-q"};
    struct Case { std::string sched; std::vector<std::string> extra; std::string says; };
    const std::vector<Case> cases = {
        {without, {"--eos-id", "2"}, "--eos-id: " + without + " takes no segments to restrict its attention with; "
                                     "compile it with tpcc --segments"},
        {without, {"--pad-id", "0"}, "--pad-id: " + without + " takes no segments"},
        {with, {"--pad-id", "2", "--eos-id", "2"}, "--pad-id and --eos-id are both 2: a token cannot both end a "
                                                   "document and be padding"},
        {with, {"--eos-id", "128"}, "--eos-id 128 is not a token of the model's vocabulary [0, 128)"},
        {without, {"--attention-mask", mask}, "--attention-mask: " + without + " takes no segments"},
        {with, {"--attention-mask", mask, "--pad-id", "0"}, "--attention-mask and --pad-id both say which tokens are "
                                                            "padding: give one"},
        {with, {"--position-ids", pos, "--eos-id", "2"}, "--position-ids and --eos-id both say where documents "
                                                         "start: give one"},
        {with, {"--attention-mask", mask, "--eval-data", kDir + "tokens.npy"},
         "--attention-mask gives --data's mask values; --eval-data " + kDir + "tokens.npy needs its own: give "
         "--eval-attention-mask FILE"},
        {with, {"--position-ids", pos, "--eval-data", kDir + "tokens.npy", "--eval-position-ids", pos,
                "--eval-attention-mask", mask},
         "--eval-attention-mask goes with --attention-mask: the validation stream's segments come from what the "
         "training stream's do"},
        {with, {"--eval-position-ids", pos}, "--eval-position-ids goes with --eval-data FILE"},
    };
    for (const Case &c : cases) {
        std::vector<std::string> args = data;
        args.insert(args.end(), c.extra.begin(), c.extra.end());
        Proc t = tprun(1, c.sched, args);
        EXPECT_EQ(t.code(), 1) << t.describe();
        EXPECT_TRUE(contains(t.err, c.says)) << t.err;
        EXPECT_FALSE(contains(t.out, "step 1")) << t.out;
    }
    Proc bad = tprun(1, with, {"--weights", kDir, "--data", kDir + "tokens.npy", "--steps", "1", "--pad-id", "x"});
    EXPECT_EQ(bad.code(), 2) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "--pad-id takes a token id, a whole number from 0, not 'x'")) << bad.err;
}

// tpcc --segments: the schedule names the input, and the flag goes with
// what writes or checks a schedule.
TEST(TrainMasks, CompilerWritesTheSegmentsInput)
{
    TempDir d;
    const std::string sched = llama(d, 2, true);
    json_error_t e;
    json_t *root = json_load_file(sched.c_str(), 0, &e);
    ASSERT_TRUE(root) << e.text;
    EXPECT_TRUE(json_is_integer(json_object_get(json_object_get(root, "inputs"), "segments")));
    json_decref(root);
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--segments", "--explain"});
    EXPECT_EQ(c.code(), 2) << c.describe();
    EXPECT_TRUE(contains(c.err, "--segments goes with -o, --check or --report")) << c.err;
}

} // namespace
