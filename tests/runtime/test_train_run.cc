// tprun training end to end on the transformers fixtures of
// tests/fixtures/train/ (tools/train_fixtures.py): each step's loss, rate
// and gradient norm against torch.optim.AdamW + clip_grad_norm_ +
// get_cosine_schedule_with_warmup, the first step's gathered gradients
// against PyTorch autograd, the same at tp 1 and 2, plans/llama-2d.plan
// against tensor parallelism + FSDP2 (tools/fsdp2_fixture.py), and a loss
// that goes down over 20 steps of an llm.c token file.
#include <gtest/gtest.h>

#include <jansson.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/grad_files.h"
#include "tests/support/process.h"
#include "tests/support/token_files.h"
#include "tests/support/train_harness.h"
extern "C" {
#include "runtime/io/safetensors_write.h"
#include "runtime/io/weights.h"
#include "sched/load.h"
}

namespace {

using tpcc_test::contains;
using tpcc_test::read_weights_of;
using tpcc_test::worst_absolute;
using tpcc_test::worst_relative;
using tpcc_test::Proc;
using tpcc_test::TempDir;
using tpcc_test::compile_dp;
using tpcc_test::dp_plan;

using tpcc_test::kTprun;
const std::string kFixtures = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/";

// A training step of `plan` on the checkpoint directory `dir`'s config.json
// (where it has one; else the sizes of the model and of `extra`).
std::string compile_plan(const TempDir &d, const std::string &dir, const std::string &plan, int tp,
                         const std::vector<std::string> &extra)
{
    std::string sched = d.path + "/step-tp" + std::to_string(tp) + "-" + std::to_string(extra.size()) + ".sched";
    std::vector<std::string> args = {std::string(TPCC_SOURCE_DIR) + "/" + plan, "-D", "tp=" + std::to_string(tp),
                                     "-D", "seq=16", "-D", "batch=2", "--train", "-o", sched};
    if (std::filesystem::exists(dir + "config.json"))
        args.insert(args.end(), {"--hf-config", dir + "config.json"});
    args.insert(args.end(), extra.begin(), extra.end());
    Proc c = tpcc_test::run_tpcc(args);
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

std::string compile(const TempDir &d, const std::string &fixture, int tp)
{
    return compile_plan(d, kFixtures + fixture + "/", "plans/llama-sp.plan", tp, {"-D", "vocab_multiple=1"});
}

Proc train(const std::string &sched, int tp, const std::vector<std::string> &extra)
{
    std::vector<std::string> args = {"-n", std::to_string(tp), sched};
    args.insert(args.end(), extra.begin(), extra.end());
    return tpcc_test::run_program(kTprun, args, {}, 300);
}

double num(json_t *step, const char *key) { return json_number_value(json_object_get(step, key)); }

// transformers' and torch's five steps (train.json) at tp 1 and 2.
TEST(TrainRun, MatchesPyTorchStepByStepAtTp1And2)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string dir = kFixtures + "llama/";
    json_error_t e;
    json_t *ref = json_load_file((dir + "train.json").c_str(), 0, &e);
    ASSERT_TRUE(ref) << e.text;
    std::vector<std::vector<std::vector<float>>> grads;
    for (int tp : {1, 2}) {
        std::string sched = compile(d, "llama", tp), log = d.path + "/log.json",
                    g = d.path + "/g" + std::to_string(tp) + ".safetensors";
        Proc r = train(sched, tp, {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "5", "--warmup", "2",
                                   "--log-json", log, "--grads-out", g, "-q"});
        ASSERT_EQ(r.code(), 0) << r.describe();
        EXPECT_EQ(r.out, "");     // -q
        json_t *got = json_load_file(log.c_str(), 0, &e);
        ASSERT_TRUE(got) << e.text;
        json_t *steps = json_object_get(got, "steps"), *want = json_object_get(ref, "steps");
        ASSERT_EQ(json_array_size(steps), 5u);
        for (size_t i = 0; i < 5; i++) {
            json_t *s = json_array_get(steps, i), *w = json_array_get(want, i);
            EXPECT_EQ(json_integer_value(json_object_get(s, "step")), json_integer_value(json_object_get(w, "step")));
            // fp32 sums in another order than torch's: 1e-5 relative on the loss, 1e-4 on the norm
            EXPECT_NEAR(num(s, "loss"), num(w, "loss"), 1e-5 * num(w, "loss")) << "tp " << tp << " step " << i + 1;
            EXPECT_NEAR(num(s, "grad_norm"), num(w, "grad_norm"), 1e-4 * num(w, "grad_norm")) << "step " << i + 1;
            EXPECT_DOUBLE_EQ(num(s, "lr"), num(w, "lr")) << "step " << i + 1;
            EXPECT_GT(num(s, "seconds"), 0);
        }
        json_decref(got);
        grads.push_back(read_weights_of(g, sched));
        EXPECT_LT(worst_relative(grads.back(), read_weights_of(dir + "grads.safetensors", sched)), 1e-4) << "tp " << tp;
    }
    EXPECT_LT(worst_relative(grads[1], grads[0]), 1e-4);
    json_decref(ref);
}

// A --log-json record against the llama-recipe fixture's train.json:
// PyTorch's rates, the losses and norms of its steps, and its settings
// under its names.
void expect_recipe(const std::string &log)
{
    json_error_t e;
    json_t *ref = json_load_file((kFixtures + "llama-recipe/train.json").c_str(), 0, &e);
    ASSERT_TRUE(ref) << e.text;
    json_t *got = json_load_file(log.c_str(), 0, &e);
    ASSERT_TRUE(got) << e.text;
    json_t *steps = json_object_get(got, "steps"), *want = json_object_get(ref, "steps");
    ASSERT_EQ(json_array_size(steps), 5u);
    for (size_t i = 0; i < 5; i++) {
        json_t *s = json_array_get(steps, i), *w = json_array_get(want, i);
        EXPECT_NEAR(num(s, "loss"), num(w, "loss"), 1e-5 * num(w, "loss")) << "step " << i + 1;
        EXPECT_NEAR(num(s, "grad_norm"), num(w, "grad_norm"), 1e-4 * num(w, "grad_norm")) << "step " << i + 1;
        // CosineAnnealingLR steps its rate recursively, tprun in closed form
        EXPECT_NEAR(num(s, "lr"), num(w, "lr"), 1e-12 * num(w, "lr")) << "step " << i + 1;
    }
    // --log-json's settings are those of train.json, under its names
    json_t *settings = json_object_get(got, "settings");
    for (const char *key : {"lr", "betas", "eps", "weight_decay", "max_grad_norm", "warmup", "warmup_start_factor",
                            "min_lr", "schedule"})
        EXPECT_TRUE(json_equal(json_object_get(settings, key), json_object_get(ref, key))) << key;
    EXPECT_EQ(json_integer_value(json_object_get(settings, "steps")), 5);
    EXPECT_TRUE(json_is_false(json_object_get(settings, "decay_all")));
    json_decref(got);
    json_decref(ref);
}

// A seed script's recipe (tools/train_fixtures.py, llama-recipe):
// AdamW(betas=(0.9, 0.99), eps=1e-6, weight_decay=0.1) under PyTorch's
// SequentialLR of LinearLR(start_factor=0.1) and CosineAnnealingLR(eta_min=
// 1e-4), five steps at tp 2: the rates PyTorch's schedulers applied, the
// losses and norms of its steps and its final weights. Before these
// options tprun could express neither: its weights ended 2.8e-2 apart.
TEST(TrainRun, MatchesPyTorchsRecipe)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string dir = kFixtures + "llama-recipe/", sched = compile(d, "llama-recipe", 2), log = d.path + "/log.json";
    Proc r = train(sched, 2, {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "5", "--warmup", "2",
                              "--warmup-start-factor", "0.1", "--min-lr", "1e-4", "--adam-beta1", "0.9",
                              "--adam-beta2", "0.99", "--adam-epsilon", "1e-6", "--weight-decay", "0.1",
                              "--log-json", log, "--save", d.path + "/out", "-q"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    expect_recipe(log);
    EXPECT_LT(worst_absolute(read_weights_of(d.path + "/out", sched), read_weights_of(dir + "final.safetensors", sched)),
              2e-5);
}

// The same recipe written in the plan's train { } block, as the script
// names it, reaches tprun through the schedule: run with no optimizer or
// schedule flag, tprun takes PyTorch's steps and records the plan's
// settings as those in force; a flag still overrides its own value.
TEST(TrainRun, MatchesPyTorchsRecipeFromThePlan)
{
    TempDir d;
    std::string dir = kFixtures + "llama-recipe/", plan, sched = d.path + "/recipe.sched", log = d.path + "/log.json";
    tpcc_test::dp_plan(d, plan, "plans/llama-sp.plan",
                       "lr = 1e-3\n    betas = (0.9, 0.99)\n    eps = 1e-6\n    weight_decay = 0.1\n"
                       "    schedule = \"cosine\"\n    warmup_steps = 2\n    start_factor = 0.1\n    min_lr = 1e-4");
    Proc c = compile_dp(plan, 1, 1, 2, sched, true, "fp32", "llama-recipe");
    ASSERT_EQ(c.code(), 0) << c.describe();
    EXPECT_TRUE(contains(tpcc_test::slurp(sched), "\"train\": {\"lr\": 0.001, \"betas\": [0.9, 0.99], \"eps\": 1e-06, "
                                                  "\"weight_decay\": 0.1, \"schedule\": \"cosine\", "
                                                  "\"warmup_steps\": 2, \"start_factor\": 0.1, \"min_lr\": 0.0001}"))
        << tpcc_test::slurp(sched);
    Proc r = train(sched, 1, {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "5", "--log-json", log, "-q"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    expect_recipe(log);
    r = train(sched, 1, {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "5", "--log-json", log, "-q",
                         "--adam-epsilon", "1e-8", "--min-lr", "0"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    json_t *got = json_load_file(log.c_str(), 0, nullptr), *settings = json_object_get(got, "settings");
    EXPECT_EQ(num(settings, "eps"), 1e-8);
    EXPECT_EQ(num(settings, "min_lr"), 0.0);
    EXPECT_EQ(num(settings, "weight_decay"), 0.1);
    EXPECT_EQ(json_number_value(json_array_get(json_object_get(settings, "betas"), 1)), 0.99);
    json_decref(got);
}

// -O1 moves the rope ops of each attention's q and k into it and their
// inverses into its gradient (rope_attention, rope_attention_grad): a step
// computes the same bits as the separate ops at -O0, plain and with
// documents (--segments: positions restarting at each document, read by
// the rotation in the attention), with GQA (2 kv heads for 4).
TEST(TrainRun, RopeInAttentionIsTheRopeOpsBitForBit)
{
    TempDir d;
    const std::string dir = kFixtures + "llama/";
    for (bool documents : {false, true}) {
        std::vector<std::vector<float>> grads[2];
        double losses[2] = {0, 0};
        for (int o1 = 0; o1 < 2; o1++) {
            std::vector<std::string> extra = {"-D", "vocab_multiple=1", o1 ? "-O1" : "-O0"};
            if (documents)
                extra.push_back("--segments");
            const std::string sched = compile_plan(d, dir, "plans/llama-sp.plan", 1, extra);
            const std::string text = tpcc_test::slurp(sched);
            EXPECT_EQ(contains(text, "\"op\": \"rope\""), !o1) << "documents " << documents;
            EXPECT_EQ(contains(text, "\"op\": \"rope_attention_grad\""), o1 == 1) << "documents " << documents;
            const std::string g = d.path + "/g" + std::to_string(o1) + ".safetensors", log = d.path + "/log.json";
            std::vector<std::string> args = {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "1",
                                             "--grads-out", g, "--log-json", log, "-q"};
            if (documents)
                args.insert(args.end(), {"--pad-id", "0", "--eos-id", "2"});
            Proc r = train(sched, 1, args);
            ASSERT_EQ(r.code(), 0) << r.describe();
            grads[o1] = read_weights_of(g, sched);
            json_t *got = json_load_file(log.c_str(), 0, nullptr);
            ASSERT_TRUE(got);
            losses[o1] = num(json_array_get(json_object_get(got, "steps"), 0), "loss");
            json_decref(got);
        }
        EXPECT_EQ(worst_absolute(grads[1], grads[0]), 0.0) << "documents " << documents;
        EXPECT_EQ(losses[1], losses[0]) << "documents " << documents;
    }
}

// no_decay and the data keys of train { } reach tprun through the schedule
// too: the names as a list, eos_id as the segments' documents (the plan's
// eos_id gives the schedule its segments input, as tpcc --segments would),
// and the run records both as in force.
TEST(TrainRun, NoDecayAndDataKeysFromThePlan)
{
    TempDir d;
    std::string dir = kFixtures + "llama-recipe/", plan, sched = d.path + "/keys.sched", log = d.path + "/log.json";
    tpcc_test::dp_plan(d, plan, "plans/llama-sp.plan", "no_decay = (\"bias\", \"norm\")\n    eos_id = 2");
    Proc c = compile_dp(plan, 1, 1, 2, sched, true, "fp32", "llama-recipe");
    ASSERT_EQ(c.code(), 0) << c.describe();
    const std::string text = tpcc_test::slurp(sched);
    EXPECT_TRUE(contains(text, "\"train\": {\"no_decay\": [\"bias\", \"norm\"], \"eos_id\": 2}")) << text;
    EXPECT_TRUE(contains(text, "\"segments\"")) << text;
    Proc r = train(sched, 1, {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "1", "--log-json", log, "-q"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    json_t *got = json_load_file(log.c_str(), 0, nullptr), *settings = json_object_get(got, "settings");
    json_t *names = json_object_get(settings, "no_decay");
    ASSERT_EQ(json_array_size(names), 2u) << tpcc_test::slurp(log);
    EXPECT_STREQ(json_string_value(json_array_get(names, 1)), "norm");
    EXPECT_EQ(json_integer_value(json_object_get(settings, "eos_id")), 2);
    json_decref(got);
}

// --save after five steps holds torch's final weights; three steps saved
// and resumed to five give the same checkpoint as five in one go.
TEST(TrainRun, SaveHoldsTorchsWeightsAndResumeContinues)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string dir = kFixtures + "llama/", sched = compile(d, "llama", 2);
    std::vector<std::string> common = {"--data", dir + "tokens.npy", "--warmup", "2", "-q"};
    auto run = [&](std::vector<std::string> extra) {
        extra.insert(extra.end(), common.begin(), common.end());
        return train(sched, 2, extra);
    };
    Proc whole = run({"--weights", dir, "--steps", "5", "--save", d.path + "/five"});
    ASSERT_EQ(whole.code(), 0) << whole.describe();
    // each step moves a weight by at most about lr (1e-3): 2e-5 is a
    // hundredth of the five steps' movement, a wrong update is off by more
    EXPECT_LT(worst_absolute(read_weights_of(d.path + "/five", sched), read_weights_of(dir + "final.safetensors", sched)), 2e-5);
    // config.json is written again from its JSON, the same object
    json_t *saved = json_load_file((d.path + "/five/config.json").c_str(), 0, nullptr),
           *given = json_load_file((dir + "config.json").c_str(), 0, nullptr);
    EXPECT_TRUE(saved && given && json_equal(saved, given));
    json_decref(saved);
    json_decref(given);
    // the saved checkpoint runs forward as transformers runs the final model (logits.npy, the first batch)
    std::string fixture_tokens = tpcc_test::slurp(dir + "tokens.npy");
    size_t header = 10 + size_t((unsigned char)fixture_tokens[8]) + (size_t((unsigned char)fixture_tokens[9]) << 8);
    std::string batch = d.write("batch.npy", tpcc_test::npy("<i4", fixture_tokens.substr(header, 32 * 4), "(2, 16)"));
    std::string fwd = d.path + "/forward.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                  dir + "config.json", "-D", "tp=2", "-D", "seq=16", "-D", "batch=2", "-o", fwd});
    ASSERT_EQ(c.code(), 0) << c.describe();
    Proc logits = train(fwd, 2, {"--weights", d.path + "/five", "--tokens", batch, "--labels", "tokens", "--compare",
                                 dir + "logits.npy", "--tolerance", "1e-4"});
    EXPECT_EQ(logits.code(), 0) << logits.describe();
    EXPECT_TRUE(contains(tpcc_test::slurp(d.path + "/five/tprun_state.json"), "\"step\": 5"));

    Proc first = run({"--weights", dir, "--steps", "5", "--save", d.path + "/three"});
    ASSERT_EQ(first.code(), 0) << first.describe();
    Proc three = run({"--weights", dir, "--steps", "3", "--save", d.path + "/three"});   // replaces the directory
    ASSERT_EQ(three.code(), 0) << three.describe();
    EXPECT_TRUE(contains(tpcc_test::slurp(d.path + "/three/tprun_state.json"), "\"step\": 3"));
    Proc rest = run({"--resume", d.path + "/three", "--steps", "5", "--save", d.path + "/resumed"});
    ASSERT_EQ(rest.code(), 0) << rest.describe();
    EXPECT_LT(worst_absolute(read_weights_of(d.path + "/resumed", sched), read_weights_of(d.path + "/five", sched)), 1e-6);
    Proc done = run({"--resume", d.path + "/five", "--steps", "5"});
    EXPECT_NE(done.code(), 0);
    EXPECT_TRUE(contains(done.err, "has taken 5 steps already")) << done.describe();
    // a schedule of one layer resuming the two-layer model: refused
    std::string one_layer = compile_plan(d, dir, "plans/llama-sp.plan", 2, {"-D", "vocab_multiple=1", "-D", "layers=1"});
    std::vector<std::string> other = {"--resume", d.path + "/three", "--steps", "5"};
    other.insert(other.end(), common.begin(), common.end());
    Proc mismatch = train(one_layer, 2, other);
    EXPECT_NE(mismatch.code(), 0);
    EXPECT_TRUE(contains(mismatch.err, "optimizer.safetensors holds 42 tensors, the two moments of this schedule's 12 "
                                       "weights are 24: " + d.path + "/three was saved from another model"))
        << mismatch.describe();
    // the two-layer checkpoint under the one-layer schedule: layer 1's 9
    // tensors left unused, a warning; with --save, whose config.json would
    // say two layers, refused
    std::vector<std::string> part = {"--weights", dir, "--steps", "1"};
    part.insert(part.end(), common.begin(), common.end());
    part.pop_back();   // not -q: the warning
    Proc warned = train(one_layer, 2, part);
    EXPECT_EQ(warned.code(), 0) << warned.describe();
    EXPECT_TRUE(contains(warned.err, "tprun: warning: " + dir + " holds 9 tensors the schedule's model does not take "
                                     "(model.layers.1.input_layernorm.weight, ...), left unused")) << warned.describe();
    part.insert(part.end(), {"--save", d.path + "/other"});
    Proc refused = train(one_layer, 2, part);
    EXPECT_NE(refused.code(), 0);
    EXPECT_TRUE(contains(refused.err, "--save would copy its config.json, which describes another model"))
        << refused.describe();
    EXPECT_FALSE(std::filesystem::exists(d.path + "/other"));
}

// A checkpoint that saves a tied weight twice (torchtitan's output.weight
// beside tok_embeddings.weight; here the embedding's values under a name
// the model does not take) loads without the "does not take" warning: the
// copy is recognised by its values, not its name. The same name holding
// other values is warned about.
TEST(TrainRun, ATiedCopyIsKnownByItsValues)
{
    TempDir d;
    const std::string dir = kFixtures + "llama/", sched = compile(d, "llama", 1);
    tp_checkpoint *c = nullptr;
    char err[400];
    ASSERT_EQ(tp_checkpoint_open(&c, (dir + "model.safetensors").c_str(), err, sizeof err), 0) << err;
    std::vector<std::vector<float>> data;
    std::vector<tp_st_tensor> tensors;
    for (size_t i = 0; i < tp_checkpoint_num_tensors(c); i++) {
        tp_st_tensor t = {tp_checkpoint_tensor_name(c, i), 0, {}, nullptr};
        const char *dtype;
        ASSERT_EQ(tp_checkpoint_tensor_info(c, t.name, &dtype, &t.ndim, t.shape), 0);
        tp_weight_slice all = {t.name, 0, {t.shape[0], t.ndim == 2 ? t.shape[1] : 0}, {0, 0}, -1, 0, 0, t.ndim};
        data.emplace_back(tp_weight_slice_numel(&all));
        ASSERT_EQ(tp_checkpoint_read(c, &all, data.back().data(), err, sizeof err), 0) << err;
        tensors.push_back(t);
    }
    for (size_t i = 0; i < tensors.size(); i++)
        tensors[i].data = data[i].data();
    size_t embed = 0;
    while (embed < tensors.size() && std::string(tensors[embed].name) != "model.embed_tokens.weight")
        embed++;
    ASSERT_LT(embed, tensors.size());
    tp_st_tensor copy = tensors[embed];
    copy.name = "output.weight";
    tensors.push_back(copy);
    std::vector<float> other = data[embed];
    other.back() += 1.0f;
    for (bool tied : {true, false}) {
        tensors.back().data = tied ? data[embed].data() : other.data();
        const std::string ckpt = d.path + (tied ? "/tied.safetensors" : "/other.safetensors");
        ASSERT_EQ(tp_safetensors_write(ckpt.c_str(), tensors.data(), int(tensors.size()), err, sizeof err), 0) << err;
        Proc r = train(sched, 1, {"--weights", ckpt, "--data", dir + "tokens.npy", "--steps", "1"});
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_EQ(contains(r.err, "holds 1 tensors the schedule's model does not take (output.weight)"), !tied)
            << r.describe();
    }
    tp_checkpoint_close(c);
}

// --max-shard-size: above it, --save writes the weights as
// save_pretrained(max_shard_size=...) does (numbered shards and an index),
// which --weights and --resume read back as the one-file checkpoint.
TEST(TrainRun, MaxShardSizeShardsTheCheckpointWithAnIndex)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string dir = kFixtures + "llama/", sched = compile(d, "llama", 2);
    std::vector<std::string> common = {"--weights", dir, "--data", dir + "tokens.npy", "--steps", "2", "-q"};
    auto run = [&](std::vector<std::string> extra) {
        extra.insert(extra.begin(), common.begin(), common.end());
        return train(sched, 2, extra);
    };
    Proc one = run({"--save", d.path + "/one"});
    ASSERT_EQ(one.code(), 0) << one.describe();
    Proc sharded = run({"--save", d.path + "/sharded", "--max-shard-size", "20KB"});
    ASSERT_EQ(sharded.code(), 0) << sharded.describe();
    EXPECT_TRUE(std::filesystem::exists(d.path + "/one/model.safetensors"));
    EXPECT_FALSE(std::filesystem::exists(d.path + "/sharded/model.safetensors"));
    std::string index = tpcc_test::slurp(d.path + "/sharded/model.safetensors.index.json");
    EXPECT_TRUE(contains(index, "\"model-00001-of-0")) << index;
    EXPECT_TRUE(contains(index, "\"model.embed_tokens.weight\"")) << index;
    EXPECT_EQ(worst_absolute(read_weights_of(d.path + "/sharded", sched), read_weights_of(d.path + "/one", sched)),
              0.0);
    Proc resumed = train(sched, 2, {"--resume", d.path + "/sharded", "--data", dir + "tokens.npy", "--steps", "3",
                                    "-q"});
    EXPECT_EQ(resumed.code(), 0) << resumed.describe();

    Proc zero = run({"--save", d.path + "/z", "--max-shard-size", "0"});
    EXPECT_NE(zero.code(), 0);
    EXPECT_TRUE(contains(zero.err, "--max-shard-size takes a size such as 2GiB, 5GB or 500MB, not '0'"))
        << zero.describe();
    Proc alone = run({"--max-shard-size", "1GB"});
    EXPECT_EQ(alone.code(), 1);
    EXPECT_TRUE(contains(alone.err, "--max-shard-size goes with --save DIR")) << alone.describe();
}

// A checkpoint of the model `sched` trains, seeded, beside `config`
// (a config.json's text) in dir; returns the weights' bytes.
int64_t write_seeded_checkpoint(const std::string &dir, const std::string &sched, const std::string &config)
{
    tr_schedule s;
    char err[800] = "";
    EXPECT_EQ(tr_schedule_load(&s, sched.c_str(), 0, 0, err, sizeof err), 0) << err;
    std::vector<std::vector<float>> data(size_t(s.nweights));
    std::vector<tp_st_tensor> t(size_t(s.nweights));
    int64_t bytes = 0;
    for (int i = 0; i < s.nweights; i++) {
        const tr_weight &w = s.weights[i];
        tp_weight_slice whole = {w.name, 0, {w.logical[0], w.logical[1]}, {0, 0}, -1, 0, 0, w.rank};
        data[i].resize(size_t(tp_weight_slice_numel(&whole)));
        tp_weight_init_seeded(&whole, 7, data[i].data());
        t[i] = tp_st_tensor{w.name, w.rank, {w.logical[0], w.logical[1]}, data[i].data()};
        bytes += int64_t(data[i].size() * sizeof(float));
    }
    EXPECT_EQ(tp_safetensors_write((dir + "/model.safetensors").c_str(), t.data(), s.nweights, err, sizeof err), 0)
        << err;
    std::ofstream(dir + "/config.json") << config;
    tr_schedule_free(&s);
    return bytes;
}

// --save streams the checkpoint one tensor at a time: on a model of 8
// layers (some 36 MiB of weights, 2 MiB its largest tensor), saving adds
// less to the run's peak resident memory than half a copy of the weights,
// at tp 2 and with ZeRO-1 at dp 2 (where each rank once brought a whole
// region of each state back over dp: one copy). Gathering each state
// whole on rank 0, as a save once did, added 4.7 copies (measured: its
// region, every rank's, then weights and both moments).
TEST(TrainRun, SaveHoldsOneTensorAtATimeNotTheModel)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string config = tpcc_test::slurp(kFixtures + "llama/config.json");
    for (auto [from, to] : {std::pair<std::string, std::string>{"\"hidden_size\": 32", "\"hidden_size\": 256"},
                            {"\"head_dim\": 8", "\"head_dim\": 64"},
                            {"\"intermediate_size\": 64", "\"intermediate_size\": 1024"},
                            {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 8"},
                            {"\"vocab_size\": 128", "\"vocab_size\": 2048"}})
        tpcc_test::replace_once(config, from, to);
    std::string wide = d.path + "/wide/";
    std::filesystem::create_directory(wide);
    std::ofstream(wide + "config.json") << config;
    std::string sched = compile_plan(d, wide, "plans/llama-sp.plan", 2, {"-D", "vocab_multiple=1"});
    int64_t bytes = write_seeded_checkpoint(wide, sched, config);
    ASSERT_GT(bytes, int64_t(30) << 20);
    std::string zero_plan, zero = d.path + "/zero.sched";
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, zero_plan, "plans/llama-sp.plan", "shard = \"optimizer\","));
    Proc c = tpcc_test::run_tpcc({zero_plan, "--hf-config", wide + "config.json", "-D", "vocab_multiple=1", "-D",
                                  "dp=2", "-D", "tp=1", "-D", "seq=16", "-D", "batch=1", "--train", "-o", zero});
    ASSERT_EQ(c.code(), 0) << c.describe();
    for (const std::string &s : {sched, zero}) {
        std::vector<std::string> common = {"--weights", wide, "--data", kFixtures + "llama/tokens.npy", "--steps",
                                           "1", "-q"};
        Proc plain = train(s, 2, common);
        ASSERT_EQ(plain.code(), 0) << plain.describe();
        common.insert(common.end(), {"--save", d.path + "/saved"});
        Proc saved = train(s, 2, common);
        ASSERT_EQ(saved.code(), 0) << saved.describe();
        EXPECT_EQ(read_weights_of(d.path + "/saved", s).size(), read_weights_of(wide, s).size());
        ASSERT_GT(plain.max_rss_kb, 0);
        EXPECT_LT(saved.max_rss_kb - plain.max_rss_kb, bytes / 2 / 1024)
            << s << ": peak " << plain.max_rss_kb << " KiB without --save, " << saved.max_rss_kb << " KiB with it";
    }
}

// 20 steps on one batch repeated, from an llm.c .bin: the loss falls.
TEST(TrainRun, LossGoesDownOverTwentyStepsOfAnLlmcFile)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::vector<uint16_t> toks;
    for (int i = 0; i < 20 * 32; i++)
        toks.push_back(uint16_t((i % 32) * 7 % 128));
    std::string bin = d.write("tokens.bin", tpcc_test::llmc(20240520, 1, toks));
    std::string sched = compile(d, "llama", 2), log = d.path + "/log.json";
    Proc r = train(sched, 2, {"--weights", kFixtures + "llama/", "--data", bin, "--steps", "20", "--log-json", log});
    ASSERT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(contains(r.out, "step 20/20  loss ")) << r.out;
    json_error_t e;
    json_t *got = json_load_file(log.c_str(), 0, &e);
    ASSERT_TRUE(got) << e.text;
    json_t *steps = json_object_get(got, "steps");
    ASSERT_EQ(json_array_size(steps), 20u);
    double first = num(json_array_get(steps, 0), "loss"), last = num(json_array_get(steps, 19), "loss");
    EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
    json_decref(got);

    Proc shortr = train(sched, 2, {"--weights", kFixtures + "llama/", "--data", bin, "--steps", "21"});
    EXPECT_NE(shortr.code(), 0);
    EXPECT_TRUE(contains(shortr.err, "its 640 tokens hold 20 steps of 32 (batch x seq), --steps asks for 21"))
        << shortr.describe();
}

// ---- gradients across tp, -O0/-O1 and against autograd ----

struct GradCase {
    const char *dir;     // under tests/fixtures: train/<name> (with torch's grads.safetensors) or hf/<name>;
                         // "": tprun's seeded weights
    const char *plan;
    std::vector<int> tps;
    std::vector<std::string> defines;   // sizes a plan's own config block sets otherwise, and --loss
};

void PrintTo(const GradCase &c, std::ostream *os) { *os << c.dir << " " << c.plan; }

class TrainGrads : public testing::TestWithParam<GradCase> {};

// One step's gathered gradients at every tp degree (-O1), and at the
// largest with -O0, equal the first's within 1e-4 of each tensor's scale;
// where the fixture has them, equal PyTorch autograd's on the same
// transformers checkpoint and tokens.
TEST_P(TrainGrads, EqualAcrossTpAndOptimisationAndToAutograd)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    const GradCase &c = GetParam();
    std::string dir = *c.dir ? std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/" + c.dir + "/" : "";
    TempDir d;
    std::vector<uint16_t> toks;
    for (int i = 0; i < 33; i++)     // a step of 2 x 16, and its last label (--loss cross_entropy)
        toks.push_back(uint16_t((i * 37 + 11) % 128));
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240520, 1, toks));
    bool torch = std::string(c.dir).rfind("train/", 0) == 0;
    if (torch)
        data = dir + "tokens.npy";   // its first batch is the one autograd saw
    std::vector<std::pair<std::string, std::vector<std::string>>> runs;
    for (int tp : c.tps)
        runs.push_back({std::to_string(tp), c.defines});
    std::vector<std::string> o0 = c.defines;
    o0.push_back("-O0");
    runs.push_back({std::to_string(c.tps.back()), o0});
    std::vector<std::vector<float>> first;
    for (size_t i = 0; i < runs.size(); i++) {
        int tp = std::stoi(runs[i].first);
        std::string sched = compile_plan(d, dir, c.plan, tp, runs[i].second), g = d.path + "/g.safetensors";
        std::vector<std::string> args = {"--data", data, "--steps", "1", "--grads-out", g, "-q"};
        if (!dir.empty())
            args.insert(args.end(), {"--weights", dir});
        Proc r = train(sched, tp, args);
        ASSERT_EQ(r.code(), 0) << r.describe();
        std::vector<std::vector<float>> grads = read_weights_of(g, sched);
        std::string what = "tp " + runs[i].first + (i + 1 == runs.size() ? " -O0" : "");
        if (i == 0) {
            first = grads;
        } else {
            EXPECT_LT(worst_relative(grads, first), 1e-4) << what << " against tp " << c.tps[0];
        }
        if (torch) {
            EXPECT_LT(worst_relative(grads, read_weights_of(dir + "grads.safetensors", sched)), 1e-4) << what;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, TrainGrads,
    testing::Values(GradCase{"train/llama", "plans/llama-sp.plan", {1, 2, 4}, {}},
                    GradCase{"train/llama", "plans/llama-megatron.plan", {1, 2, 4}, {}},
                    GradCase{"train/llama", "plans/llama-tiny.plan", {1, 2, 4},   // vocab-parallel loss
                             {"-D", "vocab=128", "-D", "hidden=32", "-D", "layers=2", "-D", "heads=4", "-D",
                              "kv_heads=4", "-D", "ffn=64"}},
                    GradCase{"train/llama-gqa", "plans/llama-sp.plan", {1, 2}, {}},
                    GradCase{"train/llama", "plans/llama-replicated-attention.plan", {1, 2, 4}, {}},
                    // 2 kv heads gathered at tp 4: the gradients of k and v are sliced by features,
                    // each rank's quarter a half of a head
                    GradCase{"train/llama-gqa", "plans/llama-replicated-attention.plan", {1, 2, 4}, {}},
                    GradCase{"train/llama", "plans/llama-replicated-embedding.plan", {1, 2, 4}, {}},
                    GradCase{"train/llama", "plans/llama-sp-input-layouts.plan", {1, 2, 4}, {}},
                    GradCase{"train/gpt2-tied", "plans/gpt2-hf-sp.plan", {1, 2, 4}, {}},
                    // GPT-2 with q/k/v projections of their own (no checkpoint of transformers' has
                    // them): tprun's seeded weights
                    GradCase{"", "plans/gpt2-sp-tied.plan", {1, 2, 4},
                             {"-D", "vocab=128", "-D", "hidden=32", "-D", "layers=2", "-D", "heads=4", "-D",
                              "positions=32"}},
                    GradCase{"train/qwen3", "plans/qwen3-sp.plan", {1, 2, 4}, {}},
                    GradCase{"hf/mistral-kv4", "plans/mistral-sp.plan", {1, 2, 4}, {}},
                    GradCase{"hf/qwen2-gqa", "plans/qwen2-sp.plan", {1, 2}, {}},
                    GradCase{"hf/phi3-mha", "plans/phi3-sp.plan", {1, 2, 4}, {}},
                    GradCase{"hf/gemma-mha", "plans/gemma-sp.plan", {1, 2, 4}, {}},
                    GradCase{"hf/gemma2-mha", "plans/gemma2-sp.plan", {1, 2, 4}, {}},
                    // the plans transformers applies (tp_plan="auto"), trained as tpcc compiles them
                    GradCase{"train/llama", "plans/hf/llama.plan", {1, 2, 4}, {}},
                    GradCase{"train/qwen3", "plans/hf/qwen3.plan", {1, 2, 4}, {}},
                    GradCase{"hf/mistral-kv4", "plans/hf/mistral.plan", {1, 2, 4}, {}},
                    GradCase{"hf/qwen2-gqa", "plans/hf/qwen2.plan", {1, 2}, {}},   // 2 kv heads
                    GradCase{"hf/phi3-mha", "plans/hf/phi3.plan", {1, 2, 4}, {}},
                    GradCase{"hf/gemma-mha", "plans/hf/gemma.plan", {1, 2, 4}, {}},
                    GradCase{"hf/gemma2-mha", "plans/hf/gemma2.plan", {1, 2, 4}, {}},
                    // models that return their logits, with the loss outside (tpcc --loss): PyTorch's
                    // test Transformer as its tests train it (output.sum().backward(),
                    // tools/torch_transformer_fixture.py) ...
                    GradCase{"train/torch-transformer", "tests/plans/torch-transformer-sp.plan", {1, 2, 4},
                             {"--loss", "sum"}},
                    GradCase{"train/torch-transformer", "tests/plans/torch-transformer-tp.plan", {1, 2, 4},
                             {"--loss", "sum"}},
                    // a block run on to_local()'s local tensor and local weight shards, its gradient
                    // labelled Partial() (tools/local_mlp_fixture.py: the same model on one device)
                    GradCase{"train/local-mlp", "tests/plans/local-mlp.plan", {1, 2, 4}, {}},
                    // ... and torchtitan's Llama with its trainer's cross-entropy under loss_parallel
                    GradCase{"", "plans/llama-torchtitan.plan", {1, 2, 4},
                             {"--loss", "cross_entropy", "-D", "vocab=128", "-D", "hidden=32", "-D", "layers=2", "-D",
                              "heads=4", "-D", "kv_heads=4", "-D", "ffn=64"}}),
    [](const testing::TestParamInfo<GradCase> &i) {
        std::string n = std::string(i.param.dir) + "_" + i.param.plan;
        for (char &ch : n)
            if (!isalnum((unsigned char)ch))
                ch = '_';
        return n;
    });

// ---- data parallelism: a dp x tp mesh ----

// dp = 2 replicas of batch 2 (at tp 2 and tp 1) take the same steps as one
// rank with the global batch of 4: the losses, the first step's gradients
// and the saved weights; resuming restores every replica; -n other than
// dp x tp and a dp mesh without --train are refused.
TEST(TrainRun, DataParallelEqualsOneRankOnTheGlobalBatch)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string plan, dir = kFixtures + "llama/";
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, plan));
    std::vector<int32_t> toks;
    for (int i = 0; i < 3 * 64; i++)
        toks.push_back(int32_t((i * 37 + i / 16) % 128));     // three steps of 4 x 16
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240801, 7, toks));

    struct Run { int dp, tp, batch; };
    std::vector<std::vector<double>> losses;
    std::vector<std::vector<std::vector<float>>> grads, finals;
    std::string ref_sched;
    for (Run r : {Run{1, 1, 4}, Run{2, 2, 2}, Run{2, 1, 2}}) {
        std::string tag = "dp" + std::to_string(r.dp) + "tp" + std::to_string(r.tp),
                    sched = d.path + "/" + tag + ".sched", log = d.path + "/" + tag + ".json",
                    g = d.path + "/" + tag + "-grads.safetensors", save = d.path + "/" + tag + "-save";
        Proc c = compile_dp(plan, r.dp, r.tp, r.batch, sched);
        ASSERT_EQ(c.code(), 0) << c.describe();
        if (ref_sched.empty())
            ref_sched = sched;
        Proc t = train(sched, r.dp * r.tp, {"--weights", dir, "--data", data, "--steps", "3", "--log-json", log,
                                            "--grads-out", g, "--save", save, "--schedule", "constant"});
        ASSERT_EQ(t.code(), 0) << tag << ": " << t.describe();
        EXPECT_TRUE(contains(t.out, "step 3/3  loss ")) << t.out;
        losses.push_back(tpcc_test::logged_losses(log));
        ASSERT_EQ(losses.back().size(), 3u) << tag;
        grads.push_back(read_weights_of(g, ref_sched));
        finals.push_back(read_weights_of(save + "/model.safetensors", ref_sched));
    }
    for (size_t k = 1; k < losses.size(); k++) {
        for (size_t i = 0; i < 3; i++)
            EXPECT_NEAR(losses[k][i], losses[0][i], 1e-5 * losses[0][i]) << "run " << k << " step " << i + 1;
        EXPECT_LT(worst_relative(grads[k], grads[0]), 1e-4) << "run " << k;
        EXPECT_LT(worst_relative(finals[k], finals[0]), 1e-5) << "run " << k;
    }

    // two steps saved and resumed to three on every replica: the same weights
    // (a constant rate: the cosine's depends on --steps)
    std::string dp2 = d.path + "/dp2tp2.sched", part = d.path + "/part", rest = d.path + "/rest";
    Proc first = train(dp2, 4, {"--weights", dir, "--data", data, "--steps", "2", "--save", part, "--schedule",
                                   "constant", "-q"});
    ASSERT_EQ(first.code(), 0) << first.describe();
    Proc resumed = train(dp2, 4, {"--resume", part, "--data", data, "--steps", "3", "--save", rest, "--schedule",
                                     "constant", "-q"});
    ASSERT_EQ(resumed.code(), 0) << resumed.describe();
    EXPECT_LT(worst_relative(read_weights_of(rest + "/model.safetensors", ref_sched), finals[1]), 1e-6);

    Proc wrong = train(dp2, 2, {"--weights", dir, "--data", data, "--steps", "1"});
    EXPECT_NE(wrong.code(), 0);
    EXPECT_TRUE(contains(wrong.err, "the schedule is for 4 ranks (2 data-parallel replicas of 2 tensor-parallel "
                                    "ranks) but 2 were launched: run it with tprun -n 4"))
        << wrong.describe();

    Proc forward = compile_dp(plan, 2, 2, 2, d.path + "/forward.sched", false);
    EXPECT_NE(forward.code(), 0);
    EXPECT_TRUE(contains(forward.err, "is supported by tpcc --train only")) << forward.describe();
}

