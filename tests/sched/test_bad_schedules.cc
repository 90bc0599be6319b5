// tprun on crafted schedules, one per invariant the executor and the
// backends rely on (tests/sched/bad/*.json): each is a real small schedule
// that tpcc wrote, with one edit, "why" it is wrong and the piece of the
// message tprun must say. Each must be refused before anything runs, with
// that message and a non-zero exit, never a crash (the suite also runs
// under ASan and UBSan).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <jansson.h>

#include "tests/support/process.h"

extern "C" {
#include "sched/format.h"
}

namespace fs = std::filesystem;
using tpcc_test::Proc;
using tpcc_test::TempDir;

namespace {

const std::string kTprun = std::string(TPCC_BINARY_DIR) + "/tprun";

std::vector<std::string> bad_schedules()
{
    std::vector<std::string> names;
    for (const auto &e : fs::directory_iterator("tests/sched/bad"))
        if (e.path().extension() == ".json")
            names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

class BadSchedule : public testing::TestWithParam<std::string> {};

TEST_P(BadSchedule, IsRefusedWithItsMessage)
{
    json_error_t je;
    json_t *doc = json_load_file(("tests/sched/bad/" + GetParam() + ".json").c_str(), 0, &je);
    ASSERT_NE(doc, nullptr) << je.text;
    const std::string expect = json_string_value(json_object_get(doc, "expect"));
    const json_int_t ranks = json_integer_value(json_object_get(doc, "launch"));
    // the edit is what is wrong, not the format version the file was written in
    json_object_set_new(doc, "format_version", json_integer(TP_SCHEDULE_VERSION));
    bool training = json_object_get(json_object_get(doc, "outputs"), "grads") != nullptr;
    bool loss = json_is_integer(json_object_get(json_object_get(doc, "outputs"), "loss"));
    TempDir dir;
    std::string sched = dir.path + "/bad.sched";
    ASSERT_EQ(json_dump_file(doc, sched.c_str(), 0), 0);
    json_decref(doc);

    std::vector<std::string> args;
    if (ranks > 1)
        args = {"-n", std::to_string(ranks)};
    args.push_back(sched);
    // refused when read: the data and labels are never looked at
    if (training)
        args.insert(args.end(), {"--data", dir.path + "/unread.npy", "--steps", "1"});
    else if (loss)
        args.insert(args.end(), {"--labels", "tokens"});
    Proc p = tpcc_test::run_program(kTprun, args, {"OPENBLAS_NUM_THREADS=1"}, 60);
    EXPECT_FALSE(p.timed_out) << p.describe();
    EXPECT_FALSE(p.signaled()) << p.describe();
    EXPECT_GT(p.code(), 0) << p.describe();
    EXPECT_TRUE(tpcc_test::contains(p.err, expect)) << "expected: " << expect << "\n" << p.describe();
    EXPECT_FALSE(tpcc_test::contains(p.err, "runtime error")) << p.describe();   // UBSan
    EXPECT_FALSE(tpcc_test::contains(p.err, "Sanitizer")) << p.describe();
}

INSTANTIATE_TEST_SUITE_P(Crafted, BadSchedule, testing::ValuesIn(bad_schedules()),
                         [](const testing::TestParamInfo<std::string> &i) {
                             std::string n = i.param;
                             for (char &c : n)
                                 if (c == '-')
                                     c = '_';
                             return n;
                         });

// The committed fuzz inputs that are schedules (tests/fuzz/corpus, regress)
// carry this tprun's format version: one from an older version would stop
// at the version check, and its replay (Fuzz.Replay.*) would test nothing
// else. After a format change, bump theirs and check that each still
// reaches what it was kept for.
TEST(FuzzInputs, SchedulesAreInTheCurrentFormat)
{
    const std::regex version("\"format_version\": *([0-9]+)");
    int seen = 0;
    for (const char *dir : {"tests/fuzz/corpus/schedule", "tests/fuzz/corpus/run", "tests/fuzz/regress/run"})
        for (const auto &e : fs::directory_iterator(dir)) {
            std::string text = tpcc_test::slurp(e.path().string());
            std::smatch m;
            if (!std::regex_search(text, m, version))
                continue;   // a mutant without one
            EXPECT_EQ(std::stoi(m[1]), TP_SCHEDULE_VERSION) << e.path();
            seen++;
        }
    EXPECT_GT(seen, 20);
}

}  // namespace
