// Tests for the diagnostics engine: collection and sorting (diag.c), the
// text renderer (diag/text.c), JSON and SARIF (diag/json.c) and fix-it
// application (diag/fixit.c).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern "C" {
#include "compiler/diag/checks.h"
#include "compiler/diag/diag.h"
#include "compiler/diag/fingerprint.h"
#include "compiler/diag/lint.h"
#include "compiler/diag/source.h"
}

namespace {

// The span of `len` bytes at 1-based line/col of a loaded file, with the
// byte offset the lexer would have computed.
tp_span span_at(const tp_sources *src, int file, int line, int col, int len)
{
    const char *text = src->files[file].text;
    int offset = 0;
    for (int l = 1; l < line; l++)
        offset = int(strchr(text + offset, '\n') - text) + 1;
    return tp_span{file, line, col, offset + col - 1, len};
}

std::string take(char *s)
{
    std::string out(s);
    free(s);
    return out;
}

std::string repeat(const char *line, int n)
{
    std::string s;
    for (int i = 0; i < n; i++)
        s += line;
    return s;
}

class DiagTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        tp_sources_init(&src_);
        tp_diags_init(&diags_);
    }
    void TearDown() override
    {
        tp_diags_free(&diags_);
        tp_sources_free(&src_);
    }
    int add(const char *path, const std::string &text)
    {
        return tp_sources_add(&src_, path, text.data(), text.size());
    }
    std::string text(int color = 0) { return take(tp_diags_render_text(&diags_, &src_, color)); }
    // This fixture's diagnostics as the one plan of a run.
    tp_diag_unit unit(int status = 0) const { return tp_diag_unit{"plans/bad.plan", &diags_, &src_, status}; }
    std::string json()
    {
        tp_diag_unit u = unit();
        return take(tp_diags_render_json(&u, 1));
    }
    // SARIF as if run in /work with the root /work.
    std::string sarif(const char *root = "/work")
    {
        tp_diag_unit u = unit();
        tp_render_opts opts = {0, "/work", root};
        return take(tp_diags_render_sarif(&u, 1, &opts));
    }

    // The diagnostic of the golden test: an error with a fix-it, a note in
    // another file and a help line.
    void add_golden()
    {
        int plan = add("plans/bad.plan",
                       repeat("# filler\n", 11) + "    \"model.norm\": SequenceParallel(),\n");
        int model = add("models/llama.model",
                        repeat("#\n", 39) + "        h = embed_tokens(input_ids)\n");
        tp_diag *g = tp_diag_add(&diags_, TP_ERROR, span_at(&src_, plan, 12, 5, 12),
                                 "relabel", "%s", "message");
        tp_diag_fixit(g, span_at(&src_, plan, 12, 36, 0), "input_layouts=Replicate()");
        tp_diag_note_at(g, span_at(&src_, model, 40, 13, 23), "the producer of this value");
        tp_diag_help(g, "write RowwiseParallel(%s)", "input_layouts=Replicate()");
    }

    tp_sources src_;
    tp_diags diags_;
};

// ---- text ----

TEST_F(DiagTest, TextGolden)
{
    add_golden();
    EXPECT_EQ(text(),
              "plans/bad.plan:12:5: error: message [relabel]\n"
              "   12 |     \"model.norm\": SequenceParallel(),\n"
              "      |     ^~~~~~~~~~~~\n"
              "      |                                    input_layouts=Replicate()\n"
              "models/llama.model:40:13: note: the producer of this value\n"
              "   40 |         h = embed_tokens(input_ids)\n"
              "      |             ^~~~~~~~~~~~~~~~~~~~~~~\n"
              "fix: write RowwiseParallel(input_layouts=Replicate())\n"
              "\n"
              "1 error generated.\n");
}

TEST_F(DiagTest, TextBlankLineBetweenDiagnostics)
{
    int f = add("a.plan", "x\ny\n");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 1, 1, 1), "c", "first");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 2, 1, 1), "c", "second");
    EXPECT_EQ(text(),
              "a.plan:1:1: warning: first [c]\n"
              "    1 | x\n"
              "      | ^\n"
              "\n"
              "a.plan:2:1: warning: second [c]\n"
              "    2 | y\n"
              "      | ^\n"
              "\n"
              "2 warnings generated.\n");
}

TEST_F(DiagTest, TextTabsAreExpanded)
{
    int f = add("t.plan", "\tx = 1\nab\tcd\n");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 1, 2, 1), "t", "tab");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 2, 4, 2), "t", "tab");
    EXPECT_EQ(text(),
              "t.plan:1:2: warning: tab [t]\n"
              "    1 |         x = 1\n"
              "      |         ^\n"
              "\n"
              "t.plan:2:4: warning: tab [t]\n"
              "    2 | ab      cd\n"
              "      |         ^~\n"
              "\n"
              "2 warnings generated.\n");
}

