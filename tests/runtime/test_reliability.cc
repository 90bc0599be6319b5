// What a training run does with values and files that would lose its work
// (docs/reliability.md): a step whose loss or gradient norm is not finite
// stops the run before its update (or with --on-nonfinite skip is
// dropped), and --save never writes, nor --resume reads, a state that is
// not finite; --save and --log-json destinations are checked before the
// first step; a FIFO named as any input is refused at once, never waited
// on; a checkpoint's config.json is read as JSON, never through a link,
// and an input that fails validation is never echoed; a save cleans what
// killed saves left, refuses a concurrent one, and a signal during it
// abandons or finishes it whole. One rank on the
// llama training fixture (tests/fixtures/train/llama): each run is a
// fraction of a second.
#include <gtest/gtest.h>

#include <jansson.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/process.h"
#include "tests/support/train_harness.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::slurp;
using tpcc_test::TempDir;
namespace fs = std::filesystem;

using tpcc_test::kTprun;
const std::string kFixture = std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train/llama/";

// A training step of plans/llama-sp.plan at tp 1 on the fixture's config.
std::string compile_step(const TempDir &d)
{
    std::string sched = d.path + "/step.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                  kFixture + "config.json", "-D", "tp=1", "-D", "seq=16", "-D", "batch=2", "-D",
                                  "vocab_multiple=1", "--train", "-o", sched});
    EXPECT_EQ(c.code(), 0) << c.describe();
    return sched;
}

// tprun on one rank; 60 s is far beyond any of these runs, so a run that
// waits on a FIFO fails the test as timed out instead of hanging CI.
Proc tprun(const std::vector<std::string> &args)
{
    return tpcc_test::run_program(kTprun, args, {"OPENBLAS_NUM_THREADS=1"}, 60);
}

Proc train(const std::string &sched, const std::vector<std::string> &extra)
{
    std::vector<std::string> args = {sched, "--data", kFixture + "tokens.npy", "--weights", kFixture};
    args.insert(args.end(), extra.begin(), extra.end());
    return tprun(args);
}

// Where tensor `name`'s data starts in a safetensors file.
size_t data_offset(const std::string &bytes, const std::string &name)
{
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    json_t *h = json_loadb(bytes.data() + 8, n, 0, nullptr);
    json_t *off = json_array_get(json_object_get(json_object_get(h, name.c_str()), "data_offsets"), 0);
    EXPECT_NE(off, nullptr) << name;
    size_t at = 8 + n + size_t(json_integer_value(off));
    json_decref(h);
    return at;
}

void put(const std::string &path, const std::string &bytes)
{
    FILE *f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    fclose(f);
}

// The file with the first float of tensor `name` set to v.
void poke(const std::string &path, const std::string &name, float v)
{
    std::string bytes = slurp(path);
    std::memcpy(&bytes[data_offset(bytes, name)], &v, sizeof v);
    put(path, bytes);
}

// --lr 1e30: the first update leaves weights near 1e30, whose second step
// overflows. Training stops at step 2, before its update, naming the step
// and the first parameter whose gradient is not finite; the checkpoint
// --save DIR held stays as it was.
TEST(NonFinite, StopsNamingTheStepAndKeepsTheLastCheckpoint)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    Proc good = train(sched, {"--steps", "2", "--save", dir, "-q"});
    ASSERT_EQ(good.code(), 0) << good.describe();
    std::string model = slurp(dir + "/model.safetensors"), state = slurp(dir + "/tprun_state.json");
    Proc bad = train(sched, {"--steps", "4", "--lr", "1e30", "--save", dir, "--log-json", d.path + "/log.json"});
    EXPECT_EQ(bad.code(), 1) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "step 2: the loss is ")) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "the first parameter whose gradient is not finite is model.")) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "training stopped before the update, nothing was saved")) << bad.describe();
    EXPECT_TRUE(contains(bad.err, "--on-nonfinite skip")) << bad.describe();
    EXPECT_FALSE(contains(bad.out, "step 3/4")) << bad.describe();
    EXPECT_EQ(slurp(dir + "/model.safetensors"), model);
    EXPECT_EQ(slurp(dir + "/tprun_state.json"), state);
    EXPECT_FALSE(fs::exists(d.path + "/log.json"));
    for (auto &e : fs::directory_iterator(d.path)) {   // no temporary or moved-aside directory left beside it
        EXPECT_FALSE(contains(e.path().filename().string(), "ckpt.tmp")) << e.path();
        EXPECT_FALSE(contains(e.path().filename().string(), "ckpt.old")) << e.path();
    }
}