// ---- ZeRO-1, ZeRO-2 and FSDP: the optimizer state, the gradients and the
// parameters sharded over the data-parallel ranks ----

// Five steps of `plan_source` at dp x tp with train { shard = "optimizer" },
// with shard = "gradients" (the schedule reduce-scatters each gradient in
// the backward) and with shard = "parameters" (FSDP: each weight gathered
// before its layer runs, forward and backward): the losses and the final
// weights of replicated dp 2 x tp 2 and of one rank on the global batch of
// 4, and the first step's gradients; at dp 3 (tp 1) the runs are padded
// and a rank holds none of the smaller weights. With activation
// recomputation (FSDP with recompute = "full": the backward's gathers come
// before the recomputed layer; ZeRO-2 with "selective") the steps do not
// change by a bit.
// With resume_elsewhere, a checkpoint of two sharded steps resumes at tp
// 4, at tp 1, replicated and sharded, each taking steps 3 to 5 of the
// uninterrupted run.
// `weights_tolerance` bounds the final weights of the other layouts
// against one rank's: AdamW's first steps divide each gradient by its own
// magnitude, so an entry whose gradient is all rounding moves by the
// rate whatever its sign (GPT-2's biases and LayerNorms: 3e-4 of their
// scale after five steps, replicated dp as sharded). `same_ranks` bounds
// ZeRO-1's final weights and moments against replicated dp on the same
// ranks, whose sums differ only in order (measured: Llama 1.0e-6, GPT-2
// 3.3e-5, clipping every step).
void expect_sharding_is_replicated(const std::string &plan_source, const std::string &fixture,
                                   double weights_tolerance, double same_ranks, bool resume_elsewhere)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    std::string replicated, sharded, grads_sharded, fsdp, fsdp_full, grads_selective, dir = kFixtures + fixture + "/";
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, replicated, plan_source));
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, sharded, plan_source, "shard = \"optimizer\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, grads_sharded, plan_source, "shard = \"gradients\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, fsdp, plan_source, "shard = \"parameters\","));
    ASSERT_NO_FATAL_FAILURE(dp_plan(d, fsdp_full, plan_source, "shard = \"parameters\",\n    recompute = \"full\","));
    ASSERT_NO_FATAL_FAILURE(
        dp_plan(d, grads_selective, plan_source, "shard = \"gradients\",\n    recompute = \"selective\","));
    std::vector<int32_t> toks;
    for (int i = 0; i < 5 * 96; i++)
        toks.push_back(int32_t((i * 37 + i / 16) % 128));     // five steps of 6 x 16
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240801, 7, toks));

    struct Run { const char *tag; const std::string &plan; int dp, tp, batch; };
    struct Logged { std::vector<double> losses, norms; };
    auto run = [&](const Run &r, int steps, const std::vector<std::string> &extra) {
        std::string sched = d.path + "/" + r.tag + ".sched", log = d.path + "/" + r.tag + ".json";
        Proc c = compile_dp(r.plan, r.dp, r.tp, r.batch, sched, true, "fp32", fixture);
        EXPECT_EQ(c.code(), 0) << c.describe();
        // clipping at 0.5 scales every step (the norms are near 4): a norm
        // off by any factor moves the losses
        std::vector<std::string> args = {"--data", data, "--steps", std::to_string(steps), "--log-json", log,
                                         "--schedule", "constant", "--max-grad-norm", "0.5", "-q"};
        args.insert(args.end(), extra.begin(), extra.end());
        Proc t = train(sched, r.dp * r.tp, args);
        EXPECT_EQ(t.code(), 0) << r.tag << ": " << t.describe();
        Logged l{tpcc_test::logged_losses(log), {}};
        json_error_t e;
        json_t *got = json_load_file(log.c_str(), 0, &e);
        size_t i;
        json_t *step;
        json_array_foreach(json_object_get(got, "steps"), i, step)
            l.norms.push_back(num(step, "grad_norm"));
        json_decref(got);
        return l;
    };
    // the global batch is 6: dp 2 of 3 each would do, dp 3 of 2, dp 1 of 6
    std::vector<Logged> logs;
    std::vector<std::vector<std::vector<float>>> grads, finals, moments;
    std::string ref_sched = d.path + "/ref.sched";
    for (Run r : {Run{"ref", replicated, 1, 1, 6}, Run{"dp2tp2", replicated, 2, 2, 3},
                  Run{"zero-dp2tp2", sharded, 2, 2, 3}, Run{"zero-dp2tp1", sharded, 2, 1, 3},
                  Run{"zero-dp3tp1", sharded, 3, 1, 2}, Run{"zero2-dp2tp2", grads_sharded, 2, 2, 3},
                  Run{"zero2-dp3tp1", grads_sharded, 3, 1, 2}, Run{"fsdp-dp2tp2", fsdp, 2, 2, 3},
                  Run{"fsdp-dp3tp1", fsdp, 3, 1, 2}, Run{"fsdp-full-dp2tp2", fsdp_full, 2, 2, 3},
                  Run{"zero2-selective-dp2tp2", grads_selective, 2, 2, 3}}) {
        std::string g = d.path + "/" + r.tag + "-grads.safetensors", save = d.path + "/" + r.tag + "-save";
        logs.push_back(run(r, 5, {"--weights", dir, "--grads-out", g, "--save", save}));
        ASSERT_EQ(logs.back().losses.size(), 5u) << r.tag;
        ASSERT_EQ(logs.back().norms.size(), 5u) << r.tag;
        grads.push_back(read_weights_of(g, ref_sched));
        finals.push_back(read_weights_of(save + "/model.safetensors", ref_sched));
        moments.push_back(tpcc_test::read_moments_of(save + "/optimizer.safetensors", ref_sched));
    }
    const std::vector<double> &want = logs[0].losses, &norms = logs[0].norms;
    for (size_t k = 1; k < logs.size(); k++) {
        for (size_t i = 0; i < 5; i++) {
            EXPECT_NEAR(logs[k].losses[i], want[i], 1e-6 * want[i]) << "run " << k << " step " << i + 1;
            EXPECT_NEAR(logs[k].norms[i], norms[i], 1e-5 * norms[i]) << "run " << k << " step " << i + 1;
        }
        EXPECT_LT(worst_relative(grads[k], grads[0]), 1e-5) << "run " << k;
        EXPECT_LT(worst_relative(finals[k], finals[0]), weights_tolerance) << "run " << k;
    }
    // ZeRO-1, ZeRO-2 and FSDP against replicated dp on the same ranks: the
    // same sums, reduced in runs; the saved moments gathered back from the runs
    for (size_t k : {2, 5, 7}) {
        for (size_t i = 0; i < 5; i++)
            EXPECT_NEAR(logs[k].losses[i], logs[1].losses[i], 1e-6 * logs[1].losses[i]) << "run " << k << " step "
                                                                                          << i + 1;
        EXPECT_LT(worst_relative(finals[k], finals[1]), same_ranks) << "run " << k;
        EXPECT_LT(worst_relative(moments[k], moments[1]), same_ranks) << "run " << k;
    }
    EXPECT_LT(worst_relative(moments[4], moments[1]), weights_tolerance);
    EXPECT_LT(worst_relative(moments[6], moments[1]), weights_tolerance);
    EXPECT_LT(worst_relative(moments[8], moments[1]), weights_tolerance);
    // recomputed: the same bits as without (runs 9 and 10 against 7 and 5)
    for (auto [k, same] : {std::pair<size_t, size_t>{9, 7}, {10, 5}}) {
        EXPECT_EQ(logs[k].losses, logs[same].losses) << "run " << k;
        EXPECT_EQ(logs[k].norms, logs[same].norms) << "run " << k;
        EXPECT_EQ(worst_relative(grads[k], grads[same]), 0.0) << "run " << k;
        EXPECT_EQ(worst_relative(finals[k], finals[same]), 0.0) << "run " << k;
    }

    if (!resume_elsewhere)
        return;
    // two sharded steps saved, resumed on other layouts: steps 3 to 5, whose
    // updates use the saved moments
    std::string part = d.path + "/part";
    run(Run{"zero-dp2tp2", sharded, 2, 2, 3}, 2, {"--weights", dir, "--save", part});
    for (Run r : {Run{"tp4", replicated, 1, 4, 6}, Run{"tp1", replicated, 1, 1, 6},
                  Run{"dp2tp2", replicated, 2, 2, 3}, Run{"zero-dp2tp2", sharded, 2, 2, 3},
                  Run{"zero2-dp3tp1", grads_sharded, 3, 1, 2}, Run{"fsdp-dp3tp1", fsdp, 3, 1, 2}}) {
        std::vector<double> resumed = run(r, 5, {"--resume", part}).losses;
        ASSERT_EQ(resumed.size(), 3u) << r.tag;
        for (size_t i = 0; i < 3; i++)
            EXPECT_NEAR(resumed[i], want[2 + i], 1e-6 * want[2 + i]) << "resumed at " << r.tag << " step " << i + 3;
    }
}