TEST_F(DiagTest, TextSpanPastEndOfLine)
{
    int f = add("p.plan", "abc\ndef\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 1, 2, 10), "c", "long");
    EXPECT_EQ(text(),
              "p.plan:1:2: error: long [c]\n"
              "    1 | abc\n"
              "      |  ^~\n"
              "\n"
              "1 error generated.\n");
}

TEST_F(DiagTest, TextMultiLineSpanUnderlinesFirstLine)
{
    int f = add("p.plan", "abc\ndef\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 1, 2, 5), "c", "two lines");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 2, 4, 0), "c", "at end");
    EXPECT_EQ(text(),
              "p.plan:1:2: error: two lines [c]\n"
              "    1 | abc\n"
              "      |  ^~\n"
              "\n"
              "p.plan:2:4: error: at end [c]\n"
              "    2 | def\n"
              "      |    ^\n"
              "\n"
              "2 errors generated.\n");
}

TEST_F(DiagTest, TextNoSpan)
{
    tp_diag *g = tp_diag_add(&diags_, TP_ERROR, TP_NO_SPAN, "flags", "unknown mesh dim '%s'", "pp");
    tp_diag_note_at(g, TP_NO_SPAN, "set by --mesh");
    EXPECT_EQ(text(),
              "tpcc: error: unknown mesh dim 'pp' [flags]\n"
              "note: set by --mesh\n"
              "\n"
              "1 error generated.\n");
}

TEST_F(DiagTest, TextUnknownFileIsNoSpan)
{
    tp_span sp = {3, 1, 1, 0, 1};   // no file 3 was loaded
    tp_diag_add(&diags_, TP_WARNING, sp, "c", "lost");
    EXPECT_EQ(text(), "tpcc: warning: lost [c]\n\n1 warning generated.\n");
}

TEST_F(DiagTest, TextSummaryPlurals)
{
    EXPECT_EQ(text(), "");
    tp_diag_add(&diags_, TP_NOTE, TP_NO_SPAN, "c", "just a note");
    EXPECT_EQ(text(), "tpcc: note: just a note [c]\n");
    tp_diag_add(&diags_, TP_ERROR, TP_NO_SPAN, "c", "e1");
    EXPECT_TRUE(text().find("\n\n1 error generated.\n") != std::string::npos);
    tp_diag_add(&diags_, TP_WARNING, TP_NO_SPAN, "c", "w1");
    EXPECT_TRUE(text().find("\n\n1 error, 1 warning generated.\n") != std::string::npos);
    tp_diag_add(&diags_, TP_ERROR, TP_NO_SPAN, "c", "e2");
    tp_diag_add(&diags_, TP_WARNING, TP_NO_SPAN, "c", "w2");
    std::string out = text();
    EXPECT_EQ(out.substr(out.rfind("\n\n") + 2), "2 errors, 2 warnings generated.\n");
    tp_diag_unsupported(&diags_, TP_NO_SPAN, "u1");
    out = text();
    EXPECT_EQ(out.substr(out.rfind("\n\n") + 2), "2 errors, 2 warnings, 1 unsupported generated.\n");
}

TEST_F(DiagTest, TextColor)
{
    add_golden();
    std::string out = text(1);
    EXPECT_EQ(out.rfind("\033[1mplans/bad.plan:12:5: \033[0m\033[0;1;31merror: \033[0m"
                        "\033[1mmessage [relabel]\033[0m\n", 0), 0u);
    EXPECT_NE(out.find("      |     \033[0;1;32m^~~~~~~~~~~~\033[0m\n"), std::string::npos);
    EXPECT_NE(out.find("\033[0;1;36mnote: \033[0mthe producer"), std::string::npos);
    EXPECT_NE(out.find("\033[0;32m"), std::string::npos);
    // The plain rendering carries no escapes at all.
    EXPECT_EQ(text(0).find('\033'), std::string::npos);
}

TEST_F(DiagTest, TextControlCharactersAreNotEchoed)
{
    int f = add("e.plan", "a\033[2Jb\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 1, 1, 1), "c", "m");
    EXPECT_EQ(text().find('\033'), std::string::npos);
}

// A message, a note and a fix echoing input (a plan key with a terminal
// escape, a path with a newline) show its control characters as \xNN.
TEST_F(DiagTest, TextMessagesEscapeTheControlCharactersTheyEcho)
{
    tp_diag *g = tp_diag_add(&diags_, TP_WARNING, TP_NO_SPAN, "unmatched-entry", "'%s' matches nothing",
                             "a\033[2Jb");
    tp_diag_note_at(g, TP_NO_SPAN, "from 'x\ny'");
    tp_diag_help(g, "rename '%s'", "\x7f\t");
    std::string out = text();
    EXPECT_EQ(out, "tpcc: warning: 'a\\x1b[2Jb' matches nothing [unmatched-entry]\n"
                   "note: from 'x\\x0ay'\n"
                   "fix: rename '\\x7f\\x09'\n"
                   "\n"
                   "1 warning generated.\n");
    // bytes of UTF-8 text are not control characters; U+009B (CSI) is
    tp_diag_add(&diags_, TP_NOTE, TP_NO_SPAN, "c", "caf\xc3\xa9 \xc2\x9b" "2J \xc2\xa0");
    EXPECT_NE(text().find("note: caf\xc3\xa9 \\u009b2J \xc2\xa0 [c]"), std::string::npos) << text();
}

TEST_F(DiagTest, RenderWritesToStream)
{
    add_golden();
    char *buf = nullptr;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    ASSERT_NE(out, nullptr);
    tp_diag_unit u = unit();
    tp_render_opts opts = {};
    EXPECT_EQ(tp_diags_render(&u, 1, TP_FMT_TEXT, &opts, out), 0);
    fclose(out);
    EXPECT_EQ(std::string(buf, len), text());
    free(buf);
}

TEST_F(DiagTest, RenderReportsWriteFailure)
{
    add_golden();
    FILE *full = fopen("/dev/full", "w");    // every write fails with ENOSPC (Linux)
    ASSERT_NE(full, nullptr) << "cannot open /dev/full: " << strerror(errno);
    tp_diag_unit u = unit();
    tp_render_opts opts = {};
    EXPECT_EQ(tp_diags_render(&u, 1, TP_FMT_TEXT, &opts, full), -1);
    fclose(full);
}

// ---- sorting ----

TEST_F(DiagTest, SortIsStableAndDropsDuplicates)
{
    int a = add("a.plan", "0123456789\n");
    int b = add("b.plan", "0123456789\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, b, 1, 1, 1), "c", "b1");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, a, 1, 5, 1), "c", "a5 first");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, a, 1, 2, 1), "c", "a2");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, a, 1, 5, 1), "c", "a5 second");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, a, 1, 5, 1), "c", "a5 first");   // duplicate
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, a, 1, 2, 1), "c", "a2");       // duplicate
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, a, 1, 2, 1), "c", "a2");   // other level
    tp_diag_add(&diags_, TP_ERROR, TP_NO_SPAN, "c", "global");
    EXPECT_EQ(diags_.errors, 6);
    tp_diags_sort(&diags_);
    ASSERT_EQ(diags_.count, 6);
    const char *want[] = {"global", "a2", "a2", "a5 first", "a5 second", "b1"};
    for (int i = 0; i < 6; i++)
        EXPECT_STREQ(diags_.items[i].message, want[i]) << i;
    EXPECT_EQ(diags_.items[1].level, TP_WARNING);
    EXPECT_EQ(diags_.items[2].level, TP_ERROR);
    EXPECT_EQ(diags_.errors, 5);
    EXPECT_EQ(diags_.warnings, 1);
}