// --on-nonfinite skip: the steps go on, each one that is not finite
// without its update, said in the log line and in --log-json.
TEST(NonFinite, SkipDropsTheUpdateAndLogsTheStep)
{
    TempDir d;
    std::string sched = compile_step(d), log = d.path + "/log.json";
    Proc p = train(sched, {"--steps", "3", "--lr", "1e30", "--on-nonfinite", "skip", "--log-json", log});
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(p.out, "grad_norm 6.403")) << p.describe();   // step 1: finite, taken
    EXPECT_TRUE(contains(p.out, "grad_norm -nan")) << p.describe();
    EXPECT_TRUE(contains(p.out, "ms  skipped (not finite)\nstep 3/3")) << p.describe();
    json_t *root = json_load_file(log.c_str(), 0, nullptr);
    json_t *steps = json_object_get(root, "steps");
    ASSERT_EQ(json_array_size(steps), 3u) << slurp(log);
    EXPECT_EQ(json_object_get(json_array_get(steps, 0), "skipped"), nullptr);   // step 1 was finite
    for (size_t i = 1; i < 3; i++)
        EXPECT_TRUE(json_is_true(json_object_get(json_array_get(steps, i), "skipped"))) << slurp(log);
    json_decref(root);
    Proc wrong = train(sched, {"--steps", "1", "--on-nonfinite", "ignore"});
    EXPECT_EQ(wrong.code(), 2);
    EXPECT_TRUE(contains(wrong.err, "--on-nonfinite takes stop or skip, not 'ignore'")) << wrong.describe();
}

// A last step whose loss and norm were finite but whose update overflowed
// (a decay factor of 1 - lr·wd = -1e39 on the norms' ones): --save
// refuses to write it, and the directory keeps its checkpoint.
TEST(NonFinite, SaveNeverWritesAStateThatIsNotFinite)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    ASSERT_EQ(train(sched, {"--steps", "1", "--save", dir, "-q"}).code(), 0);
    std::string model = slurp(dir + "/model.safetensors");
    Proc p = train(sched, {"--steps", "1", "--lr", "1e38", "--weight-decay", "10", "--decay-all", "--save", dir, "-q"});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "--save: model.")) << p.describe();
    EXPECT_TRUE(contains(p.err, "holds NaN or infinity at element")) << p.describe();
    EXPECT_TRUE(contains(p.err, "after step 1: nothing was saved")) << p.describe();
    EXPECT_EQ(slurp(dir + "/model.safetensors"), model);
}

// --resume checks the state it loads: a NaN weight or moment, or a
// negative exp_avg_sq, is refused with the tensor named.
TEST(NonFinite, ResumeRefusesADamagedState)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    ASSERT_EQ(train(sched, {"--steps", "1", "--save", dir, "-q"}).code(), 0);
    const std::string w = "model.layers.1.mlp.down_proj.weight";
    auto resume = [&] {
        return tprun({sched, "--data", kFixture + "tokens.npy", "--resume", dir, "--steps", "2", "-q"});
    };
    ASSERT_EQ(resume().code(), 0);
    std::string optimizer = dir + "/optimizer.safetensors", model = dir + "/model.safetensors";
    std::string good_optimizer = slurp(optimizer);
    poke(optimizer, w + ".exp_avg_sq", -1.0f);
    Proc negative = resume();
    EXPECT_EQ(negative.code(), 1) << negative.describe();
    EXPECT_TRUE(contains(negative.err, "--resume: " + dir + "/optimizer.safetensors: " + w +
                                           ".exp_avg_sq holds a negative value")) << negative.describe();
    poke(optimizer, w + ".exp_avg", NAN);
    Proc nan_moment = resume();
    EXPECT_EQ(nan_moment.code(), 1) << nan_moment.describe();
    EXPECT_TRUE(contains(nan_moment.err, w + ".exp_avg holds NaN or infinity at element 0")) << nan_moment.describe();
    put(optimizer, good_optimizer);
    poke(model, w, INFINITY);
    Proc inf_weight = resume();
    EXPECT_EQ(inf_weight.code(), 1) << inf_weight.describe();
    EXPECT_TRUE(contains(inf_weight.err, "--resume: " + dir + ", its model weights: " + w +
                                             " holds NaN or infinity at element 0")) << inf_weight.describe();
}

