// Training on labels that are not the input ids (--labels, --ignore-index;
// runtime/train/batches.h) against PyTorch's fixtures
// (tools/label_fixtures.py): a fine-tuning batch with -100 over prompts and
// padding, whose loss is the mean over the labelled tokens of the whole
// global batch at every tp and dp degree, and seed 003's loop (torchtitan's
// Llama, pre-shifted targets, CrossEntropyLoss(ignore_index=PAD), its
// AdamW and warm-up); then the data the labels are refused for.
#include <gtest/gtest.h>

#include <jansson.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/grad_files.h"
#include "tests/support/process.h"
#include "tests/support/token_files.h"
#include "tests/support/train_harness.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::read_weights_of;
using tpcc_test::TempDir;
using tpcc_test::worst_absolute;

using tpcc_test::kTprun;
const std::string kFixtures = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/";

Proc tprun(int ranks, const std::string &sched, const std::vector<std::string> &extra)
{
    std::vector<std::string> args = {"-n", std::to_string(ranks), sched};
    args.insert(args.end(), extra.begin(), extra.end());
    return tpcc_test::run_program(kTprun, args, {}, 300);
}

std::string compile(const TempDir &d, const std::vector<std::string> &args, const std::string &name)
{
    std::string sched = d.path + "/" + name + ".sched";
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--train", "-o", sched});
    Proc c = tpcc_test::run_tpcc(a);
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

double num(json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

// Each step's loss, rate and norm of --log-json `log` against the fixture's
// train.json, and the --save directory's weights (where `saved` names one)
// against final.safetensors.
void expect_fixture_steps(const std::string &dir, const std::string &log, const std::string &saved,
                          const std::string &sched, const std::string &what)
{
    json_error_t e;
    json_t *ref = json_load_file((dir + "train.json").c_str(), 0, &e), *got = json_load_file(log.c_str(), 0, &e);
    ASSERT_TRUE(ref && got) << what << ": " << e.text;
    json_t *steps = json_object_get(got, "steps"), *want = json_object_get(ref, "steps");
    ASSERT_EQ(json_array_size(steps), json_array_size(want)) << what;
    for (size_t i = 0; i < json_array_size(want); i++) {
        json_t *s = json_array_get(steps, i), *w = json_array_get(want, i);
        EXPECT_NEAR(num(s, "loss"), num(w, "loss"), 1e-5 * num(w, "loss")) << what << " step " << i + 1;
        EXPECT_NEAR(num(s, "grad_norm"), num(w, "grad_norm"), 1e-4 * num(w, "grad_norm")) << what << " step " << i + 1;
        EXPECT_NEAR(num(s, "lr"), num(w, "lr"), 1e-12 + 1e-12 * num(w, "lr")) << what << " step " << i + 1;
    }
    if (!saved.empty()) {
        EXPECT_LT(worst_absolute(read_weights_of(saved, sched), read_weights_of(dir + "final.safetensors", sched)),
                  2e-5) << what;
    }
    json_decref(ref);
    json_decref(got);
}

// transformers' fine-tuning loss (labels -100 over prompts and padding)
// at tp 1, tp 2 and dp 2 x tp 2. The two rows of a batch hold 13 and 3
// labelled tokens: a replica of one row each averaging their means gives
// another loss (5.73 against 5.57 at step 1) and other gradients.
TEST(TrainLabels, FineTuningMatchesTransformersAtEveryDegree)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string dir = kFixtures + "llama-labels/", plan = std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan";
    std::string dp;
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, dp));
    struct Run { int dp, tp; std::string sched; };
    std::vector<Run> runs;
    for (int tp : {1, 2})
        runs.push_back({1, tp, compile(d, {plan, "--hf-config", dir + "config.json", "-D", "vocab_multiple=1", "-D",
                                           "tp=" + std::to_string(tp), "-D", "seq=16", "-D", "batch=2"},
                                       "tp" + std::to_string(tp))});
    std::string sched = d.path + "/dp2tp2.sched";
    Proc c = tpcc_test::compile_dp(dp, 2, 2, 1, sched, true, "fp32", "llama-labels");
    ASSERT_EQ(c.code(), 0) << c.describe();
    runs.push_back({2, 2, sched});
    for (const Run &r : runs) {
        const std::string what = "dp " + std::to_string(r.dp) + " tp " + std::to_string(r.tp),
                          log = d.path + "/log" + std::to_string(r.dp * r.tp) + ".json",
                          out = d.path + "/out" + std::to_string(r.dp * r.tp);
        Proc t = tprun(r.dp * r.tp, r.sched, {"--weights", dir, "--data", dir + "tokens.npy", "--labels",
                                              dir + "labels.npy", "--steps", "5", "--warmup", "2", "--log-json", log,
                                              "--save", out, "-q"});
        ASSERT_EQ(t.code(), 0) << what << "\n" << t.describe();
        expect_fixture_steps(dir, log, out, r.sched, what);
    }
}