TEST(TrainRun, ShardedDataParallelTakesTheStepsOfReplicatedDataParallelLlama)
{
    expect_sharding_is_replicated("plans/llama-sp.plan", "llama", 1e-5, 1e-5, true);
}

TEST(TrainRun, ShardedDataParallelTakesTheStepsOfReplicatedDataParallelGpt2Tied)
{
    expect_sharding_is_replicated("plans/gpt2-hf-sp.plan", "gpt2-tied", 1e-3, 1e-4, false);
}

// docs/training.md's 2-D recipe, plans/llama-2d.plan (seed 003's plan: tp with
// sequence parallelism and a vocab-parallel loss inside, ZeRO-1 over dp,
// clipping, warm-up and cosine), on 4 CPU ranks: the losses of one rank on
// the global batch, and a run saved after two steps and resumed to three
// takes the uninterrupted run's third step.
TEST(TrainRun, TheTwoDimensionalRecipeRunsOnFourRanks)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string plan = std::string(TPCC_SOURCE_DIR) + "/plans/llama-2d.plan", dir = kFixtures + "llama/";
    std::vector<int32_t> toks;
    for (int i = 0; i < 3 * 64; i++)
        toks.push_back(int32_t((i * 37 + i / 16) % 128));
    std::string data = d.write("tokens.bin", tpcc_test::llmc(20240801, 7, toks));
    auto run = [&](int dp, int tp, int steps, const std::vector<std::string> &extra) {
        std::string tag = "dp" + std::to_string(dp) + "tp" + std::to_string(tp) + "-" + std::to_string(steps) +
                          std::to_string(extra.size()),
                    sched = d.path + "/" + tag + ".sched", log = d.path + "/" + tag + ".json";
        Proc c = compile_dp(plan, dp, tp, 4 / dp, sched);
        EXPECT_EQ(c.code(), 0) << c.describe();
        std::vector<std::string> args = {"--data", data, "--steps", std::to_string(steps), "--warmup", "1",
                                         "--log-json", log, "-q"};
        args.insert(args.end(), extra.begin(), extra.end());
        Proc t = train(sched, dp * tp, args);
        EXPECT_EQ(t.code(), 0) << tag << ": " << t.describe();
        return tpcc_test::logged_losses(log);
    };
    std::vector<double> one = run(1, 1, 3, {"--weights", dir}), four = run(2, 2, 3, {"--weights", dir});
    ASSERT_EQ(one.size(), 3u);
    ASSERT_EQ(four.size(), 3u);
    for (size_t i = 0; i < 3; i++)
        EXPECT_NEAR(four[i], one[i], 1e-6 * one[i]) << "step " << i + 1;
    std::string ckpt = d.path + "/ckpt";
    run(2, 2, 2, {"--weights", dir, "--save", ckpt});
    std::vector<double> resumed = run(2, 2, 3, {"--resume", ckpt});
    ASSERT_EQ(resumed.size(), 1u);
    EXPECT_NEAR(resumed[0], four[2], 1e-6 * four[2]);
}