// --save and --log-json are checked before the first step: a name that is
// no directory of its own, a parent that does not exist, a directory
// holding an input, a --log-json that cannot be written. A trailing slash
// names the same directory.
TEST(SaveDestination, CheckedBeforeTheFirstStep)
{
    TempDir d;
    std::string sched = compile_step(d);
    struct Case {
        std::vector<std::string> args;
        std::string message;
    };
    const std::vector<Case> refused = {
        {{"--save", "."}, "--save: '.' names no directory of its own"},
        {{"--save", "/"}, "--save: '/' names no directory of its own"},
        {{"--save", d.path + "/out/.."}, "names no directory of its own"},
        {{"--save", d.path + "/missing/out"}, "--save: cannot write '" + d.path + "/missing/out': its directory '" +
                                                  d.path + "/missing': No such file or directory"},
        {{"--save", std::string(TPCC_SOURCE_DIR) + "/tests/fixtures/train"},
         "would replace the directory holding --weights"},
        {{"--log-json", d.path + "/missing/log.json"}, "--log-json: cannot write '" + d.path + "/missing/log.json'"},
        {{"--log-json", d.path}, "it is a directory; name a file"},
    };
    for (const Case &c : refused) {
        std::vector<std::string> args = {"--steps", "1"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        Proc p = train(sched, args);
        EXPECT_NE(p.code(), 0) << c.args[1];
        EXPECT_TRUE(contains(p.err, c.message)) << p.describe();
        EXPECT_FALSE(contains(p.out, "step 1/1")) << p.describe();   // refused before training
    }
    Proc slash = train(sched, {"--steps", "1", "--save", d.path + "/out/", "-q"});
    ASSERT_EQ(slash.code(), 0) << slash.describe();
    EXPECT_TRUE(fs::exists(d.path + "/out/model.safetensors"));
    for (auto &e : fs::directory_iterator(d.path + "/out"))   // DIR itself, nothing nested in it
        EXPECT_FALSE(fs::is_directory(e.path())) << e.path();
}

// A FIFO named as any input: refused at once with what it is, never
// waited on (open() of a FIFO blocks until a writer comes).
TEST(InputFiles, AFifoIsRefusedNotWaitedOn)
{
    TempDir d;
    // named as each reader expects its kind of file: .npy, llm.c's .bin, an index
    std::string sched = compile_step(d), fifo = d.path + "/fifo.npy", bin = d.path + "/fifo.bin",
                index = d.path + "/model.safetensors.index.json";
    for (auto &f : {fifo, bin, index})
        ASSERT_EQ(mkfifo(f.c_str(), 0600), 0);
    // a checkpoint directory whose weights, config.json or tprun_state.json is a FIFO
    auto checkpoint_with = [&](const std::string &name, const std::string &fifo_name) {
        std::string dir = d.path + "/" + name;
        fs::create_directory(dir);
        for (auto f : {"config.json", "model.safetensors"})
            if (f != fifo_name)
                fs::copy_file(kFixture + f, dir + "/" + f);
        EXPECT_EQ(mkfifo((dir + "/" + fifo_name).c_str(), 0600), 0);
        return dir;
    };
    std::string weights_dir = checkpoint_with("weights", "model.safetensors");
    std::string config_dir = checkpoint_with("config", "config.json");
    // an index naming a shard that is a FIFO
    std::string sharded = d.path + "/sharded";
    fs::create_directory(sharded);
    d.write("sharded/model.safetensors.index.json",
            "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00001.safetensors\"}}");
    ASSERT_EQ(mkfifo((sharded + "/model-00001-of-00001.safetensors").c_str(), 0600), 0);
    std::string resume_dir = d.path + "/resume";
    ASSERT_EQ(train(sched, {"--steps", "1", "--save", resume_dir, "-q"}).code(), 0);
    fs::remove(resume_dir + "/tprun_state.json");
    ASSERT_EQ(mkfifo((resume_dir + "/tprun_state.json").c_str(), 0600), 0);
    std::string forward = d.path + "/forward.sched";
    ASSERT_EQ(tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "--hf-config",
                                   kFixture + "config.json", "-D", "tp=1", "-D", "seq=16", "-D", "batch=2", "-D",
                                   "vocab_multiple=1", "-o", forward})
                  .code(),
              0);
    const std::vector<std::vector<std::string>> runs = {
        {fifo},
        {sched, "--data", fifo, "--weights", kFixture, "--steps", "1"},
        {sched, "--data", bin, "--weights", kFixture, "--steps", "1"},
        {sched, "--data", kFixture + "tokens.npy", "--weights", fifo, "--steps", "1"},
        {sched, "--data", kFixture + "tokens.npy", "--weights", index, "--steps", "1"},
        {sched, "--data", kFixture + "tokens.npy", "--weights", weights_dir, "--steps", "1"},
        {sched, "--data", kFixture + "tokens.npy", "--weights", sharded, "--steps", "1"},
        {sched, "--data", kFixture + "tokens.npy", "--weights", config_dir, "--steps", "1", "--save", d.path + "/o"},
        {sched, "--data", kFixture + "tokens.npy", "--resume", resume_dir, "--steps", "2"},
        {forward, "--weights", kFixture, "--tokens", fifo, "--labels", "tokens"},
        {forward, "--weights", kFixture, "--labels", fifo},
        {forward, "--weights", kFixture, "--labels", "tokens", "--compare", fifo},
    };
    for (const auto &args : runs) {
        Proc p = tprun(args);
        EXPECT_FALSE(p.timed_out) << p.describe();
        EXPECT_NE(p.code(), 0) << p.describe();
        EXPECT_TRUE(contains(p.err, "is a FIFO, not a regular file")) << p.describe();
    }
}