// Gradient accumulation as transformers' Trainer does it: each step 4
// micro-batches of a row, each loss the sum over the step's labelled tokens
// (num_items_in_batch), one optimizer step. tprun's 4 runs of a batch-1
// schedule at tp 1 (--micro-batches 4), at tp 2 from the plan's
// train { micro_batches = 4 }, and 2 replicas x 2 micro-batches at tp 2.
TEST(TrainLabels, GradientAccumulationMatchesTransformers)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string dir = kFixtures + "llama-accum/";
    std::string with_key, plain;
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, with_key, "plans/llama-sp.plan", "micro_batches = 4"));
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, plain));
    struct Run { std::string plan; int dp, tp; std::vector<std::string> flags; };
    const std::vector<Run> runs = {{plain, 1, 1, {"--micro-batches", "4"}}, {with_key, 1, 2, {}},
                                   {plain, 2, 2, {"--micro-batches", "2"}}};
    for (size_t k = 0; k < runs.size(); k++) {
        const Run &r = runs[k];
        const std::string what = "dp " + std::to_string(r.dp) + " tp " + std::to_string(r.tp),
                          sched = d.path + "/accum" + std::to_string(k) + ".sched",
                          log = d.path + "/log" + std::to_string(k) + ".json", out = d.path + "/out" + std::to_string(k);
        Proc c = tpcc_test::compile_dp(r.plan, r.dp, r.tp, 1, sched, true, "fp32", "llama-accum");
        ASSERT_EQ(c.code(), 0) << c.describe();
        std::vector<std::string> args = {"--weights", dir, "--data", dir + "tokens.npy", "--labels", dir + "labels.npy",
                                         "--steps", "5", "--warmup", "2", "--log-json", log, "--save", out, "-q"};
        args.insert(args.end(), r.flags.begin(), r.flags.end());
        Proc t = tprun(r.dp * r.tp, sched, args);
        ASSERT_EQ(t.code(), 0) << what << "\n" << t.describe();
        expect_fixture_steps(dir, log, out, sched, what);
        json_t *got = json_load_file(log.c_str(), 0, nullptr);
        EXPECT_EQ(json_integer_value(json_object_get(json_object_get(got, "settings"), "micro_batches")),
                  4 / r.dp) << what;
        json_decref(got);
    }
}

