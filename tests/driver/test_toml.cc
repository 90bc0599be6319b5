// The TOML reader of the settings files (compiler/driver/toml.c): TOML
// 1.0's syntax, so that any pyproject.toml reads; every refusal with its
// line and column; nothing an input holds can crash it (tests/fuzz/
// fuzz_toml.c fuzzes it).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

extern "C" {
#include "compiler/driver/toml.h"
}

namespace {

struct Doc {
    tp_toml *root = nullptr;
    char err[512] = "";
    explicit Doc(const std::string &text) { root = tp_toml_parse(text.data(), text.size(), err, sizeof err); }
    ~Doc() { tp_toml_free(root); }
    // the value at a dotted path of plain keys
    const tp_toml *at(const std::string &dotted) const
    {
        const tp_toml *v = root;
        size_t start = 0;
        while (v) {
            size_t dot = dotted.find('.', start);
            v = tp_toml_get(v, dotted.substr(start, dot == std::string::npos ? std::string::npos : dot - start).c_str());
            if (dot == std::string::npos)
                break;
            start = dot + 1;
        }
        return v;
    }
};

std::string str(const tp_toml *v)
{
    return v && v->kind == TP_TOML_STRING ? v->string : "<not a string>";
}

// A pyproject.toml as projects write them: other tools' tables, arrays of
// inline tables, arrays of tables, multi-line strings and arrays, comments.
TEST(Toml, ReadsAPyprojectWithOtherToolsTables)
{
    Doc d(R"(# a project
[build-system]
requires = ["setuptools>=61", 'wheel']
build-backend = "setuptools.build_meta"

[project]
name = "demo"
authors = [{name = "A. Person", email = "a@example.org"}]
description = """
Two lines, \
  joined; "quoted" and ""doubled"".""""
license.text = 'MIT'
dependencies = [
    "numpy >= 1.24",   # a comment inside an array
    "torch",
]

[[tool.mypy.overrides]]
module = "x.*"
ignore_missing_imports = true

[[tool.mypy.overrides]]
module = "y"

[tool.tpcc]
werror = true
defines = { tp = 8, seq = 4_096, eps = 1e-5, neg = -0.5, hexa = 0xff, name = "llama" }
warnings = {"repeated-gather" = "error"}
"quoted key".inner = +inf
)");
    ASSERT_TRUE(d.root) << d.err;
    EXPECT_EQ(str(d.at("project.name")), "demo");
    EXPECT_EQ(str(d.at("project.description")), "Two lines, joined; \"quoted\" and \"\"doubled\"\".\"");
    EXPECT_EQ(str(d.at("project.license.text")), "MIT");
    ASSERT_EQ(d.at("project.dependencies")->count, 2);
    EXPECT_EQ(str(d.at("project.dependencies")->items[1]), "torch");
    EXPECT_EQ(str(tp_toml_get(d.at("project.authors")->items[0], "email")), "a@example.org");
    const tp_toml *overrides = d.at("tool.mypy.overrides");
    ASSERT_EQ(overrides->kind, TP_TOML_ARRAY);
    ASSERT_EQ(overrides->count, 2);
    EXPECT_EQ(str(tp_toml_get(overrides->items[1], "module")), "y");
    EXPECT_TRUE(d.at("tool.tpcc.werror")->boolean);
    EXPECT_EQ(d.at("tool.tpcc.defines.seq")->integer, 4096);
    EXPECT_EQ(d.at("tool.tpcc.defines.hexa")->integer, 255);
    EXPECT_EQ(d.at("tool.tpcc.defines.eps")->kind, TP_TOML_FLOAT);
    EXPECT_DOUBLE_EQ(d.at("tool.tpcc.defines.eps")->real, 1e-5);
    EXPECT_DOUBLE_EQ(d.at("tool.tpcc.defines.neg")->real, -0.5);
    EXPECT_EQ(str(d.at("tool.tpcc.warnings.repeated-gather")), "error");
    const tp_toml *inner = tp_toml_get(d.at("tool.tpcc"), "quoted key");
    ASSERT_TRUE(inner);
    EXPECT_TRUE(std::isinf(tp_toml_get(inner, "inner")->real));
    // where a key is, for messages
    const tp_toml *werror = d.at("tool.tpcc.werror");
    EXPECT_EQ(werror->key_line, 26);
    EXPECT_EQ(werror->key_col, 1);
    EXPECT_EQ(werror->col, 10);
}

TEST(Toml, StringEscapesAndLiterals)
{
    Doc d("a = \"tab\\there \\u00e9 \\U0001F600 \\\\ \\\"\"\nb = 'C:\\path\\no\\escapes'\n"
          "c = '''\nfirst line dropped\n'''\nd = \"\"\nkey-with-dash_and_1 = 1\n");
    ASSERT_TRUE(d.root) << d.err;
    EXPECT_EQ(str(d.at("a")), "tab\there \xC3\xA9 \xF0\x9F\x98\x80 \\ \"");
    EXPECT_EQ(str(d.at("b")), "C:\\path\\no\\escapes");
    EXPECT_EQ(str(d.at("c")), "first line dropped\n");
    EXPECT_EQ(str(d.at("d")), "");
    EXPECT_EQ(d.at("key-with-dash_and_1")->integer, 1);
}

// Each refusal says where, as LINE:COL, and what.
TEST(Toml, RefusalsSayLineAndColumn)
{
    struct {
        const char *text, *says;
    } cases[] = {
        {"a = 1\na = 2\n", "2:1: 'a' is set twice (first on line 1)"},
        {"[t]\nx = 1\n[t]\n", "3:1: 't' is defined already (line 1)"},
        {"a = 1\n[a]\n", "2:1: 'a' is an integer (line 1), not a table"},
        {"a = 1\n[a.b]\n", "2:2: 'a' is an integer (line 1), not a table that can be added to"},
        {"a = [1]\n[[a]]\n", "2:1: 'a' is an array (line 1), not a table"},
        {"t = {x = 1}\n[t.y]\n", "2:2: 't' is an inline table (line 1), not a table that can be added to"},
        {"a = \"open\n", "1:5: the string is not closed on its line"},
        {"a = \"\"\"never closed\n", "1:5: the string that opens here is not closed"},
        {"a = \"\\q\"\n", "1:6: '\\q' is not an escape"},
        {"a = \"\\uD800\"\n", "1:6: \\uD800 is not a character a setting can hold"},
        {"a = \"\\u0000\"\n", "1:6: \\u0000 is not a character"},
        {"a = 1979-05-27\n", "1:5: dates and times are not values tpcc reads"},
        {"a = 07:32:00\n", "1:5: dates and times are not values tpcc reads"},
        {"a = bare\n", "1:5: 'bare' is not a value"},
        {"a = 012\n", "1:5: '012' is not a value"},
        {"a = 1__0\n", "1:5: '1__0' is not a value"},
        {"a = 99999999999999999999\n", "1:5: 99999999999999999999 does not fit in 64 bits"},
        {"a = [1, 2\n", "2:1: expected ',' or ']' after an element of the array opened on line 1"},
        {"a = {x = 1,}\n", "1:12: a ',' before '}'"},
        {"a = {x = 1\n", "1:11: expected ',' or '}' in the inline table"},
        {"a = 1 b = 2\n", "1:7: expected the end of the line after the value, found 'b'"},
        {"= 1\n", "1:1: expected a key"},
        {"a 1\n", "1:3: expected '=' after the key 'a'"},
        {"[a\n", "1:3: expected ']' to close the header"},
        {"a = \"x\x01y\"\n", "1:7: a control character (0x01) in a string"},
        {"# ok\nb = \"\xff\"\n", "2:6: a byte that is not UTF-8"},
        {"a = tru\n", "1:5: 'tru' is not a value"},
        {"a =\n", "1:4: expected a value"},
    };
    for (const auto &k : cases) {
        SCOPED_TRACE(k.text);
        Doc d(k.text);
        EXPECT_EQ(d.root, nullptr);
        EXPECT_EQ(std::string(d.err).rfind(k.says, 0), 0u) << d.err;
    }
    // a NUL byte anywhere
    std::string nul("a = 1\nb = \"x", 12);
    nul += std::string(1, '\0') + "\"\n";
    Doc d(nul);
    EXPECT_EQ(d.root, nullptr);
    EXPECT_EQ(std::string(d.err), "2:7: a NUL byte");
}

// Nesting is bounded, so no input exhausts the stack; so is a dotted key.
TEST(Toml, DeepNestingIsRefused)
{
    std::string deep = "a = " + std::string(100000, '[') + "\n";
    Doc arrays(deep);
    EXPECT_EQ(arrays.root, nullptr);
    EXPECT_NE(std::string(arrays.err).find("nested more than 64 deep"), std::string::npos) << arrays.err;
    std::string key = "a";
    for (int i = 0; i < 100; i++)
        key += ".a";
    Doc dotted(key + " = 1\n");
    EXPECT_EQ(dotted.root, nullptr);
    EXPECT_NE(std::string(dotted.err).find("a key of more than 64 parts"), std::string::npos) << dotted.err;
    std::string ok = "a = " + std::string(60, '[') + std::string(60, ']') + "\n";
    Doc fine(ok);
    EXPECT_TRUE(fine.root) << fine.err;
}

// Many keys in one table: looked up by a map, not scanned.
TEST(Toml, ManyKeysReadInLinearTime)
{
    std::string text = "[t]\n";
    for (int i = 0; i < 200000; i++)
        text += "k" + std::to_string(i) + " = " + std::to_string(i) + "\n";
    Doc d(text);
    ASSERT_TRUE(d.root) << d.err;
    EXPECT_EQ(d.at("t.k199999")->integer, 199999);
}

}  // namespace