// --save writes config.json from its JSON: a config.json that is a link
// (to any file on the machine) is refused before training, and so is one
// that is not a JSON object, whose bytes the message never shows.
TEST(CheckpointFiles, ConfigIsReadAsJsonNeverThroughALink)
{
    TempDir d;
    std::string sched = compile_step(d);
    std::string secret = d.write("secret", "{\"token\": \"hunter2\"}");
    auto checkpoint_with_config = [&](const std::string &name) {
        std::string dir = d.path + "/" + name;
        fs::create_directory(dir);
        fs::copy_file(kFixture + "model.safetensors", dir + "/model.safetensors");
        return dir;
    };
    std::string linked = checkpoint_with_config("linked");
    fs::create_symlink(secret, linked + "/config.json");
    Proc p = train(sched, {"--weights", linked, "--steps", "1", "--save", d.path + "/out"});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, linked + "/config.json: is a symbolic link")) << p.describe();
    EXPECT_FALSE(contains(p.out, "step 1/1")) << p.describe();
    EXPECT_FALSE(fs::exists(d.path + "/out"));
    std::string text = checkpoint_with_config("text");
    d.write("text/config.json", "root:x:0:0:root:/root:/bin/bash\n");
    Proc q = train(sched, {"--weights", text, "--steps", "1", "--save", d.path + "/out"});
    EXPECT_EQ(q.code(), 1) << q.describe();
    EXPECT_TRUE(contains(q.err, "config.json: not valid JSON")) << q.describe();
    EXPECT_FALSE(contains(q.err, "root:")) << q.describe();
}

// A file that is no safetensors file: its first 8 bytes are never told,
// as the header length they would be.
TEST(CheckpointFiles, ABadHeaderLengthIsNotEchoed)
{
    TempDir d;
    std::string sched = compile_step(d);
    std::string text = d.write("passwd.safetensors", "root:x:0:0:root:/root:/bin/bash\n");
    Proc p = train(sched, {"--weights", text, "--steps", "1"});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "passwd.safetensors: its first 8 bytes, read as a safetensors header length, give "
                                "more than 100 MiB")) << p.describe();
    EXPECT_FALSE(contains(p.err, "3475222254926655346")) << p.describe();   // "root:x:0" as a little-endian integer
}

// A process id that is no process's any more: a child that has exited
// and been waited for.
long gone_pid()
{
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    int status;
    waitpid(child, &status, 0);
    return long(child);
}

