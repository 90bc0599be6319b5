// Which files a plan may make tpcc read (compiler/driver/input_roots.c): a
// plan's model must resolve, symlinks followed, to a regular file under the
// plan's directory, tpcc's models directory, TPCC_MODEL_PATH or a path
// given with --allow-outside. Anything else is refused before it is opened,
// at the plan's model line, in every mode and diagnostics format; a FIFO
// or a device never blocks tpcc. Run as processes, under a time limit.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "tests/support/plan_harness.h"
#include "tests/support/process.h"
#include "tests/support/train_harness.h"

namespace fs = std::filesystem;
using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::slurp;
using tpcc_test::source_path;
using tpcc_test::TempDir;

namespace {

using tpcc_test::kTpcc;
const std::string kModelLine = "\"../models/llama.model\"";
// what a file outside the allowed directories holds: it must never be printed
const std::string kSecret = "root:$6$never-printed-secret:19000:0:99999:7:::";

// A FIFO or a device that blocked tpcc would hang: 20 s is a failure, not a wait.
Proc tpcc(const std::vector<std::string> &args, const std::vector<std::string> &env = {})
{
    return tpcc_test::run_program(kTpcc, args, env, 20);
}

// A scratch tree: plan/ holds the plan, outside/ is beside it (not below it).
struct Tree {
    TempDir dir;
    std::string plan_dir = dir.path + "/plan", outside = dir.path + "/outside";
    Tree()
    {
        fs::create_directories(plan_dir);
        fs::create_directories(outside);
    }
    // plan/x.plan: plans/llama-tiny.plan with its model line naming `model`
    std::string plan(const std::string &model) const
    {
        std::string text = slurp(source_path("plans/llama-tiny.plan"));
        tpcc_test::replace_once(text, kModelLine, "\"" + model + "\"");
        return dir.write("plan/x.plan", text);
    }
    std::string llama(const std::string &at) const
    {
        fs::create_directories(fs::path(dir.path + "/" + at).parent_path());
        return dir.write(at, slurp(source_path("models/llama.model")));
    }
};

void expect_refused(const Proc &r, const std::string &what)
{
    EXPECT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "x.plan:4:1: error: ")) << "at the plan's model line\n" << r.describe();
    EXPECT_TRUE(contains(r.err, what)) << r.describe();
    EXPECT_TRUE(contains(r.err, "[io]")) << r.describe();
    EXPECT_FALSE(contains(r.err + r.out, kSecret)) << r.describe();
}