// Seed 003's loop: torchtitan's Llama returning its logits (tpcc --loss
// cross_entropy, a loss that does not shift), x and y cut from padded
// [BOT] text [EOT] sequences, ignore_index=PAD, AdamW(betas=(0.9, 0.99),
// weight_decay=0.1) on every parameter, LinearLR(start_factor=0.1) then
// the cosine: PyTorch's five steps at tp 1 and 2 from tprun's flags, and
// at dp 2 x tp 2 from the plan's train { } alone, which also masks the
// padding from attention (pad_id, as the seed's attention_mask). (A step's
// loss and norm are those of the weights the steps before it left; --save,
// which writes a Hugging Face directory, has no config.json to write for
// this model.)
TEST(TrainLabels, Seed003LoopMatchesPyTorch)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string dir = kFixtures + "llama-seed003/";
    std::string recipe_plan;
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, recipe_plan, "plans/llama-torchtitan.plan",
                                               "betas = (0.9, 0.99)\n    weight_decay = 0.1\n    decay_all = True\n"
                                               "    warmup_steps = 2\n    start_factor = 0.1\n    ignore_index = 0\n"
                                               "    pad_id = 0"));
    const std::vector<std::string> recipe_flags = {"--ignore-index", "0", "--warmup", "2", "--warmup-start-factor",
                                                   "0.1", "--adam-beta2", "0.99", "--weight-decay", "0.1",
                                                   "--decay-all"};
    struct Run { int dp, tp; std::string plan; std::vector<std::string> flags; };
    const std::vector<Run> runs = {{1, 1, std::string(TPCC_SOURCE_DIR) + "/plans/llama-torchtitan.plan", recipe_flags},
                                   {1, 2, std::string(TPCC_SOURCE_DIR) + "/plans/llama-torchtitan.plan", recipe_flags},
                                   {2, 2, recipe_plan, {}}};
    for (const Run &r : runs) {
        std::vector<std::string> args = {r.plan, "--loss", "cross_entropy", "-D", "tp=" + std::to_string(r.tp)};
        if (r.dp > 1)
            args.insert(args.end(), {"-D", "dp=" + std::to_string(r.dp)});
        for (const char *def : {"vocab=128", "hidden=32", "layers=2", "heads=4", "kv_heads=2", "ffn=64", "seq=16",
                                "rope_theta=10000.0", "use_rope_scaling=false", "rms_norm_eps=1e-5"})
            args.insert(args.end(), {"-D", def});
        args.insert(args.end(), {"-D", "batch=" + std::to_string(2 / r.dp)});
        const std::string what = "dp " + std::to_string(r.dp) + " tp " + std::to_string(r.tp),
                          name = "seed003-" + std::to_string(r.dp) + "x" + std::to_string(r.tp),
                          sched = compile(d, args, name), log = d.path + "/" + name + ".json";
        std::vector<std::string> run = {"--weights", dir + "model.safetensors", "--data", dir + "tokens.npy",
                                        "--labels", dir + "labels.npy", "--steps", "5", "--log-json", log, "-q"};
        run.insert(run.end(), r.flags.begin(), r.flags.end());
        Proc t = tprun(r.dp * r.tp, sched, run);
        ASSERT_EQ(t.code(), 0) << what << "\n" << t.describe();
        expect_fixture_steps(dir, log, "", sched, what);
        if (r.dp > 1) {   // the plan's pad_id reached the run: the schedule takes segments, the log names it
            EXPECT_TRUE(contains(tpcc_test::slurp(sched), "\"segments\"")) << what;
            EXPECT_TRUE(contains(tpcc_test::slurp(log), "\"pad_id\": 0")) << what;
        }
    }
}

// Shuffled epochs: two passes over the llama fixture's 10 samples (5 steps
// each) in orders drawn from the seed; stopped after step 3 and resumed,
// the run sees the same samples and ends with the same weights, bit for
// bit, as the run that never stopped; --epochs alone takes every step.
TEST(TrainData, ShuffledEpochsResumeWhereTheyStopped)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string dir = kFixtures + "llama/";
    const std::string sched = compile(d, {std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                          dir + "config.json", "-D", "vocab_multiple=1", "-D", "tp=2", "-D", "seq=16",
                                          "-D", "batch=2"}, "tp2");
    // a constant rate: a run of 3 steps takes the first 3 of a run of 7
    const std::vector<std::string> common = {"--data", dir + "tokens.npy", "--epochs", "2", "--shuffle-seed", "11",
                                             "--schedule", "constant", "-q"};
    auto run = [&](std::vector<std::string> extra) {
        extra.insert(extra.end(), common.begin(), common.end());
        return tprun(2, sched, extra);
    };
    Proc whole = run({"--weights", dir, "--steps", "7", "--save", d.path + "/whole", "--log-json", d.path + "/w.json"});
    ASSERT_EQ(whole.code(), 0) << whole.describe();
    Proc part = run({"--weights", dir, "--steps", "3", "--save", d.path + "/part"});
    ASSERT_EQ(part.code(), 0) << part.describe();
    Proc rest = run({"--resume", d.path + "/part", "--steps", "7", "--save", d.path + "/rest", "--log-json",
                     d.path + "/r.json"});
    ASSERT_EQ(rest.code(), 0) << rest.describe();
    EXPECT_TRUE(tpcc_test::slurp(d.path + "/whole/model.safetensors") ==
                tpcc_test::slurp(d.path + "/rest/model.safetensors"));
    const std::vector<double> w = tpcc_test::logged_losses(d.path + "/w.json"),
                              r = tpcc_test::logged_losses(d.path + "/r.json");
    ASSERT_EQ(w.size(), 7u);
    ASSERT_EQ(r.size(), 4u);
    for (size_t i = 0; i < 4; i++)
        EXPECT_EQ(r[i], w[3 + i]) << "step " << 4 + i;
    // tprun_state.json records the order; a resume that would read others is refused
    EXPECT_TRUE(contains(tpcc_test::slurp(d.path + "/part/tprun_state.json"), "\"shuffle_seed\": 11"));
    for (const std::vector<std::string> &change :
         {std::vector<std::string>{"--shuffle-seed", "12"}, std::vector<std::string>{"--micro-batches", "2"}}) {
        std::vector<std::string> args = {"--resume", d.path + "/part", "--steps", "7", "--data", dir + "tokens.npy",
                                         "--epochs", "4", "-q"};
        args.insert(args.end(), change.begin(), change.end());
        if (change[0] != "--shuffle-seed")
            args.insert(args.end(), {"--shuffle-seed", "11"});
        Proc refused = tprun(2, sched, args);
        EXPECT_NE(refused.code(), 0) << refused.describe();
        EXPECT_TRUE(contains(refused.err, "was trained with another " +
                                          std::string(change[0] == "--shuffle-seed" ? "--shuffle-seed" : "samples a step")))
            << refused.describe();
    }
    // another seed reads other samples: other losses
    Proc other = tprun(2, sched, {"--weights", dir, "--data", dir + "tokens.npy", "--epochs", "2", "--shuffle-seed",
                                  "12", "--steps", "7", "--log-json", d.path + "/o.json", "-q"});
    ASSERT_EQ(other.code(), 0) << other.describe();
    EXPECT_NE(tpcc_test::logged_losses(d.path + "/o.json"), w);
    // --epochs without --steps: every step of the epochs, one as well
    for (int epochs : {1, 2}) {
        Proc all = tprun(2, sched, {"--weights", dir, "--data", dir + "tokens.npy", "--epochs", std::to_string(epochs),
                                    "--log-json", d.path + "/a.json", "-q"});
        ASSERT_EQ(all.code(), 0) << all.describe();
        EXPECT_EQ(tpcc_test::logged_losses(d.path + "/a.json").size(), 5u * (size_t)epochs);
    }
}

