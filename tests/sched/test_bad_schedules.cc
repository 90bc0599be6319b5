// tprun on crafted schedules, one per invariant the executor and the
// backends rely on: each case (tests/sched/bad/*.json) is a real small
// schedule that tpcc writes when the test runs (its "base", one of kBases
// below) with a few edits (its "patch"), "why" it is wrong and the piece of
// the message tprun must say ("expect"). Each must be refused before
// anything runs, with that message and a non-zero exit, never a crash (the
// suite also runs under ASan and UBSan).
//
// A patch is a JSON Patch (RFC 6902: "add", "remove", "replace" and "test"
// at RFC 6901 pointers such as "/ranks/0/ops/7/out"). Each case's patch
// first tests the name of the op, buffer or weight it edits, so a base
// that changes under it fails here, saying which, rather than testing
// something else. The bases are the current format by construction: a
// format change touches a case only where it moves what the case edits.
// tprun runs the patched schedule on its own ranks (world_size, times
// data_parallel where it has one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
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

using tpcc_test::kTprun;

// The sizes most bases are cut to: one layer, 16 wide, 4 tokens, so a
// whole schedule is a few hundred lines.
#define TINY "-D", "vocab=32", "-D", "hidden=16", "-D", "layers=1", "-D", "heads=2", "-D", "ffn=16", "-D", "seq=4", \
             "-D", "batch=1"

// The base schedules, by name: tpcc's arguments (paths from the source
// tree). -O0 keeps each op its own (add, rmsnorm, silu and mul apart),
// which the cases on the plain ops name; the "-fused" ones are -O1's.
const std::map<std::string, std::vector<std::string>> kBases = {
    // a forward with its loss at tp 1, and at tp 2 with sequence parallelism
    {"llama", {"-O0", "plans/llama-tiny.plan", "-D", "tp=1", "-D", "kv_heads=1", TINY}},
    {"llama-tp2", {"-O0", "plans/llama-tiny.plan", "-D", "tp=2", "-D", "kv_heads=2", TINY}},
    // a training step (outputs.grads, the backward)
    {"llama-train", {"-O0", "--train", "plans/llama-tiny.plan", "-D", "tp=1", "-D", "kv_heads=1", TINY}},
    // the same in bf16 (attention's log-sum-exp f32 beside bf16 activations)
    {"llama-train-bf16",
     {"-O0", "--train", "--dtype", "bf16", "plans/llama-tiny.plan", "-D", "tp=1", "-D", "kv_heads=1", TINY}},
    // add_rmsnorm, silu_mul and rope_attention (the size of llama-tiny.plan, one layer)
    {"llama-fused", {"plans/llama-tiny.plan", "-D", "tp=1", "-D", "layers=1"}},
    // the same with documents (rope_attention reading segments and positions)
    {"llama-documents", {"plans/llama-tiny.plan", "-D", "tp=1", "-D", "layers=1", "--segments"}},
    // tied embeddings, learned positions, a fused cross_entropy
    {"gpt2", {"-O0", "plans/gpt2-sp-tied.plan", "-D", "tp=1", "-D", "positions=8", TINY}},
    // transformers' GPT-2 (Conv1D, narrow) with bias_gelu
    {"gpt2-fused",
     {"plans/gpt2-hf-sp.plan", "-D", "tp=1", "-D", "vocab=256", "-D", "hidden=32", "-D", "layers=1", "-D", "heads=2",
      "-D", "ffn=128", "-D", "positions=16", "-D", "seq=8", "-D", "batch=1", "-D", "vocab_multiple=1"}},
    // ZeRO-2 over two data-parallel replicas (dp_reduce_scatter)
    {"llama-zero2", {"--train", "tests/sched/bad/llama-zero2.plan"}},
    // FSDP over two data-parallel replicas (dp_all_gather, weight_buf)
    {"llama-fsdp", {"--train", "tests/sched/bad/llama-fsdp.plan"}},
};

#undef TINY