// ---- JSON ----

json_t *parse(const std::string &s)
{
    json_error_t error;
    json_t *root = json_loads(s.c_str(), 0, &error);
    EXPECT_NE(root, nullptr) << error.text << " at line " << error.line;
    return root;
}

std::string keys(json_t *obj)
{
    std::string out;
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value) {
        out += out.empty() ? "" : ",";
        out += key;
    }
    return out;
}

std::string str(json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : "<not a string>";
}

TEST_F(DiagTest, Json)
{
    add_golden();
    tp_diag_add(&diags_, TP_WARNING, TP_NO_SPAN, "config", "bad \xff byte");
    std::string out = json();
    ASSERT_EQ(out.back(), '\n');
    EXPECT_EQ(out.rfind("{\n  \"version\": 1,\n  \"diagnostics\": [\n", 0), 0u);

    json_t *root = parse(out);
    ASSERT_NE(root, nullptr);
    EXPECT_EQ(keys(root), "version,diagnostics,errors,warnings,unsupported,suppressed,plans");
    EXPECT_EQ(json_integer_value(json_object_get(root, "errors")), 1);
    EXPECT_EQ(json_integer_value(json_object_get(root, "warnings")), 1);
    json_t *list = json_object_get(root, "diagnostics");
    ASSERT_EQ(json_array_size(list), 2u);

    json_t *g = json_array_get(list, 0);
    EXPECT_EQ(keys(g), "level,check,message,file,line,column,offset,length,notes,help,fixits,plan");
    EXPECT_EQ(str(json_object_get(g, "plan")), "plans/bad.plan");
    EXPECT_EQ(str(json_object_get(g, "level")), "error");
    EXPECT_EQ(str(json_object_get(g, "check")), "relabel");
    EXPECT_EQ(str(json_object_get(g, "message")), "message");
    EXPECT_EQ(str(json_object_get(g, "file")), "plans/bad.plan");
    EXPECT_EQ(json_integer_value(json_object_get(g, "line")), 12);
    EXPECT_EQ(json_integer_value(json_object_get(g, "column")), 5);
    EXPECT_EQ(json_integer_value(json_object_get(g, "offset")), 11 * 9 + 4);
    EXPECT_EQ(json_integer_value(json_object_get(g, "length")), 12);

    json_t *note = json_array_get(json_object_get(g, "notes"), 0);
    EXPECT_EQ(keys(note), "message,file,line,column");
    EXPECT_EQ(str(json_object_get(note, "file")), "models/llama.model");
    EXPECT_EQ(json_integer_value(json_object_get(note, "line")), 40);

    EXPECT_EQ(str(json_array_get(json_object_get(g, "help"), 0)),
              "write RowwiseParallel(input_layouts=Replicate())");

    json_t *fix = json_array_get(json_object_get(g, "fixits"), 0);
    EXPECT_EQ(keys(fix), "file,line,column,offset,length,replacement");
    EXPECT_EQ(json_integer_value(json_object_get(fix, "column")), 36);
    EXPECT_EQ(json_integer_value(json_object_get(fix, "length")), 0);
    EXPECT_EQ(str(json_object_get(fix, "replacement")), "input_layouts=Replicate()");

    // No location: nulls. Invalid UTF-8 is replaced, not dropped.
    json_t *w = json_array_get(list, 1);
    EXPECT_TRUE(json_is_null(json_object_get(w, "file")));
    EXPECT_TRUE(json_is_null(json_object_get(w, "line")));
    EXPECT_EQ(str(json_object_get(w, "message")), "bad \xEF\xBF\xBD byte");
    json_decref(root);
}

TEST_F(DiagTest, JsonEmpty)
{
    json_t *root = parse(json());
    ASSERT_NE(root, nullptr);
    EXPECT_EQ(json_array_size(json_object_get(root, "diagnostics")), 0u);
    EXPECT_EQ(json_integer_value(json_object_get(root, "errors")), 0);
    json_decref(root);
}

// What tpcc cannot handle yet: its own level and check, counted apart,
// "unsupported:" in text (in yellow), "unsupported" in JSON, a note of the
// rule "unsupported" in SARIF.
TEST_F(DiagTest, UnsupportedIsItsOwnLevel)
{
    int f = add("a.plan", "mesh(dp = 2, tp = 2)\n");
    tp_diag *g = tp_diag_unsupported(&diags_, span_at(&src_, f, 1, 6, 6), "x: tpcc would need y");
    EXPECT_EQ(g->level, TP_UNSUPPORTED);
    EXPECT_STREQ(g->check, "unsupported");
    EXPECT_EQ(diags_.unsupported, 1);
    EXPECT_EQ(diags_.errors + diags_.warnings, 0);
    EXPECT_EQ(text(), "a.plan:1:6: unsupported: x: tpcc would need y [unsupported]\n"
                      "    1 | mesh(dp = 2, tp = 2)\n"
                      "      |      ^~~~~~\n"
                      "\n"
                      "1 unsupported generated.\n");
    EXPECT_NE(text(1).find("\033[0;1;33munsupported: \033[0m"), std::string::npos);
    json_t *root = parse(json());
    ASSERT_NE(root, nullptr);
    EXPECT_EQ(str(json_object_get(json_array_get(json_object_get(root, "diagnostics"), 0), "level")), "unsupported");
    EXPECT_EQ(json_integer_value(json_object_get(root, "unsupported")), 1);
    EXPECT_EQ(json_integer_value(json_object_get(root, "errors")), 0);
    json_decref(root);
    root = parse(sarif());
    ASSERT_NE(root, nullptr);
    json_t *result = json_array_get(json_object_get(json_array_get(json_object_get(root, "runs"), 0), "results"), 0);
    EXPECT_EQ(str(json_object_get(result, "level")), "note");
    EXPECT_EQ(str(json_object_get(result, "ruleId")), "unsupported");
    json_decref(root);
}