// --eval-data: the validation loss of the weights as they stand, over
// every whole batch of the stream, after every --eval-every steps and the
// last, and its perplexity. Evaluating changes no step (the same losses as
// without), and a stream that is the training data itself gives, before
// any update, the first step's loss (here after step 0: a zero rate). A
// bad value is found by the rank whose half of the stream holds it.
TEST(TrainData, EvaluationReportsTheValidationLoss)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string dir = kFixtures + "llama-labels/";
    std::string dp;
    ASSERT_NO_FATAL_FAILURE(tpcc_test::dp_plan(d, dp));
    const std::string sched = d.path + "/dp2.sched";
    Proc c = tpcc_test::compile_dp(dp, 2, 1, 1, sched, true, "fp32", "llama-labels");
    ASSERT_EQ(c.code(), 0) << c.describe();
    const std::vector<std::string> common = {"--weights", dir, "--data", dir + "tokens.npy", "--labels",
                                             dir + "labels.npy", "--steps", "3", "--warmup", "2"};
    auto run = [&](const std::string &log, std::vector<std::string> extra) {
        extra.insert(extra.end(), common.begin(), common.end());
        extra.insert(extra.end(), {"--log-json", log});
        return tprun(2, sched, extra);
    };
    Proc plain = run(d.path + "/plain.json", {"-q"});
    ASSERT_EQ(plain.code(), 0) << plain.describe();
    Proc with = run(d.path + "/eval.json", {"--eval-data", dir + "tokens.npy", "--eval-labels", dir + "labels.npy",
                                            "--eval-every", "2"});
    ASSERT_EQ(with.code(), 0) << with.describe();
    EXPECT_TRUE(contains(with.out, "eval after step 2: loss ")) << with.out;
    EXPECT_TRUE(contains(with.out, "eval after step 3: loss ")) << with.out;
    EXPECT_FALSE(contains(with.out, "eval after step 1")) << with.out;
    EXPECT_TRUE(contains(with.out, "trained steps 1-3 in ")) << with.out;     // the summary, with the last eval
    EXPECT_TRUE(contains(with.out.substr(with.out.find("trained steps")), ", eval loss ")) << with.out;
    EXPECT_EQ(tpcc_test::logged_losses(d.path + "/eval.json"), tpcc_test::logged_losses(d.path + "/plain.json"));
    json_t *log = json_load_file((d.path + "/eval.json").c_str(), 0, nullptr);
    ASSERT_TRUE(log);
    json_t *steps = json_object_get(log, "steps");
    EXPECT_FALSE(json_object_get(json_array_get(steps, 0), "eval_loss"));
    const double loss = num(json_array_get(steps, 1), "eval_loss");
    EXPECT_NEAR(num(json_array_get(steps, 1), "eval_perplexity"), std::exp(loss), 1e-9 * std::exp(loss));
    json_decref(log);
    // the whole stream (5 batches of 2 rows) before any update: the mean over
    // all its labelled tokens, which the first step's loss is for its batch;
    // a zero rate keeps the weights, so it equals transformers' loss there
    Proc zero = run(d.path + "/zero.json", {"--eval-data", dir + "tokens.npy", "--eval-labels", dir + "labels.npy",
                                            "--eval-every", "1", "--lr", "0", "-q"});
    ASSERT_EQ(zero.code(), 0) << zero.describe();
    json_t *z = json_load_file((d.path + "/zero.json").c_str(), 0, nullptr);
    ASSERT_TRUE(z);
    const double e1 = num(json_array_get(json_object_get(z, "steps"), 0), "eval_loss"),
                 e3 = num(json_array_get(json_object_get(z, "steps"), 2), "eval_loss");
    EXPECT_EQ(e1, e3);   // nothing moved
    json_decref(z);
    json_t *ref = json_load_file((dir + "eval.json").c_str(), 0, nullptr);
    ASSERT_TRUE(ref);
    EXPECT_NEAR(e1, num(ref, "loss"), 1e-5 * num(ref, "loss"));
    json_decref(ref);
    // a bad label in rank 1's half of the stream: found there, said once
    std::vector<int32_t> labels(160, 7);
    labels[150] = 128;
    const std::string bad = d.write("bad.npy", tpcc_test::npy("<i4", tpcc_test::raw(labels), "(160,)"));
    Proc refused = run(d.path + "/bad.json", {"--eval-data", dir + "tokens.npy", "--eval-labels", bad, "-q"});
    EXPECT_EQ(refused.code(), 1) << refused.describe();
    const std::string says = "--eval-labels " + bad + ": label 150 is 128, neither a token of the model's vocabulary";
    EXPECT_TRUE(contains(refused.err, says)) << refused.describe();
    EXPECT_EQ(refused.err.find(says), refused.err.rfind(says)) << refused.describe();
}