std::vector<std::string> bad_schedules()
{
    std::vector<std::string> names;
    for (const auto &e : fs::directory_iterator("tests/sched/bad"))
        if (e.path().extension() == ".json")
            names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

using JsonPtr = std::unique_ptr<json_t, decltype(&json_decref)>;

JsonPtr own(json_t *j)
{
    return JsonPtr(j, json_decref);
}

// The base `name`, as this build's tpcc writes it; a new reference, or
// NULL with the reason in *why.
json_t *write_base(const std::string &name, const TempDir &dir, std::string *why)
{
    auto base = kBases.find(name);
    if (base == kBases.end()) {
        *why = "no base named '" + name + "' (kBases)";
        return nullptr;
    }
    std::string sched = dir.path + "/" + name + ".sched";
    std::vector<std::string> args = base->second;
    args.insert(args.end(), {"-o", sched});
    Proc c = tpcc_test::run_tpcc(args);
    if (c.code() != 0) {
        *why = "tpcc could not write the base '" + name + "': " + c.describe();
        return nullptr;
    }
    json_error_t je;
    json_t *doc = json_load_file(sched.c_str(), 0, &je);
    if (!doc)
        *why = "the base '" + name + "': " + je.text;
    return doc;
}

// An RFC 6901 pointer's reference tokens ("~1" is '/', "~0" is '~').
bool pointer_tokens(const std::string &ptr, std::vector<std::string> *tokens)
{
    if (ptr.empty())
        return true;   // the whole document
    if (ptr[0] != '/')
        return false;
    size_t at = 1;
    for (;;) {
        size_t end = ptr.find('/', at);
        std::string t = ptr.substr(at, end == std::string::npos ? std::string::npos : end - at), out;
        for (size_t i = 0; i < t.size(); i++) {
            if (t[i] != '~')
                out += t[i];
            else if (i + 1 < t.size() && (t[i + 1] == '0' || t[i + 1] == '1'))
                out += t[++i] == '0' ? '~' : '/';
            else
                return false;
        }
        tokens->push_back(out);
        if (end == std::string::npos)
            return true;
        at = end + 1;
    }
}

// An array index token: digits without a leading zero, below `limit`.
bool array_index(const std::string &t, size_t limit, size_t *index)
{
    if (t.empty() || t.size() > 9 || (t.size() > 1 && t[0] == '0') ||
        !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return false;
    *index = std::stoul(t);
    return *index < limit;
}

// Applies one JSON Patch operation to `doc` (never the root itself).
// Returns "" or what is wrong with it.
std::string apply_op(json_t *doc, json_t *op)
{
    const char *kind = json_string_value(json_object_get(op, "op"));
    const char *path = json_string_value(json_object_get(op, "path"));
    json_t *value = json_object_get(op, "value");
    if (!kind || !path)
        return "an operation needs \"op\" and \"path\"";
    const std::string k = kind, at = std::string(" at ") + path;
    std::vector<std::string> tokens;
    if (!pointer_tokens(path, &tokens) || tokens.empty())
        return "not a pointer into the document" + at;
    if (k != "remove" && !value)
        return k + " needs a \"value\"" + at;
    json_t *parent = doc;
    for (size_t i = 0; i + 1 < tokens.size(); i++) {
        size_t index;
        if (json_is_object(parent))
            parent = json_object_get(parent, tokens[i].c_str());
        else if (json_is_array(parent) && array_index(tokens[i], json_array_size(parent), &index))
            parent = json_array_get(parent, index);
        else
            parent = nullptr;
        if (!parent)
            return "nothing" + at;
    }
    const std::string &last = tokens.back();
    if (json_is_object(parent)) {
        json_t *old = json_object_get(parent, last.c_str());
        if (k == "test")
            return old && json_equal(old, value) ? "" : "the base has " + std::string(old ? "another value" : "nothing") + at;
        if (k != "add" && !old)
            return "nothing to " + k + at;
        if (k == "remove")
            return json_object_del(parent, last.c_str()) == 0 ? "" : "cannot remove" + at;
        if (k == "add" || k == "replace")
            return json_object_set(parent, last.c_str(), value) == 0 ? "" : "cannot set" + at;
    } else if (json_is_array(parent)) {
        size_t n = json_array_size(parent), index;
        if (k == "add" && last == "-")
            return json_array_append(parent, value) == 0 ? "" : "cannot append" + at;
        if (!array_index(last, k == "add" ? n + 1 : n, &index))
            return "no element" + at;
        if (k == "test")
            return json_equal(json_array_get(parent, index), value) ? "" : "the base has another value" + at;
        if (k == "remove")
            return json_array_remove(parent, index) == 0 ? "" : "cannot remove" + at;
        if (k == "add")
            return json_array_insert(parent, index, value) == 0 ? "" : "cannot insert" + at;
        if (k == "replace")
            return json_array_set(parent, index, value) == 0 ? "" : "cannot set" + at;
    } else {
        return "nothing" + at;
    }
    return "\"" + k + "\" is not an operation this test knows (add, remove, replace, test)";
}

class BadSchedule : public testing::TestWithParam<std::string> {};

TEST_P(BadSchedule, IsRefusedWithItsMessage)
{
    json_error_t je;
    JsonPtr bad = own(json_load_file(("tests/sched/bad/" + GetParam() + ".json").c_str(), 0, &je));
    ASSERT_NE(bad, nullptr) << je.text;
    const char *expect = json_string_value(json_object_get(bad.get(), "expect"));
    const char *base = json_string_value(json_object_get(bad.get(), "base"));
    json_t *patch = json_object_get(bad.get(), "patch");
    ASSERT_TRUE(expect && base && json_is_array(patch) && json_is_string(json_object_get(bad.get(), "why")))
        << "a case is {\"why\", \"base\", \"patch\", \"expect\"}";
    ASSERT_GT(json_array_size(patch), 0u);

    TempDir dir;
    std::string why;
    JsonPtr doc = own(write_base(base, dir, &why));
    ASSERT_NE(doc, nullptr) << why;
    ASSERT_EQ(json_integer_value(json_object_get(doc.get(), "format_version")), TP_SCHEDULE_VERSION);
    size_t i;
    json_t *op;
    json_array_foreach(patch, i, op) {
        std::string wrong = apply_op(doc.get(), op);
        ASSERT_EQ(wrong, "") << "patch[" << i << "] on the base '" << base << "'";
    }
    json_t *outputs = json_object_get(doc.get(), "outputs");
    bool training = json_object_get(outputs, "grads") != nullptr;
    bool loss = json_is_integer(json_object_get(outputs, "loss"));
    json_int_t ranks = json_integer_value(json_object_get(doc.get(), "world_size"));
    if (json_is_integer(json_object_get(doc.get(), "data_parallel")))
        ranks *= std::max<json_int_t>(1, json_integer_value(json_object_get(doc.get(), "data_parallel")));
    std::string sched = dir.path + "/bad.sched";
    ASSERT_EQ(json_dump_file(doc.get(), sched.c_str(), 0), 0);

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

// The patches themselves: what each operation does, and what it refuses.
TEST(JsonPatch, AppliesAndRefusesAsRfc6902Says)
{
    JsonPtr doc = own(json_loads(R"({"a": {"b/c": [1, 2, 3], "m~n": 4}})", 0, nullptr));
    auto apply = [&](const char *op) {
        JsonPtr o = own(json_loads(op, 0, nullptr));
        return apply_op(doc.get(), o.get());
    };
    EXPECT_EQ(apply(R"({"op": "test", "path": "/a/b~1c/1", "value": 2})"), "");
    EXPECT_EQ(apply(R"({"op": "test", "path": "/a/m~0n", "value": 4})"), "");
    EXPECT_EQ(apply(R"({"op": "replace", "path": "/a/b~1c/0", "value": 7})"), "");
    EXPECT_EQ(apply(R"({"op": "remove", "path": "/a/b~1c/1"})"), "");
    EXPECT_EQ(apply(R"({"op": "add", "path": "/a/b~1c/0", "value": 0})"), "");
    EXPECT_EQ(apply(R"({"op": "add", "path": "/a/b~1c/-", "value": 9})"), "");
    EXPECT_EQ(apply(R"({"op": "add", "path": "/a/new", "value": null})"), "");
    EXPECT_EQ(apply(R"({"op": "remove", "path": "/a/m~0n"})"), "");
    JsonPtr want = own(json_loads(R"({"a": {"b/c": [0, 7, 3, 9], "new": null}})", 0, nullptr));
    EXPECT_TRUE(json_equal(doc.get(), want.get())) << json_dumps(doc.get(), JSON_COMPACT);

    EXPECT_NE(apply(R"({"op": "test", "path": "/a/b~1c/1", "value": 8})"), "");   // another value
    EXPECT_NE(apply(R"({"op": "replace", "path": "/a/gone", "value": 1})"), "");   // nothing to replace
    EXPECT_NE(apply(R"({"op": "remove", "path": "/a/b~1c/4"})"), "");              // past the end
    EXPECT_NE(apply(R"({"op": "remove", "path": "/a/b~1c/01"})"), "");             // not an index
    EXPECT_NE(apply(R"({"op": "add", "path": "/x/y", "value": 1})"), "");          // no parent
    EXPECT_NE(apply(R"({"op": "add", "path": "a", "value": 1})"), "");             // not a pointer
    EXPECT_NE(apply(R"({"op": "add", "path": "/a/~2", "value": 1})"), "");         // a bad escape
    EXPECT_NE(apply(R"({"op": "move", "path": "/a/new", "from": "/a"})"), "");     // not supported
    EXPECT_NE(apply(R"({"op": "replace", "path": "/a/new"})"), "");                // no value
}

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