// ---- SARIF ----

json_t *path(json_t *v, const std::string &dotted)
{
    std::stringstream ss(dotted);
    std::string part;
    while (v && std::getline(ss, part, '.')) {
        if (json_is_array(v))
            v = json_array_get(v, std::stoul(part));
        else
            v = json_object_get(v, part.c_str());
    }
    return v;
}

long long num(json_t *root, const std::string &dotted)
{
    json_t *v = path(root, dotted);
    EXPECT_TRUE(json_is_integer(v)) << dotted;
    return json_integer_value(v);
}

TEST_F(DiagTest, Sarif)
{
    add_golden();
    tp_diag_add(&diags_, TP_WARNING, TP_NO_SPAN, "config", "global");
    int plan = 0;
    tp_diag *g = tp_diag_add(&diags_, TP_ERROR, span_at(&src_, plan, 12, 19, 16), "relabel",
                             "again");
    tp_diag_fixit(g, span_at(&src_, plan, 12, 19, 16), "RowwiseParallel");
    tp_diag_note_at(g, TP_NO_SPAN, "no location");

    json_t *root = parse(sarif());
    ASSERT_NE(root, nullptr);
    EXPECT_EQ(str(path(root, "$schema")), "https://json.schemastore.org/sarif-2.1.0.json");
    EXPECT_EQ(str(path(root, "version")), "2.1.0");
    ASSERT_EQ(json_array_size(path(root, "runs")), 1u);
    json_t *run = path(root, "runs.0");
    EXPECT_EQ(str(path(run, "tool.driver.name")), "tpcc");
    EXPECT_TRUE(json_is_string(path(run, "tool.driver.version")));
    EXPECT_EQ(str(path(run, "tool.driver.informationUri")), "https://github.com/tpcc/tpcc");

    // Every check is a rule, described, with help and a link to its section
    // of docs/checks.md; every result points at its own rule by id and index.
    json_t *rules = path(run, "tool.driver.rules");
    ASSERT_EQ(json_array_size(rules), size_t(tp_ncheck));
    for (size_t i = 0; i < json_array_size(rules); i++) {
        json_t *rule = json_array_get(rules, i);
        std::string id = str(path(rule, "id"));
        EXPECT_EQ(id, tp_checks[i].name);
        EXPECT_TRUE(json_is_string(path(rule, "name")));
        EXPECT_TRUE(json_is_string(path(rule, "shortDescription.text"))) << id;
        EXPECT_TRUE(json_is_string(path(rule, "fullDescription.text"))) << id;
        EXPECT_TRUE(json_is_string(path(rule, "help.text"))) << id;
        EXPECT_NE(str(path(rule, "help.markdown")).find("docs/checks.md#" + id), std::string::npos) << id;
        EXPECT_EQ(str(path(rule, "helpUri")), "https://github.com/tpcc/tpcc/blob/main/docs/checks.md#" + id);
    }
    EXPECT_EQ(str(path(rules, std::to_string(tp_check_index("layout-mismatch")) + ".name")), "LayoutMismatch");
    // relative URIs are relative to %SRCROOT%, which the run resolves
    EXPECT_EQ(str(path(run, "originalUriBaseIds.%SRCROOT%.uri")), "file:///work/");
    json_t *results = path(run, "results");
    ASSERT_EQ(json_array_size(results), 3u);
    for (size_t i = 0; i < 3; i++) {
        json_t *r = json_array_get(results, i);
        size_t idx = size_t(num(r, "ruleIndex"));
        ASSERT_LT(idx, json_array_size(rules));
        EXPECT_EQ(str(path(r, "ruleId")), str(path(rules, std::to_string(idx) + ".id")));
        EXPECT_TRUE(json_is_string(path(r, "message.text")));
    }

    json_t *r0 = json_array_get(results, 0);
    EXPECT_EQ(str(path(r0, "level")), "error");
    EXPECT_EQ(str(path(r0, "message.text")), "message");
    json_t *loc = path(r0, "locations.0.physicalLocation");
    EXPECT_EQ(str(path(loc, "artifactLocation.uri")), "plans/bad.plan");
    EXPECT_EQ(str(path(loc, "artifactLocation.uriBaseId")), "%SRCROOT%");
    EXPECT_EQ(num(loc, "region.startLine"), 12);
    EXPECT_EQ(num(loc, "region.startColumn"), 5);
    EXPECT_EQ(num(loc, "region.endLine"), 12);
    EXPECT_EQ(num(loc, "region.endColumn"), 17);
    EXPECT_EQ(num(r0, "relatedLocations.0.id"), 0);
    EXPECT_EQ(str(path(r0, "relatedLocations.0.message.text")), "the producer of this value");
    EXPECT_EQ(str(path(r0, "relatedLocations.0.physicalLocation.artifactLocation.uri")),
              "models/llama.model");
    EXPECT_EQ(num(r0, "relatedLocations.0.physicalLocation.region.startLine"), 40);
    json_t *change = path(r0, "fixes.0.artifactChanges.0");
    EXPECT_EQ(str(path(change, "artifactLocation.uri")), "plans/bad.plan");
    EXPECT_EQ(num(change, "replacements.0.deletedRegion.startLine"), 12);
    EXPECT_EQ(num(change, "replacements.0.deletedRegion.startColumn"), 36);
    EXPECT_EQ(num(change, "replacements.0.deletedRegion.endColumn"), 36);   // insertion
    EXPECT_EQ(str(path(change, "replacements.0.insertedContent.text")),
              "input_layouts=Replicate()");
    EXPECT_EQ(str(path(r0, "properties.help.0")),
              "write RowwiseParallel(input_layouts=Replicate())");

    // without a location of its own, a result is located at the plan
    json_t *r1 = json_array_get(results, 1);
    EXPECT_EQ(str(path(r1, "level")), "warning");
    EXPECT_EQ(str(path(r1, "locations.0.physicalLocation.artifactLocation.uri")), "plans/bad.plan");
    EXPECT_EQ(num(r1, "locations.0.physicalLocation.region.startLine"), 1);

    json_t *r2 = json_array_get(results, 2);
    EXPECT_EQ(num(r2, "ruleIndex"), tp_check_index("relabel"));
    EXPECT_EQ(num(r2, "fixes.0.artifactChanges.0.replacements.0.deletedRegion.byteLength"), 16);
    EXPECT_EQ(path(r2, "relatedLocations.0.physicalLocation"), nullptr);
    EXPECT_EQ(str(path(r2, "relatedLocations.0.message.text")), "no location");
    json_decref(root);
}