// plans/llama-2d.plan against PyTorch's own 2-D recipe
// (tests/fixtures/train/fsdp2-dp2tp2, tools/fsdp2_fixture.py): the same
// parallelize_module plan over mesh["tp"], fully_shard (FSDP2) of each
// decoder layer and of the model over mesh["dp"], 4 gloo processes, three
// steps of AdamW with clipping, warm-up and cosine on the llama fixture's
// weights. The plan's shard = "optimizer" is ZeRO-1 (masters and moments in
// 1/dp slices, parameters whole) where FSDP2 shards the parameters too:
// another memory layout of the same training, numerically the same steps.
TEST(TrainRun, MatchesFsdp2WithTensorParallelism)
{
    ASSERT_TRUE(tpcc_test::on_path("mpiexec")) << tpcc_test::kInstallMpich;
    TempDir d;
    const std::string plan = std::string(TPCC_SOURCE_DIR) + "/plans/llama-2d.plan", weights = kFixtures + "llama/",
                      dir = kFixtures + "fsdp2-dp2tp2/", sched = d.path + "/dp2tp2.sched",
                      log = d.path + "/log.json", g = d.path + "/grads.safetensors";
    Proc c = compile_dp(plan, 2, 2, 2, sched);
    ASSERT_EQ(c.code(), 0) << c.describe();
    Proc r = train(sched, 4, {"--weights", weights, "--data", dir + "tokens.npy", "--steps", "3", "--warmup", "1",
                              "--log-json", log, "--grads-out", g, "-q"});
    ASSERT_EQ(r.code(), 0) << r.describe();
    json_error_t e;
    json_t *ref = json_load_file((dir + "train.json").c_str(), 0, &e);
    ASSERT_TRUE(ref) << e.text;
    json_t *got = json_load_file(log.c_str(), 0, &e);
    ASSERT_TRUE(got) << e.text;
    json_t *steps = json_object_get(got, "steps"), *want = json_object_get(ref, "steps");
    ASSERT_EQ(json_array_size(steps), 3u);
    ASSERT_EQ(json_array_size(want), 3u);
    for (size_t i = 0; i < 3; i++) {
        json_t *s = json_array_get(steps, i), *w = json_array_get(want, i);
        // measured: losses within 8.6e-8 relative, norms 1.1e-7 (fp32 sums in other orders)
        EXPECT_NEAR(num(s, "loss"), num(w, "loss"), 1e-6 * num(w, "loss")) << "step " << i + 1;
        EXPECT_NEAR(num(s, "grad_norm"), num(w, "grad_norm"), 1e-6 * num(w, "grad_norm")) << "step " << i + 1;
        EXPECT_DOUBLE_EQ(num(s, "lr"), num(w, "lr")) << "step " << i + 1;
        std::printf("fsdp2 step %zu: loss %.9g against %.9g (%.2g relative), grad_norm %.9g against %.9g (%.2g)\n",
                    i + 1, num(s, "loss"), num(w, "loss"), std::fabs(num(s, "loss") / num(w, "loss") - 1),
                    num(s, "grad_norm"), num(w, "grad_norm"), std::fabs(num(s, "grad_norm") / num(w, "grad_norm") - 1));
    }
    json_decref(got);
    json_decref(ref);
    double worst = worst_relative(read_weights_of(g, sched), read_weights_of(dir + "grads.safetensors", sched));
    std::printf("fsdp2 first-step gradients: worst %.2g relative\n", worst);
    EXPECT_LT(worst, 1e-5);   // measured 2.5e-6 of each tensor's scale
}

}  // namespace