TEST(InputRoots, ModelBesideOrBelowThePlanIsRead)
{
    Tree t;
    t.llama("plan/llama.model");
    t.llama("plan/sub/deeper.model");
    EXPECT_EQ(tpcc({"--check", t.plan("llama.model")}).code(), 0);
    Proc r = tpcc({"--check", t.plan("sub/deeper.model")});
    EXPECT_EQ(r.code(), 0) << r.describe();
    // a symlink that stays in the tree is followed
    ASSERT_EQ(symlink("sub/deeper.model", (t.plan_dir + "/link.model").c_str()), 0);
    r = tpcc({"--check", t.plan("link.model")});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

TEST(InputRoots, ShippedModelsDirectoryIsAllowed)
{
    Tree t;
    Proc r = tpcc({"--check", t.plan(source_path("models/llama.model"))});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

TEST(InputRoots, ModelOutsideThePlansTreeIsRefused)
{
    Tree t;
    std::string model = t.llama("outside/llama.model");
    std::string plan = t.plan("../outside/llama.model");
    Proc r = tpcc({"--check", plan});
    expect_refused(r, "'" + t.dir.path + "/outside/llama.model' is outside the directories a plan may read");
    EXPECT_TRUE(contains(r.err, "fix: move the file under the plan's directory or into ")) << r.describe();
    EXPECT_TRUE(contains(r.err, "--allow-outside " + t.outside)) << r.describe();
    // compiling refuses it the same way, and writes nothing
    std::string out = t.dir.path + "/x.sched";
    expect_refused(tpcc({plan, "-o", out}), "is outside the directories a plan may read");
    EXPECT_FALSE(fs::exists(out));
    // allowed: its directory, or the file itself, or twice
    EXPECT_EQ(tpcc({"--check", "--allow-outside", t.outside, plan}).code(), 0);
    EXPECT_EQ(tpcc({"--check", "--allow-outside", model, plan}).code(), 0);
    r = tpcc({"--allow-outside", t.dir.path + "/plan", "--allow-outside", t.outside, plan, "-o", out});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(fs::exists(out));
    // a sibling directory whose name starts like the allowed one is not inside it
    t.llama("outside2/llama.model");
    expect_refused(tpcc({"--check", "--allow-outside", t.outside, t.plan("../outside2/llama.model")}),
                   "is outside the directories a plan may read");
}

TEST(InputRoots, AbsolutePathToASecretIsNeverRead)
{
    Tree t;
    std::string secret = t.dir.write("outside/shadow", kSecret + "\n");
    std::string plan = t.plan(secret);
    expect_refused(tpcc({"--check", plan}), "is outside the directories a plan may read");
    for (const char *format : {"--diagnostics-format=json", "--diagnostics-format=sarif"}) {
        Proc r = tpcc({"--check", format, plan});
        EXPECT_EQ(r.code(), 2) << r.describe();
        EXPECT_TRUE(contains(r.out, "is outside the directories a plan may read")) << r.describe();
        EXPECT_TRUE(contains(r.out, "--allow-outside")) << "the fix is in the document\n" << r.describe();
        EXPECT_FALSE(contains(r.out + r.err, kSecret)) << r.describe();
    }
    // allowed, it is read; the parse error's echo of its line is bounded
    // below; here it shows the line, as for any file the user allowed
    Proc r = tpcc({"--check", "--allow-outside", secret, plan});
    EXPECT_EQ(r.code(), 1) << r.describe();
}

TEST(InputRoots, SymlinkEscapingTheTreeIsRefused)
{
    Tree t;
    t.llama("outside/llama.model");
    ASSERT_EQ(symlink((t.outside + "/llama.model").c_str(), (t.plan_dir + "/llama.model").c_str()), 0);
    std::string plan = t.plan("llama.model");
    Proc r = tpcc({"--check", plan});
    expect_refused(r, "'" + t.plan_dir + "/llama.model' resolves to '" + t.outside +
                          "/llama.model', outside the directories a plan may read");
    EXPECT_EQ(tpcc({"--check", "--allow-outside", t.outside, plan}).code(), 0);
    // a symlinked directory escapes the same way
    ASSERT_EQ(symlink(t.outside.c_str(), (t.plan_dir + "/models").c_str()), 0);
    expect_refused(tpcc({"--check", t.plan("models/llama.model")}), "resolves to");
}

TEST(InputRoots, FifoIsRefusedWithoutBlocking)
{
    Tree t;
    std::string fifo = t.plan_dir + "/fifo.model";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    std::string plan = t.plan("fifo.model");
    expect_refused(tpcc({"--check", plan}), "'" + fifo + "' is a FIFO, not a regular file");
    expect_refused(tpcc({plan, "-o", t.dir.path + "/x.sched"}), "is a FIFO, not a regular file");
    // a plan that is itself a FIFO: refused by the loader, not waited on
    std::string plan_fifo = t.dir.path + "/fifo.plan";
    ASSERT_EQ(mkfifo(plan_fifo.c_str(), 0600), 0);
    Proc r = tpcc({"--check", plan_fifo});
    EXPECT_FALSE(r.timed_out) << r.describe();
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "is a FIFO, not a regular file")) << r.describe();
}

TEST(InputRoots, DirectoryIsRefused)
{
    Tree t;
    fs::create_directories(t.plan_dir + "/dir.model");
    expect_refused(tpcc({"--check", t.plan("dir.model")}), "dir.model' is a directory, not a regular file");
}