TEST_F(DiagTest, SarifColumnsCountCodePoints)
{
    int f = add("/abs dir/é.plan", "x = \"é\" + y\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 1, 11, 1), "c", "y");   // byte col 11
    json_t *root = parse(sarif());
    ASSERT_NE(root, nullptr);
    json_t *loc = path(root, "runs.0.results.0.locations.0.physicalLocation");
    EXPECT_EQ(str(path(root, "runs.0.columnKind")), "unicodeCodePoints");
    EXPECT_EQ(num(loc, "region.startColumn"), 10);
    EXPECT_EQ(num(loc, "region.endColumn"), 11);
    EXPECT_EQ(num(loc, "region.byteOffset"), 10);
    // A URI, not a path: a file outside the root gets an absolute file://
    // URI and no uriBaseId; the rest is encoded.
    EXPECT_EQ(str(path(loc, "artifactLocation.uri")), "file:///abs%20dir/%C3%A9.plan");
    EXPECT_EQ(path(loc, "artifactLocation.uriBaseId"), nullptr);
    json_decref(root);
}

TEST_F(DiagTest, SarifUrisAreRelativeToTheRoot)
{
    add("plans/../models/m.model", "x\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, 0, 1, 1, 1), "model", "m");
    tp_diag_unit u = unit();
    auto uri_with = [&](const char *cwd, const char *root, std::string *base) {
        tp_render_opts opts = {0, cwd, root};
        json_t *doc = parse(take(tp_diags_render_sarif(&u, 1, &opts)));
        json_t *art = path(doc, "runs.0.results.0.locations.0.physicalLocation.artifactLocation");
        std::string uri = str(path(art, "uri"));
        *base = json_is_string(path(art, "uriBaseId")) ? str(path(art, "uriBaseId")) : "";
        json_decref(doc);
        return uri;
    };
    std::string base;
    EXPECT_EQ(uri_with("/work/repo", "/work/repo", &base), "models/m.model");
    EXPECT_EQ(base, "%SRCROOT%");
    EXPECT_EQ(uri_with("/work/repo", "/work", &base), "repo/models/m.model");
    EXPECT_EQ(uri_with("/work/repo", "/", &base), "work/repo/models/m.model");
    EXPECT_EQ(uri_with("/work/repo", "/work/rep", &base), "file:///work/repo/models/m.model");
    EXPECT_EQ(base, "");
}

// Two plans, one document: one run holds both plans' results, the counts
// add up, and identical findings are told apart by their occurrence.
TEST_F(DiagTest, ManyPlansOneDocument)
{
    int f = add("a.plan", "x\n");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 1, 1, 1), "repeated-gather", "w");
    tp_sources src2;
    tp_diags diags2;
    tp_sources_init(&src2);
    tp_diags_init(&diags2);
    int g = tp_sources_add(&src2, "a.plan", "\n\nx\n", 4);
    tp_diag_add(&diags2, TP_WARNING, span_at(&src2, g, 3, 1, 1), "repeated-gather", "w");
    tp_diag_add(&diags2, TP_ERROR, span_at(&src2, g, 3, 1, 1), "relabel", "e at 3:1, line 3");
    tp_diag_unit units[2] = {{"a.plan", &diags_, &src_, 0}, {"b.plan", &diags2, &src2, 1}};

    json_t *doc = parse(take(tp_diags_render_json(units, 2)));
    ASSERT_NE(doc, nullptr);
    EXPECT_EQ(json_array_size(path(doc, "diagnostics")), 3u);
    EXPECT_EQ(num(doc, "errors"), 1);
    EXPECT_EQ(num(doc, "warnings"), 2);
    EXPECT_EQ(str(path(doc, "plans.1.plan")), "b.plan");
    EXPECT_EQ(num(doc, "plans.1.status"), 1);
    EXPECT_EQ(str(path(doc, "diagnostics.2.plan")), "b.plan");
    json_decref(doc);

    // a.plan given twice: the same findings, told apart by occurrence
    tp_diag_unit twice[2] = {units[0], {"a.plan", &diags2, &src2, 1}};
    tp_render_opts opts = {0, "/work", "/work"};
    doc = parse(take(tp_diags_render_sarif(twice, 2, &opts)));
    ASSERT_NE(doc, nullptr);
    ASSERT_EQ(json_array_size(path(doc, "runs")), 1u);
    ASSERT_EQ(json_array_size(path(doc, "runs.0.results")), 3u);
    // the same warning two lines lower: the same fingerprint, a later occurrence
    std::string w1 = str(path(doc, "runs.0.results.0.partialFingerprints.tpcc/v1"));
    std::string w2 = str(path(doc, "runs.0.results.1.partialFingerprints.tpcc/v1"));
    EXPECT_EQ(w1.substr(w1.size() - 2), ":0");
    EXPECT_EQ(w2.substr(0, w2.size() - 2), w1.substr(0, w1.size() - 2));
    EXPECT_EQ(w2.substr(w2.size() - 2), ":1");
    EXPECT_TRUE(json_is_true(path(doc, "runs.0.invocations.0.executionSuccessful")));
    json_decref(doc);
    tp_diags_free(&diags2);
    tp_sources_free(&src2);
}