// What saves killed mid-way left beside DIR is cleaned by the next run
// saving there, before its first step: temporaries of processes that are
// gone removed (a live one's kept), and a checkpoint moved aside by a save
// killed between its two renames put back as DIR.
TEST(CrashSafeSave, LeftoversOfKilledSavesAreCleanedAndALostDirRestored)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    ASSERT_EQ(train(sched, {"--steps", "1", "--save", dir, "-q"}).code(), 0);
    std::string model = slurp(dir + "/model.safetensors");
    long dead = gone_pid();
    std::string stale = dir + ".tmp." + std::to_string(dead) + ".Ab12Cd",
                live = dir + ".tmp." + std::to_string(getpid()) + ".Ef34Gh", old = dir + ".old." + std::to_string(dead);
    fs::create_directory(stale);
    d.write("ckpt.tmp." + std::to_string(dead) + ".Ab12Cd/model.safetensors", "partial");
    fs::create_directory(live);
    fs::rename(dir, old);   // killed after moving DIR aside, before renaming its new one in
    // the run stops at step 2 (not finite), saving nothing: what it found is all there is to see
    Proc p = train(sched, {"--steps", "3", "--lr", "1e30", "--save", dir, "-q"});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_FALSE(fs::exists(stale));
    EXPECT_TRUE(fs::exists(live));
    EXPECT_FALSE(fs::exists(old));
    EXPECT_EQ(slurp(dir + "/model.safetensors"), model);
    // a DIR.old.PID beside a DIR (killed after the second rename) is removed
    fs::copy(dir, old);
    ASSERT_EQ(train(sched, {"--steps", "1", "--save", dir, "-q"}).code(), 0);
    EXPECT_FALSE(fs::exists(old));
}

// Two runs saving to one directory would each replace the other's
// checkpoint: the second is refused before training, naming the first.
TEST(CrashSafeSave, AConcurrentSaveIsRefusedNamingTheOtherProcess)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    int fd = open((dir + ".lock").c_str(), O_RDWR | O_CREAT, 0644);   // this test plays the other run
    ASSERT_GE(fd, 0);
    ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
    std::string pid = std::to_string(getpid()) + "\n";
    ASSERT_EQ(write(fd, pid.data(), pid.size()), ssize_t(pid.size()));
    Proc p = train(sched, {"--steps", "1", "--save", dir});
    EXPECT_EQ(p.code(), 1) << p.describe();
    EXPECT_TRUE(contains(p.err, "--save: process " + std::to_string(getpid()) + " is saving to '" + dir + "'"))
        << p.describe();
    EXPECT_FALSE(contains(p.out, "step 1/1")) << p.describe();
    close(fd);   // the lock released: the file left behind is taken over
    Proc q = train(sched, {"--steps", "1", "--save", dir, "-q"});
    EXPECT_EQ(q.code(), 0) << q.describe();
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors"));
}

// SIGTERM (or SIGINT) during a save, raised at a chosen point by
// TPRUN_TEST_SAVE_SIGNAL: while tensors are written, the save is abandoned
// and DIR keeps its checkpoint; between the two renames that publish it,
// the save finishes and DIR holds the new one. Either way the run exits 1
// with a message and leaves nothing beside DIR.
TEST(CrashSafeSave, ASignalDuringTheSaveAbandonsOrFinishesIt)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    ASSERT_EQ(train(sched, {"--steps", "1", "--save", dir, "-q"}).code(), 0);
    std::string one = slurp(dir + "/tprun_state.json");
    auto signalled = [&](const std::string &point) {
        std::vector<std::string> args = {sched, "--data", kFixture + "tokens.npy", "--weights", kFixture, "--steps",
                                         "2", "--save", dir, "-q"};
        return tpcc_test::run_program(kTprun, args, {"TPRUN_TEST_SAVE_SIGNAL=" + point}, 60);
    };
    auto nothing_beside = [&] {
        for (auto &e : fs::directory_iterator(d.path)) {
            EXPECT_FALSE(contains(e.path().filename().string(), "ckpt.tmp")) << e.path();
            EXPECT_FALSE(contains(e.path().filename().string(), "ckpt.old")) << e.path();
        }
    };
    Proc abandoned = signalled("tensor");
    EXPECT_EQ(abandoned.code(), 1) << abandoned.describe();
    EXPECT_TRUE(contains(abandoned.err, "interrupted by SIGTERM during --save: the save was abandoned"))
        << abandoned.describe();
    EXPECT_EQ(slurp(dir + "/tprun_state.json"), one);
    nothing_beside();
    Proc finished = signalled("rename");
    EXPECT_EQ(finished.code(), 1) << finished.describe();
    EXPECT_TRUE(contains(finished.err, "interrupted by SIGTERM during --save, which finished first: " + dir +
                                           " holds the new checkpoint")) << finished.describe();
    EXPECT_TRUE(contains(slurp(dir + "/tprun_state.json"), "\"step\": 2"));
    nothing_beside();
}