TEST(InputRoots, DevicesAreRefused)
{
    Tree t;
    // stdin is /dev/null here: outside, and a device once allowed
    std::string plan = t.plan("/dev/stdin");
    expect_refused(tpcc({"--check", plan}), "'/dev/stdin' resolves to '/dev/null', outside");
    expect_refused(tpcc({"--check", "--allow-outside", "/dev", plan}),
                   "'/dev/stdin' is a character device, not a regular file");
    ASSERT_EQ(symlink("/dev/zero", (t.plan_dir + "/zero.model").c_str()), 0);
    plan = t.plan("zero.model");
    expect_refused(tpcc({"--check", plan}), "resolves to '/dev/zero', outside");
    expect_refused(tpcc({"--check", "--allow-outside", "/dev/zero", plan}), "is a character device");
}

TEST(InputRoots, ModelPathDirectoriesAreAllowed)
{
    Tree t;
    t.llama("outside/mine.model");
    std::string plan = t.plan("mine.model");
    Proc r = tpcc({"--check", plan}, {"TPCC_MODEL_PATH=" + t.outside});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

// plans/ beside models/, as the repository lays them out, copied anywhere:
// every shipped plan finds its model in the copy (its ../models/ line, and
// a bare name through the models/ directories above the plan), never
// refused as outside, with the same verdict as in the source tree.
TEST(ModelPath, CopiedPlansAndModelsFindEachOther)
{
    TempDir dir;
    fs::copy(source_path("plans"), dir.path + "/plans", fs::copy_options::recursive);
    fs::copy(source_path("models"), dir.path + "/models", fs::copy_options::recursive);
    std::vector<std::string> copies = {"--check", "-D", "tp=2"}, originals = copies;
    for (const char *sub : {"plans", "plans/hf"})
        for (const auto &e : fs::directory_iterator(dir.path + "/" + sub))
            if (e.path().extension() == ".plan") {
                copies.push_back(e.path().string());
                originals.push_back(source_path(std::string(sub) + "/" + e.path().filename().string()));
            }
    ASSERT_GT(copies.size(), 20u);
    // no TPCC_MODEL_PATH: only what the copy holds
    Proc copied = tpcc(copies, {"TPCC_MODEL_PATH="});
    Proc original = tpcc(originals, {"TPCC_MODEL_PATH="});
    EXPECT_FALSE(contains(copied.err, "[io]")) << copied.describe();
    EXPECT_EQ(copied.code(), original.code()) << copied.describe();
    std::string err = copied.err;
    for (size_t at; (at = err.find(dir.path + "/")) != std::string::npos;)
        err.erase(at, dir.path.size() + 1);
    std::string want = original.err;
    const std::string src = std::string(TPCC_SOURCE_DIR) + "/";
    for (size_t at; (at = want.find(src)) != std::string::npos;)
        want.erase(at, src.size());
    EXPECT_EQ(err, want);

    // a bare name: the models/ beside plans/ has it
    std::string text = slurp(source_path("plans/llama-tiny.plan"));
    tpcc_test::replace_once(text, kModelLine, "\"llama.model\"");
    std::string bare = dir.write("plans/bare.plan", text);
    Proc r = tpcc({"--check", bare}, {"TPCC_MODEL_PATH="});
    EXPECT_EQ(r.code(), 0) << r.describe();
    // and one level deeper, as plans/hf/ is
    fs::create_directories(dir.path + "/plans/deeper");
    r = tpcc({"--check", dir.write("plans/deeper/bare.plan", text)}, {"TPCC_MODEL_PATH="});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

// A build-tree tpcc finds its source tree's models by name (an installed
// one, its share/tpcc/models): README's `model "llama.model"` works from
// the build directory.
TEST(ModelPath, BuildTreeTpccFindsItsModels)
{
    Tree t;
    Proc r = tpcc({"--check", t.plan("llama.model")}, {"TPCC_MODEL_PATH="});
    EXPECT_EQ(r.code(), 0) << r.describe();
}

// Nowhere to be found: the error says where tpcc looked and how to fix it.
TEST(ModelPath, NotFoundSaysWhereItLooked)
{
    Tree t;
    t.llama("models/other.model");
    Proc r = tpcc({"--check", t.plan("mine.model")}, {"TPCC_MODEL_PATH=" + t.outside});
    expect_refused(r, "cannot find the model 'mine.model' (not at '" + t.plan_dir +
                          "/mine.model', nor in a directory models are looked for in)");
    EXPECT_TRUE(contains(r.err, "note: looked for 'mine.model' in " + t.outside + ", " + t.dir.path + "/models, " +
                                    std::string(TPCC_SOURCE_DIR) + "/models\n")) << r.describe();
    EXPECT_TRUE(contains(r.err, "fix: name the model's path relative to the plan, or put it in a models/ directory "
                                "beside the plan or above it; a directory elsewhere goes in TPCC_MODEL_PATH or in "
                                "model-path")) << r.describe();
}

// A models/ that is a symbolic link is not looked in (it could lead
// anywhere); nor is anything above the repository's root.
TEST(ModelPath, SymlinkedModelsAndAboveTheRootAreNotSearched)
{
    Tree t;
    t.llama("outside/mine.model");
    ASSERT_EQ(symlink(t.outside.c_str(), (t.dir.path + "/models").c_str()), 0);
    Proc r = tpcc({"--check", t.plan("mine.model")}, {"TPCC_MODEL_PATH="});
    expect_refused(r, "cannot find the model 'mine.model'");
    fs::remove(t.dir.path + "/models");
    t.llama("models/mine.model");
    EXPECT_EQ(tpcc({"--check", t.plan("mine.model")}, {"TPCC_MODEL_PATH="}).code(), 0);
    fs::create_directories(t.plan_dir + "/.git");
    expect_refused(tpcc({"--check", t.plan("mine.model")}, {"TPCC_MODEL_PATH="}), "cannot find the model");
}

TEST(InputRoots, AllowOutsideMustExist)
{
    Tree t;
    Proc r = tpcc({"--check", "--allow-outside", t.dir.path + "/nowhere", t.plan("llama.model")});
    EXPECT_EQ(r.code(), 2) << r.describe();
    EXPECT_TRUE(contains(r.err, "--allow-outside: cannot resolve '" + t.dir.path + "/nowhere'")) << r.describe();
}

// The echo of an unparsable file is bounded: one huge line shows a window
// around the error, not the line.
TEST(InputRoots, EchoOfALongLineIsBounded)
{
    Tree t;
    std::string line(1 << 20, 'x');
    line[600000] = '@';   // not a token: a lexical error in the middle
    t.dir.write("plan/long.model", line + "\n");
    Proc r = tpcc({"--check", t.plan("long.model")});
    EXPECT_EQ(r.code(), 1) << r.describe().substr(0, 2000);
    EXPECT_LT(r.err.size(), 2000u) << r.err.substr(0, 2000);
    EXPECT_TRUE(contains(r.err, "long.model:1:")) << r.err.substr(0, 2000);
    EXPECT_TRUE(contains(r.err, " ...xxx")) << r.err.substr(0, 2000);
}

// --hf-config's suggestion of another model file beside the plan's reads
// only files really in that directory: a symlink beside it is not followed.
TEST(InputRoots, SiblingModelSymlinkIsNotRead)
{
    Tree t;
    t.llama("plan/llama.model");
    t.dir.write("outside/qwen2.model", slurp(source_path("models/qwen2.model")));
    std::string plan = t.plan("llama.model");
    std::string config = source_path("tests/fixtures/qwen2.5-7b");
    Proc r = tpcc({"--check", "--hf-config", config, plan});
    EXPECT_TRUE(contains(r.err, "write a model file for it")) << r.describe();
    t.dir.write("plan/qwen2.model", slurp(source_path("models/qwen2.model")));
    r = tpcc({"--check", "--hf-config", config, plan});
    EXPECT_TRUE(contains(r.err, "qwen2.model implements Qwen2ForCausalLM")) << r.describe();
    fs::remove(t.plan_dir + "/qwen2.model");
    ASSERT_EQ(symlink((t.outside + "/qwen2.model").c_str(), (t.plan_dir + "/qwen2.model").c_str()), 0);
    r = tpcc({"--check", "--hf-config", config, plan});
    EXPECT_TRUE(contains(r.err, "write a model file for it")) << r.describe();
}

}  // namespace