// The fingerprint leaves out line and column numbers, in the location and
// in the message, and folds blanks; it keeps the check, the file, the plan,
// the text pointed at and the rest of the message.
TEST_F(DiagTest, FingerprintIgnoresPositions)
{
    int f = add("a.plan", "  \"k\":   S(),\n");
    int g = add("b.plan", "\n\n\"k\": S(),\n");
    tp_diag *a = tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 1, 3, 11), "relabel", "at 1:3 (line 1) of 2048");
    tp_diag a_copy = *a;
    tp_diag *b = tp_diag_add(&diags_, TP_ERROR, span_at(&src_, g, 3, 1, 9), "relabel", "at 3:1 (line 3) of 2048");
    tp_diag b_copy = *b;
    EXPECT_EQ(tp_fingerprint(&a_copy, &src_, "p.plan", "x.plan"), tp_fingerprint(&b_copy, &src_, "p.plan", "x.plan"));
    EXPECT_NE(tp_fingerprint(&a_copy, &src_, "p.plan", "x.plan"), tp_fingerprint(&a_copy, &src_, "q.plan", "x.plan"));
    // the same model finding through two plans: two findings
    EXPECT_NE(tp_fingerprint(&a_copy, &src_, "p.plan", "x.plan"), tp_fingerprint(&a_copy, &src_, "p.plan", "y.plan"));
    tp_diag c = b_copy;
    c.message = (char *)"at 3:1 (line 3) of 4096";
    EXPECT_NE(tp_fingerprint(&b_copy, &src_, "p.plan", "x.plan"), tp_fingerprint(&c, &src_, "p.plan", "x.plan"));
    c = b_copy;
    c.check = (char *)"layout-mismatch";
    EXPECT_NE(tp_fingerprint(&b_copy, &src_, "p.plan", "x.plan"), tp_fingerprint(&c, &src_, "p.plan", "x.plan"));
}

TEST(Lint, OptionsNameKnownChecks)
{
    tp_lint l = {};
    char err[256];
    EXPECT_EQ(tp_lint_option(&l, "error", err, sizeof err), 0);
    EXPECT_TRUE(l.werror);
    EXPECT_EQ(tp_lint_option(&l, "no-repeated-gather", err, sizeof err), 0);
    EXPECT_EQ(tp_lint_option(&l, "uncovered-parameter=error", err, sizeof err), 0);
    EXPECT_EQ(tp_lint_option(&l, "uncovered-parameter=warning", err, sizeof err), 0);
    EXPECT_EQ(l.actions[tp_check_index("repeated-gather")], TP_LINT_OFF);
    EXPECT_EQ(l.actions[tp_check_index("uncovered-parameter")], TP_LINT_WARNING);   // the last wins
    EXPECT_EQ(tp_lint_option(&l, "no-repeated-gathr", err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("did you mean 'repeated-gather'"), std::string::npos) << err;
    EXPECT_EQ(tp_lint_option(&l, "relabel=fatal", err, sizeof err), -1);
    EXPECT_EQ(tp_lint_option(&l, "relabel", err, sizeof err), -1);
    tp_lint_free(&l);
}

// -W and -Werror change warnings only, and a suppressed warning stays a
// warning (it is not counted) whatever -Werror says.
TEST_F(DiagTest, LintAppliesToWarningsOnly)
{
    int f = add("a.plan", "a\nb # tpcc: ignore[repeated-gather]\nc\n");
    tp_diag_add(&diags_, TP_ERROR, span_at(&src_, f, 1, 1, 1), "relabel", "e");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 1, 1, 1), "repeated-gather", "w1");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 2, 1, 1), "repeated-gather", "w2");
    tp_diag_add(&diags_, TP_WARNING, span_at(&src_, f, 3, 1, 1), "uncovered-parameter", "w3");
    const char *comment = strchr(src_.files[f].text, '#');
    int len = int(strcspn(comment, "\n"));
    tp_lint_comment(&diags_, &src_, span_at(&src_, f, 2, 3, len), comment, len);
    ASSERT_EQ(diags_.nsupps, 1);
    EXPECT_EQ(diags_.supps[0].line, 2);               // after code: its own line
    EXPECT_STREQ(diags_.supps[0].justification, "");
    tp_lint l = {};
    char err[256];
    ASSERT_EQ(tp_lint_option(&l, "error", err, sizeof err), 0);
    ASSERT_EQ(tp_lint_option(&l, "no-relabel", err, sizeof err), 0);
    ASSERT_EQ(tp_lint_option(&l, "uncovered-parameter=warning", err, sizeof err), 0);
    tp_diags_sort(&diags_);
    tp_lint_apply(&diags_, &l);
    EXPECT_EQ(diags_.errors, 2);       // relabel stays, w1 promoted
    EXPECT_EQ(diags_.warnings, 1);     // w3 kept a warning
    EXPECT_EQ(diags_.suppressed, 1);   // w2
    EXPECT_EQ(text(),
              "a.plan:1:1: error: e [relabel]\n"
              "    1 | a\n"
              "      | ^\n"
              "\n"
              "a.plan:1:1: error: w1 [repeated-gather, -Werror]\n"
              "    1 | a\n"
              "      | ^\n"
              "\n"
              "a.plan:3:1: warning: w3 [uncovered-parameter]\n"
              "    3 | c\n"
              "      | ^\n"
              "\n"
              "2 errors, 1 warning generated.\n");
    tp_lint_free(&l);
}