// --save-every 2 over 5 steps writes DIR at steps 2 and 4 and after the
// last; --save-keep 3 keeps the two it held before as DIR.step-4 and
// DIR.step-2 (a third, older one, is pruned). Resuming DIR.step-2 to
// step 5 reaches DIR's weights bit for bit: a periodic checkpoint is the
// run's own state, not an approximation of it.
TEST(PeriodicSave, EveryNStepsKeepingTheNewestAndResumable)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    ASSERT_EQ(fs::create_directory(dir + ".step-1"), true);   // an older kept checkpoint, pruned below
    put(dir + ".step-1/tprun_state.json", "{\"step\": 1}");
    Proc p = train(sched, {"--steps", "5", "--save", dir, "--save-every", "2", "--save-keep", "3", "-q"});
    ASSERT_EQ(p.code(), 0) << p.describe();
    EXPECT_TRUE(contains(slurp(dir + "/tprun_state.json"), "\"step\": 5"));
    EXPECT_TRUE(contains(slurp(dir + ".step-4/tprun_state.json"), "\"step\": 4"));
    EXPECT_TRUE(contains(slurp(dir + ".step-2/tprun_state.json"), "\"step\": 2"));
    std::vector<std::string> beside;
    for (auto &e : fs::directory_iterator(d.path))
        if (contains(e.path().filename().string(), "ckpt."))
            beside.push_back(e.path().filename().string());
    std::sort(beside.begin(), beside.end());
    EXPECT_EQ(beside, (std::vector<std::string>{"ckpt.lock", "ckpt.step-2", "ckpt.step-4"}));

    Proc resumed = tprun({sched, "--data", kFixture + "tokens.npy", "--steps", "5", "--resume", dir + ".step-2",
                          "--save", d.path + "/again", "-q"});
    ASSERT_EQ(resumed.code(), 0) << resumed.describe();
    EXPECT_EQ(slurp(d.path + "/again/model.safetensors"), slurp(dir + "/model.safetensors"));
    EXPECT_EQ(slurp(d.path + "/again/optimizer.safetensors"), slurp(dir + "/optimizer.safetensors"));

    // the default keeps DIR only; the options need --save and a count of at least 1
    ASSERT_EQ(train(sched, {"--steps", "2", "--save", dir, "--save-every", "1", "-q"}).code(), 0);
    EXPECT_TRUE(fs::exists(dir + ".step-4")) << "a later run without --save-keep prunes nothing";
    EXPECT_FALSE(fs::exists(dir + ".step-1"));
    for (const auto &[args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"--save-every", "2"}, "--save-every and --save-keep go with --save DIR"},
             {{"--save-keep", "2"}, "--save-every and --save-keep go with --save DIR"},
             {{"--save", dir, "--save-every", "0"}, "--save-every takes a whole number of steps of at least 1"},
             {{"--save", dir, "--save-keep", "0"}, "--save-keep takes a number of checkpoints of at least 1"}}) {
        std::vector<std::string> a = {"--steps", "1"};
        a.insert(a.end(), args.begin(), args.end());
        Proc bad = train(sched, a);
        EXPECT_NE(bad.code(), 0) << bad.describe();
        EXPECT_TRUE(contains(bad.err, message)) << bad.describe();
    }
}

