// tprun's --profile-json and --trace: valid JSON whatever the names in
// them hold (a schedule path, module names from a schedule file: quotes,
// backslashes, control characters, non-ASCII and bytes that are not
// UTF-8), parsed back with jansson; written atomically (nothing but the
// file left in its directory; a directory or a missing one is an error
// naming the option).
#include <gtest/gtest.h>

#include <jansson.h>

#include <filesystem>
#include <iterator>
#include <string>

#include "tests/support/process.h"

namespace {

using tpcc_test::contains;
using tpcc_test::Proc;
using tpcc_test::TempDir;

using tpcc_test::kTprun;
const char kOddModule[] = "layers.0 \"q\\proj\"\n\t\x01 caf\xc3\xa9";

// A tiny llama schedule whose first op's module is kOddModule, at a path
// holding a quote, a backslash and a byte that is not UTF-8.
std::string odd_schedule(const TempDir &d)
{
    const std::string plain = d.path + "/plain.sched";
    Proc c = tpcc_test::run_tpcc({std::string(TPCC_SOURCE_DIR) + "/plans/llama-sp.plan", "-o", plain, "-D", "tp=1",
                                  "-D", "vocab=128", "-D", "hidden=32", "-D", "layers=1", "-D", "heads=4", "-D",
                                  "kv_heads=2", "-D", "ffn=64", "-D", "seq=8"});
    EXPECT_EQ(c.code(), 0) << c.describe();
    json_error_t e;
    json_t *root = json_load_file(plain.c_str(), 0, &e);
    EXPECT_TRUE(root) << e.text;
    if (!root)
        return plain;
    json_t *ops = json_object_get(json_array_get(json_object_get(root, "ranks"), 0), "ops");
    EXPECT_TRUE(json_array_size(ops) > 0) << "no ops found in the schedule's JSON";
    json_object_set_new(json_array_get(ops, 0), "module", json_string(kOddModule));
    const std::string odd = d.path + "/s \"x\\y\xff.sched";
    EXPECT_EQ(json_dump_file(root, odd.c_str(), 0), 0);
    json_decref(root);
    return odd;
}

json_t *parse(const std::string &path)
{
    json_error_t e;
    json_t *doc = json_load_file(path.c_str(), 0, &e);
    EXPECT_TRUE(doc) << path << ": " << e.text << " at line " << e.line << ": " << tpcc_test::slurp(path);
    return doc;
}

TEST(ProfileOutput, NamesAreEscapedAndTheFilesParse)
{
    TempDir d;
    const std::string sched = odd_schedule(d), prof = d.path + "/profile.json", trace = d.path + "/trace.json";
    Proc r = tpcc_test::run_program(kTprun, {sched, "--labels", "tokens", "--profile-json", prof, "--trace", trace, "-q"});
    ASSERT_EQ(r.code(), 0) << r.describe();

    json_t *p = parse(prof);
    ASSERT_TRUE(p);
    // the path's invalid byte becomes U+FFFD; the rest reads back as it was
    EXPECT_EQ(std::string(json_string_value(json_object_get(p, "schedule"))),
              d.path + "/s \"x\\y\xef\xbf\xbd.sched");
    EXPECT_TRUE(json_is_object(json_object_get(json_array_get(json_object_get(p, "ranks"), 0), "ops")));
    json_decref(p);

    json_t *t = parse(trace);
    ASSERT_TRUE(t);
    bool found = false;
    size_t i;
    json_t *ev;
    json_array_foreach(json_object_get(t, "traceEvents"), i, ev) {
        const char *module = json_string_value(json_object_get(json_object_get(ev, "args"), "module"));
        found |= module && std::string(module) == kOddModule;
    }
    EXPECT_TRUE(found) << "the odd module name did not read back from " << tpcc_test::slurp(trace);
    json_decref(t);

    // written by rename: nothing but the outputs and the schedules is left
    auto files = std::distance(std::filesystem::directory_iterator(d.path), std::filesystem::directory_iterator());
    EXPECT_EQ(files, 4);
}

TEST(ProfileOutput, AnUnwritablePathIsAnErrorNamingTheOption)
{
    TempDir d;
    const std::string sched = odd_schedule(d), dir = d.path + "/a-directory";
    std::filesystem::create_directory(dir);
    Proc r = tpcc_test::run_program(kTprun, {sched, "--labels", "tokens", "--profile-json", dir, "-q"});
    EXPECT_NE(r.code(), 0);
    EXPECT_TRUE(contains(r.err, "--profile-json")) << r.err;
    EXPECT_TRUE(std::filesystem::is_directory(dir));

    r = tpcc_test::run_program(kTprun, {sched, "--labels", "tokens", "--trace", d.path + "/missing/trace.json", "-q"});
    EXPECT_NE(r.code(), 0);
    EXPECT_TRUE(contains(r.err, "--trace")) << r.err;
}

}  // namespace