// -W unsupported=error makes unsupported findings errors; -W
// no-unsupported drops them unless an output was asked for, which then
// says why it does not; -Werror leaves them alone.
TEST_F(DiagTest, LintOfUnsupported)
{
    char err[256];
    for (const char *option : {"unsupported=error", "no-unsupported", "error"}) {
        for (bool output : {false, true}) {
            SCOPED_TRACE(std::string(option) + (output ? " with an output" : ""));
            tp_diags_free(&diags_);
            tp_diags_init(&diags_);
            tp_diag_unsupported(&diags_, TP_NO_SPAN, "u");
            tp_lint l = {};
            l.output = output;
            ASSERT_EQ(tp_lint_option(&l, option, err, sizeof err), 0) << err;
            tp_lint_apply(&diags_, &l);
            if (!strcmp(option, "unsupported=error")) {
                EXPECT_EQ(diags_.errors, 1);
                EXPECT_EQ(text(), "tpcc: error: u [unsupported, -W unsupported=error]\n\n1 error generated.\n");
            } else if (!strcmp(option, "no-unsupported") && !output) {
                EXPECT_EQ(diags_.count, 0);
            } else if (!strcmp(option, "no-unsupported")) {
                EXPECT_EQ(diags_.unsupported, 1);
                EXPECT_NE(text().find("note: -W no-unsupported does not hide it here"), std::string::npos) << text();
            } else {
                EXPECT_EQ(text(), "tpcc: unsupported: u [unsupported]\n\n1 unsupported generated.\n");
            }
            tp_lint_free(&l);
        }
    }
}

// ---- fix-its ----

class DiagFixitTest : public DiagTest {
protected:
    void SetUp() override
    {
        DiagTest::SetUp();
        char tmpl[] = "/tmp/tpcc_fixit_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
    }
    void TearDown() override
    {
        DiagTest::TearDown();
        std::filesystem::remove_all(dir_);
    }
    int load(const std::string &name, const std::string &text)
    {
        std::string p = dir_ + "/" + name;
        std::ofstream(p, std::ios::binary) << text;
        char err[256];
        int id = tp_sources_load(&src_, p.c_str(), err, sizeof err);
        EXPECT_GE(id, 0) << err;
        return id;
    }
    std::string read(const std::string &name)
    {
        std::ifstream in(dir_ + "/" + name, std::ios::binary);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    }
    size_t entries()
    {
        size_t n = 0;
        for (auto &e : std::filesystem::directory_iterator(dir_)) {
            (void)e;
            n++;
        }
        return n;
    }
    int apply(int *skipped = nullptr)
    {
        err_[0] = '\0';
        return tp_diags_apply_fixits_counted(&diags_, &src_, skipped, err_, sizeof err_);
    }
    tp_diag *diag() { return tp_diag_add(&diags_, TP_ERROR, TP_NO_SPAN, "c", "m"); }

    std::string dir_;
    char err_[512];
};

TEST_F(DiagFixitTest, InsertAndReplace)
{
    int f = load("a.plan", "a = 1\nb = 2\n");
    ASSERT_EQ(chmod((dir_ + "/a.plan").c_str(), 0640), 0);
    tp_diag *g = diag();
    tp_diag_fixit(g, span_at(&src_, f, 1, 5, 1), "10");
    tp_diag_fixit(g, span_at(&src_, f, 2, 1, 0), "# c\n");
    int skipped = -1;
    EXPECT_EQ(apply(&skipped), 2) << err_;
    EXPECT_EQ(skipped, 0);
    EXPECT_EQ(read("a.plan"), "a = 10\n# c\nb = 2\n");
    struct stat st;
    ASSERT_EQ(stat((dir_ + "/a.plan").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u);
    EXPECT_EQ(entries(), 1u);   // no temporary file left
}

TEST_F(DiagFixitTest, EditsInProposalOrderAcrossDiagnostics)
{
    int f = load("a.plan", "abcdef");
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 5, 2), "EF");
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 1, 1), "A");
    EXPECT_EQ(tp_diags_apply_fixits(&diags_, &src_, err_, sizeof err_), 2) << err_;
    EXPECT_EQ(read("a.plan"), "AbcdEF");
}

TEST_F(DiagFixitTest, OverlappingEditsAreAllSkipped)
{
    int f = load("a.plan", "0123456789");
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 3, 4), "X");    // 2..5
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 5, 2), "Y");    // 4..5 overlaps: both skipped
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 3, 0), "Z");    // insert at X's start: skipped too
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 7, 0), "W");    // insert at X's and Y's end: fine
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 10, 1), "N");   // apart from all: fine
    int skipped = -1;
    EXPECT_EQ(apply(&skipped), 2) << err_;
    EXPECT_EQ(skipped, 3);
    EXPECT_EQ(read("a.plan"), "012345W678N");
}

// Two edits that create the same thing (two keys renamed to one new key):
// neither is applied, and the status says why.
TEST_F(DiagFixitTest, EditsClaimingTheSameKeyAreBothSkipped)
{
    int f = load("a.plan", "\"w11\": A,\n\"w1x\": B,\n\"w22\": C,\n");
    tp_diag_fixit_claim(diag(), span_at(&src_, f, 1, 1, 5), "\"w1\"", "layers.*.w1");
    tp_diag_fixit_claim(diag(), span_at(&src_, f, 2, 1, 5), "\"w1\"", "layers.*.w1");
    tp_diag_fixit_claim(diag(), span_at(&src_, f, 3, 1, 5), "\"w2\"", "layers.*.w2");
    tp_fix_status st[3] = {TP_FIX_APPLIED, TP_FIX_APPLIED, TP_FIX_APPLIED};
    EXPECT_EQ(tp_diags_apply_safe_fixits(&diags_, &src_, -1, st, err_, sizeof err_), 1) << err_;
    EXPECT_EQ(st[0], TP_FIX_CLAIMED);
    EXPECT_EQ(st[1], TP_FIX_CLAIMED);
    EXPECT_EQ(st[2], TP_FIX_APPLIED);
    EXPECT_EQ(read("a.plan"), "\"w11\": A,\n\"w1x\": B,\n\"w2\": C,\n");
}

