// Tests for compiler/diag/source.c: loading files, line lookup, span joining.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "compiler/diag/source.h"
}

namespace {

// A fresh directory under /tmp, removed with everything in it.
class SourceTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        char tmpl[] = "/tmp/tpcc_source_XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        tp_sources_init(&src_);
    }
    void TearDown() override
    {
        tp_sources_free(&src_);
        std::filesystem::remove_all(dir_);
    }
    std::string write(const std::string &name, const std::string &text)
    {
        std::string path = dir_ + "/" + name;
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }
    int load(const std::string &path)
    {
        err_[0] = '\0';
        return tp_sources_load(&src_, path.c_str(), err_, sizeof err_);
    }

    std::string dir_;
    tp_sources src_;
    char err_[512];
};

TEST_F(SourceTest, LoadsWholeFile)
{
    std::string path = write("a.plan", "mesh(tp = 2)\n");
    int id = load(path);
    ASSERT_EQ(id, 0) << err_;
    EXPECT_EQ(std::string(src_.files[id].path), path);
    EXPECT_EQ(std::string(src_.files[id].text), "mesh(tp = 2)\n");
    EXPECT_EQ(src_.files[id].size, 13u);
}

TEST_F(SourceTest, LoadsEmptyFile)
{
    int id = load(write("empty.plan", ""));
    ASSERT_EQ(id, 0) << err_;
    EXPECT_EQ(src_.files[id].size, 0u);
    EXPECT_STREQ(src_.files[id].text, "");
}

TEST_F(SourceTest, MissingFile)
{
    std::string path = dir_ + "/x.plan";
    EXPECT_EQ(load(path), -1);
    EXPECT_EQ(std::string(err_), "cannot open '" + path + "': No such file or directory");
    EXPECT_EQ(src_.count, 0);
}

TEST_F(SourceTest, Directory)
{
    EXPECT_EQ(load(dir_), -1);
    EXPECT_EQ(std::string(err_), "'" + dir_ + "' is a directory");
}

TEST_F(SourceTest, NulByte)
{
    std::string path = write("bin.plan", std::string("abc\0def", 7));
    EXPECT_EQ(load(path), -1);
    EXPECT_EQ(std::string(err_), "'" + path + "' is not a text file (NUL byte at offset 3)");
    EXPECT_EQ(src_.count, 0);
}

TEST_F(SourceTest, TooLarge)
{
    std::string path = write("huge.plan", "");
    ASSERT_EQ(truncate(path.c_str(), (16 << 20) + 1), 0);
    EXPECT_EQ(load(path), -1);
    EXPECT_NE(std::string(err_).find("file too large"), std::string::npos) << err_;
}

TEST_F(SourceTest, SamePathTwiceGivesSameId)
{
    std::string path = write("a.plan", "x\n");
    int first = load(path);
    ASSERT_GE(first, 0) << err_;
    write("b.plan", "y\n");
    int other = load(dir_ + "/b.plan");
    EXPECT_NE(other, first);
    // "./" segments and doubled slashes name the same file.
    EXPECT_EQ(load(dir_ + "/./a.plan"), first);
    EXPECT_EQ(load(dir_ + "//a.plan"), first);
    EXPECT_EQ(src_.count, 2);
}

TEST_F(SourceTest, ErrorBufferMayBeNull)
{
    EXPECT_EQ(tp_sources_load(&src_, (dir_ + "/none").c_str(), nullptr, 0), -1);
}

TEST_F(SourceTest, AddCopiesBuffer)
{
    std::string text = "a = 1";
    int id = tp_sources_add(&src_, "<memory>", text.data(), text.size());
    text[0] = 'b';
    EXPECT_STREQ(src_.files[id].text, "a = 1");
    EXPECT_EQ(src_.files[id].size, 5u);
}

TEST_F(SourceTest, Lines)
{
    const char *text = "first\nsecond\r\n\nlast";
    int id = tp_sources_add(&src_, "t.plan", text, strlen(text));
    const char *start;
    int len;
    auto line = [&](int n) {
        return tp_source_line(&src_, id, n, &start, &len) ? std::string(start, len)
                                                           : std::string("<none>");
    };
    EXPECT_EQ(line(1), "first");
    EXPECT_EQ(line(2), "second");   // the \r of CRLF is not part of the line
    EXPECT_EQ(line(3), "");
    EXPECT_EQ(line(4), "last");
    EXPECT_EQ(line(5), "<none>");
    EXPECT_EQ(line(0), "<none>");
    EXPECT_EQ(tp_source_line(&src_, 7, 1, &start, &len), 0);
    EXPECT_EQ(tp_source_line(&src_, -1, 1, &start, &len), 0);
}

TEST_F(SourceTest, LineAfterFinalNewlineIsEmpty)
{
    // The lexer reports end-of-file errors there.
    int id = tp_sources_add(&src_, "t.plan", "x\n", 2);
    const char *start;
    int len = -1;
    ASSERT_EQ(tp_source_line(&src_, id, 2, &start, &len), 1);
    EXPECT_EQ(len, 0);
    EXPECT_EQ(tp_source_line(&src_, id, 3, &start, &len), 0);
}

TEST(SourceSpan, JoinCoversBoth)
{
    tp_span a = {0, 2, 3, 10, 4};
    tp_span b = {0, 3, 1, 20, 5};
    tp_span j = tp_span_join(a, b);
    EXPECT_EQ(j.file, 0);
    EXPECT_EQ(j.line, 2);
    EXPECT_EQ(j.col, 3);
    EXPECT_EQ(j.offset, 10);
    EXPECT_EQ(j.length, 15);
    // Order does not matter, and a span inside another changes nothing.
    tp_span k = tp_span_join(b, a);
    EXPECT_EQ(k.offset, 10);
    EXPECT_EQ(k.length, 15);
    tp_span inner = {0, 2, 4, 11, 1};
    EXPECT_EQ(tp_span_join(a, inner).length, 4);
}

TEST(SourceSpan, JoinWithNoSpan)
{
    tp_span a = {1, 1, 1, 0, 3};
    EXPECT_EQ(tp_span_join(TP_NO_SPAN, a).file, 1);
    EXPECT_EQ(tp_span_join(a, TP_NO_SPAN).length, 3);
}

}  // namespace

// tp_path_tidy / tp_path_relative_to: how a plan's model path is shown.
TEST(SourcePath, TidyDropsDotsAndParentPairs)
{
    const char *cases[][2] = {
        {"plans/../models/llama.model", "models/llama.model"},
        {"a/b/../../x.model", "x.model"},
        {"./a/./b", "a/b"},
        {"../../m", "../../m"},           // nothing to cancel: kept
        {"a/../../m", "../m"},
        {"/abs/p/../m", "/abs/m"},
        {"/..", "/"},
        {"x/..", "."},
        {"a//b/", "a/b"},
        {".", "."},
        {"", "."},
    };
    for (auto &c : cases) {
        char *t = tp_path_tidy(c[0]);
        EXPECT_STREQ(t, c[1]) << c[0];
        free(t);
    }
}

TEST(SourcePath, RelativeToThePlansDirectory)
{
    char *r = tp_path_relative_to("tests/bad/x.plan", "../../models/llama.model");
    EXPECT_STREQ(r, "models/llama.model");
    free(r);
    r = tp_path_relative_to("x.plan", "models/a.model");
    EXPECT_STREQ(r, "models/a.model");
    free(r);
    r = tp_path_relative_to("plans/x.plan", "/opt/m.model");
    EXPECT_STREQ(r, "/opt/m.model");
    free(r);
}