// Labels that cannot be scored are refused before the first step, with the
// file, the position or step and the fix.
TEST(TrainLabels, BadLabelsAreRefusedBeforeTraining)
{
    TempDir d;
    const std::string dir = kFixtures + "llama-labels/";
    const std::string sched = compile(d, {std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                          dir + "config.json", "-D", "vocab_multiple=1", "-D", "tp=1", "-D", "seq=16",
                                          "-D", "batch=2"}, "tp1");
    auto labels_file = [&](const std::string &name, std::vector<int32_t> v) {
        return d.write(name, tpcc_test::npy("<i4", tpcc_test::raw(v), "(" + std::to_string(v.size()) + ",)"));
    };
    std::vector<int32_t> ok(32 * 5, 7);
    std::vector<int32_t> outside = ok, minus100 = ok, none = ok, shorter(31 * 5, 7);
    outside[40] = 128;
    minus100[3] = -100;
    for (int i = 32; i < 64; i++)
        none[i] = -100;
    struct Case { std::vector<std::string> extra; std::string says; };
    const std::vector<Case> cases = {
        {{"--labels", labels_file("short.npy", shorter)},
         "holds 155 labels and --data " + dir + "tokens.npy 160 tokens: the labels are a stream beside the tokens, "
         "one per token"},
        {{"--labels", labels_file("outside.npy", outside)},
         "label 40 is 128, neither a token of the model's vocabulary [0, 128) nor the ignore index -100"},
        {{"--labels", labels_file("minus100.npy", minus100), "--ignore-index", "0"},
         "label 3 is -100, neither a token of the model's vocabulary [0, 128) nor the ignore index 0 (--ignore-index; "
         "-100 is ignored only as the default)"},
        {{"--labels", labels_file("none.npy", none)},
         "step 2 has no label to score: every label of its 32 tokens is ignored (--ignore-index -100, or the last "
         "position of a row, which has no next token), so its loss would be 0/0"},
        {{"--labels", "tokens"}, "its labels are the --data tokens already, unless --labels FILE gives a stream"},
        {{"--ignore-index", "0x10"}, "--ignore-index takes a whole number"},
    };
    for (const Case &c : cases) {
        std::vector<std::string> args = {sched, "--weights", dir, "--data", dir + "tokens.npy", "--steps", "5",
                                         "--save", d.path + "/never"};
        args.insert(args.end(), c.extra.begin(), c.extra.end());
        Proc r = tpcc_test::run_program(kTprun, args);
        EXPECT_NE(r.code(), 0) << r.describe();
        EXPECT_TRUE(contains(r.err, c.says)) << r.describe();
        EXPECT_FALSE(contains(r.out, "step 1")) << r.describe();
    }
}

}  // namespace