// A diagnostic's fix is whole or not made; deferred fix-its are left out
// and collide with nothing; only the writable file is edited.
TEST_F(DiagFixitTest, WholeFixesDeferredAndWritable)
{
    int f = load("a.plan", "0123456789");
    int g = load("b.model", "abc");
    tp_diag *d1 = diag();
    tp_diag_fixit(d1, span_at(&src_, f, 1, 1, 1), "A");        // fine alone ...
    tp_diag_fixit(d1, span_at(&src_, f, 1, 5, 1), "E");        // ... but this overlaps the next
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 5, 2), "F");
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 8, 1), "D");    // deferred by the caller
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 8, 1), "H");    // would overlap D, which is out
    tp_diag_fixit(diag(), span_at(&src_, g, 1, 1, 1), "M");    // the model: never written
    tp_fix_status st[6] = {TP_FIX_APPLIED, TP_FIX_APPLIED, TP_FIX_APPLIED, TP_FIX_DEFERRED,
                           TP_FIX_APPLIED, TP_FIX_APPLIED};
    EXPECT_EQ(tp_diags_apply_safe_fixits(&diags_, &src_, f, st, err_, sizeof err_), 1) << err_;
    EXPECT_EQ(st[0], TP_FIX_WITH_OTHER);
    EXPECT_EQ(st[1], TP_FIX_OVERLAP);
    EXPECT_EQ(st[2], TP_FIX_OVERLAP);
    EXPECT_EQ(st[3], TP_FIX_DEFERRED);
    EXPECT_EQ(st[4], TP_FIX_APPLIED);
    EXPECT_EQ(st[5], TP_FIX_NOT_WRITABLE);
    EXPECT_EQ(read("a.plan"), "0123456H89");
    EXPECT_EQ(read("b.model"), "abc");
}

TEST_F(DiagFixitTest, DuplicateEditAppliedOnce)
{
    int f = load("a.plan", "f(x)\n");
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 3, 0), "y, ");
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 3, 0), "y, ");
    int skipped = -1;
    EXPECT_EQ(apply(&skipped), 1) << err_;
    EXPECT_EQ(skipped, 0);
    EXPECT_EQ(read("a.plan"), "f(y, x)\n");
}

TEST_F(DiagFixitTest, NoFixitsTouchesNothing)
{
    load("a.plan", "x\n");
    diag();
    EXPECT_EQ(apply(), 0);
    EXPECT_EQ(read("a.plan"), "x\n");
}

TEST_F(DiagFixitTest, SymlinkTargetIsEdited)
{
    load("real.plan", "x\n");
    ASSERT_EQ(symlink("real.plan", (dir_ + "/link.plan").c_str()), 0);
    int f = tp_sources_load(&src_, (dir_ + "/link.plan").c_str(), err_, sizeof err_);
    ASSERT_GE(f, 0) << err_;
    tp_diag_fixit(diag(), span_at(&src_, f, 1, 1, 0), "y");
    EXPECT_EQ(apply(), 1) << err_;
    EXPECT_TRUE(std::filesystem::is_symlink(dir_ + "/link.plan"));
    EXPECT_EQ(read("real.plan"), "yx\n");
}

TEST_F(DiagFixitTest, SameFileUnderTwoNamesIsRefused)
{
    int real = load("real.plan", "x\n");
    ASSERT_EQ(symlink("real.plan", (dir_ + "/link.plan").c_str()), 0);
    int link = tp_sources_load(&src_, (dir_ + "/link.plan").c_str(), err_, sizeof err_);
    ASSERT_GE(link, 0) << err_;
    tp_diag_fixit(diag(), span_at(&src_, real, 1, 1, 0), "a");
    tp_diag_fixit(diag(), span_at(&src_, link, 1, 2, 0), "b");
    EXPECT_EQ(apply(), -1);
    EXPECT_NE(std::string(err_).find("same file"), std::string::npos) << err_;
    EXPECT_EQ(read("real.plan"), "x\n");
    EXPECT_EQ(entries(), 2u);
}

TEST_F(DiagFixitTest, FailureLeavesEverythingUntouched)
{
    int good = load("a.plan", "a\n");
    std::string missing = dir_ + "/no-such-dir/b.plan";
    int bad = tp_sources_add(&src_, missing.c_str(), "b\n", 2);
    tp_diag_fixit(diag(), span_at(&src_, good, 1, 1, 1), "A");
    tp_diag_fixit(diag(), span_at(&src_, bad, 1, 1, 1), "B");
    EXPECT_EQ(apply(), -1);
    EXPECT_NE(std::string(err_).find("no-such-dir/b.plan"), std::string::npos) << err_;
    // The file that could be written was not, and no temporary remains.
    EXPECT_EQ(read("a.plan"), "a\n");
    EXPECT_EQ(entries(), 1u);
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/no-such-dir"));
}

TEST_F(DiagFixitTest, FixitOutsideFileIsAnError)
{
    int f = load("a.plan", "abc");
    tp_span sp = {f, 1, 3, 2, 5};   // runs past the end of the file
    tp_diag_fixit(diag(), sp, "x");
    EXPECT_EQ(apply(), -1);
    EXPECT_NE(std::string(err_).find("outside"), std::string::npos) << err_;
    EXPECT_EQ(read("a.plan"), "abc");
}

}  // namespace