// --resume goes on with the learning-rate schedule where the checkpoint
// left it, for every schedule: five steps saved at step 3 (--save-every 3,
// kept as DIR.step-3) and resumed to five take steps 4 and 5 at the rates
// and losses of the run that never stopped, bit for bit. The warm-up
// (2 steps) and, for wsd, the decay (the last 2) straddle the save. wsd
// comes from the plan's train { } block, which the resumed run reads
// from the schedule as the first did.
TEST(ResumeSchedule, EveryScheduleGoesOnAtTheSavedStep)
{
    TempDir d;
    std::string cosine = compile_step(d), plan_text = slurp(std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan");
    plan_text.replace(plan_text.find("\"../models/"), 11, "\"" + std::string(TPCC_SOURCE_DIR) + "/models/");
    std::string plan = d.path + "/wsd.plan", wsd = d.path + "/wsd.sched";
    put(plan, plan_text + "\ntrain {\n    schedule = \"wsd\"\n    decay_steps = 2\n    decay_type = \"1-sqrt\"\n}\n");
    Proc c = tpcc_test::run_tpcc({plan, "--hf-config", kFixture + "config.json", "-D", "tp=1", "-D", "seq=16", "-D",
                                  "batch=2", "-D", "vocab_multiple=1", "--train", "-o", wsd});
    ASSERT_EQ(c.code(), 0) << c.describe();
    struct Case {
        std::string sched;
        std::vector<std::string> flags;
    } cases[] = {{cosine, {"--schedule", "cosine"}}, {cosine, {"--schedule", "constant"}},
                 {cosine, {"--schedule", "linear"}}, {wsd, {}}};
    for (const Case &k : cases) {
        std::string dir = d.path + "/ckpt" + (k.flags.empty() ? "" : k.flags[1]);
        std::vector<std::string> common = {"--steps", "5", "--warmup", "2", "--min-lr", "1e-4", "-q"};
        common.insert(common.end(), k.flags.begin(), k.flags.end());
        std::vector<std::string> whole = {k.sched, "--data", kFixture + "tokens.npy", "--weights", kFixture, "--save",
                                          dir, "--save-every", "3", "--save-keep", "2", "--log-json", d.path + "/whole.json"};
        whole.insert(whole.end(), common.begin(), common.end());
        Proc w = tprun(whole);
        ASSERT_EQ(w.code(), 0) << w.describe();
        std::vector<std::string> rest = {k.sched, "--data", kFixture + "tokens.npy", "--resume", dir + ".step-3",
                                         "--log-json", d.path + "/rest.json"};
        rest.insert(rest.end(), common.begin(), common.end());
        Proc r = tprun(rest);
        ASSERT_EQ(r.code(), 0) << r.describe();
        auto all = tpcc_test::logged_steps(d.path + "/whole.json"), resumed = tpcc_test::logged_steps(d.path + "/rest.json");
        ASSERT_EQ(all.size(), 5u);
        ASSERT_EQ(resumed.size(), 2u);
        for (size_t i = 0; i < 2; i++) {
            EXPECT_EQ(resumed[i].first, all[3 + i].first) << k.sched << " " << i + 4;
            EXPECT_EQ(resumed[i].second, all[3 + i].second) << k.sched << " " << i + 4;
        }
        EXPECT_NE(all[3].first, all[0].first) << "step 4's rate is not step 1's";
    }
}

// Pruning counts only the checkpoints older than the one a save puts in
// DIR: going back to step 2 of a 5-step run (--resume DIR.step-2) keeps
// that run's later checkpoints and the one resumed from, whatever K says;
// a K past int's range keeps every checkpoint.
TEST(PeriodicSave, PruningKeepsWhatARollbackNeeds)
{
    TempDir d;
    std::string sched = compile_step(d), dir = d.path + "/ckpt";
    Proc first = train(sched, {"--steps", "5", "--save", dir, "--save-every", "1", "--save-keep", "4294967297", "-q"});
    ASSERT_EQ(first.code(), 0) << first.describe();
    for (int s = 1; s <= 4; s++)
        EXPECT_TRUE(fs::exists(dir + ".step-" + std::to_string(s))) << s;
    std::string run_a_step4 = slurp(dir + ".step-4/model.safetensors");
    Proc back = tprun({sched, "--data", kFixture + "tokens.npy", "--steps", "4", "--resume", dir + ".step-2", "--save",
                       dir, "--save-every", "1", "--save-keep", "2", "-q"});
    ASSERT_EQ(back.code(), 0) << back.describe();
    EXPECT_TRUE(contains(slurp(dir + "/tprun_state.json"), "\"step\": 4"));
    EXPECT_TRUE(contains(slurp(dir + ".step-3/tprun_state.json"), "\"step\": 3"));
    EXPECT_TRUE(fs::exists(dir + ".step-2/model.safetensors")) << "the --resume directory is never pruned";
    EXPECT_FALSE(fs::exists(dir + ".step-1"));
    EXPECT_TRUE(contains(slurp(dir + ".step-5/tprun_state.json"), "\"step\": 5")) << "the longer run's, left alone";
    EXPECT_EQ(slurp(dir + ".step-4/model.safetensors"), run_a_step4);
}

}  // namespace
