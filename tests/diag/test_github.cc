// GitHub Actions' workflow commands (compiler/diag/github.c): one line per
// finding, with what ends a message or a property escaped as GitHub
// documents, notes and fixes folded into the message, paths relative to
// the working directory. The whole output is golden in test_lint.cc.
#include <gtest/gtest.h>

#include <string>

#include <stdlib.h>

extern "C" {
#include "compiler/diag/diag.h"
#include "compiler/diag/source.h"
}

namespace {

std::string render(const tp_diags *d, const tp_sources *src, const char *plan, const char *cwd)
{
    tp_diag_unit u = {plan, d, src, 1};
    char *s = tp_diags_render_github(&u, cwd);
    std::string out(s);
    free(s);
    return out;
}

TEST(DiagGithub, EscapesMessagesAndProperties)
{
    tp_sources src;
    tp_diags d;
    tp_sources_init(&src);
    tp_diags_init(&d);
    const std::string text = "model \"x\"\n  \"a\": Colwise(),\n";
    int f = tp_sources_add(&src, "/work/p,q:r%.plan", text.data(), text.size());
    tp_span entry = {f, 2, 3, 12, 3};
    tp_diag *g = tp_diag_add(&d, TP_ERROR, entry, "relabel", "100%% sure\r\nit is wrong");
    tp_diag_note_at(g, tp_span{f, 1, 1, 0, 5}, "the model");
    tp_diag_help(g, "write it, so");
    tp_diag_add(&d, TP_WARNING, tp_span{f, 1, 7, 6, 5}, "repeated-gather", "across\na line");
    tp_diag_add(&d, TP_ERROR, TP_NO_SPAN, "config", "-D tp=x: not a number");
    tp_diag *silenced = tp_diag_add(&d, TP_WARNING, entry, "repeated-gather", "silenced");
    silenced->suppression = 1;
    EXPECT_EQ(render(&d, &src, "/work/p,q:r%.plan", "/work"),
              "::error file=p%2Cq%3Ar%25.plan,line=2,col=3,endColumn=6,title=tpcc (relabel)::100%25 sure%0D%0Ait is "
              "wrong%0Anote: p,q:r%25.plan:1:1: the model%0Afix: write it, so\n"
              "::warning file=p%2Cq%3Ar%25.plan,line=1,col=7,title=tpcc (repeated-gather)::across%0Aa line\n"
              "::error file=p%2Cq%3Ar%25.plan,title=tpcc (config)::-D tp=x: not a number\n");
    // outside the working directory: the path as it is
    EXPECT_EQ(render(&d, &src, "/work/p,q:r%.plan", "/elsewhere").rfind("::error file=/work/p%2Cq%3Ar%25.plan,", 0),
              0u);
    tp_diags_free(&d);
    tp_sources_free(&src);
}

// What tpcc cannot handle yet fails no plan: a notice, not an error.
TEST(DiagGithub, UnsupportedIsANotice)
{
    tp_sources src;
    tp_diags d;
    tp_sources_init(&src);
    tp_diags_init(&d);
    const std::string text = "mesh(dp = 2)\n";
    int f = tp_sources_add(&src, "/work/x.plan", text.data(), text.size());
    tp_diag_add(&d, TP_UNSUPPORTED, tp_span{f, 1, 1, 0, 12}, "unsupported", "not yet");
    EXPECT_EQ(render(&d, &src, "/work/x.plan", "/work"),
              "::notice file=x.plan,line=1,col=1,endColumn=13,title=tpcc (unsupported)::not yet\n");
    tp_diags_free(&d);
    tp_sources_free(&src);
}

}  // namespace
