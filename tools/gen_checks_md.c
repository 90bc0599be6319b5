/* gen_checks_md.c: writes docs/checks.md, the reference of every check,
 * from compiler/diag/checks.def: a table of the checks, then one section
 * per check, anchored by its name (SARIF's helpUri points there).
 *
 *   gen_checks_md [OUT]      the page to OUT, or to stdout
 *
 * Built by CMake (tests/CMakeLists.txt); `cmake --build build --target
 * checks_md` rewrites docs/checks.md, and Docs.ChecksPageIsGenerated fails
 * when the committed page is not what this program writes. It reads only
 * the table, so it needs none of the compiler's libraries. */
#include <stdio.h>
#include <string.h>

typedef struct check_doc {
    const char *name, *level, *short_desc, *full_desc, *help, *what, *example;
} check_doc;

/* TP_ERROR, TP_WARNING, TP_UNSUPPORTED -> "error", "warning", "unsupported" */
#define TP_LEVEL_NAME(level)                           \
    (strcmp(#level, "TP_WARNING") == 0       ? "warning" \
     : strcmp(#level, "TP_UNSUPPORTED") == 0 ? "unsupported" \
                                             : "error")

static const check_doc checks[] = {
#define TP_CHECK(name, level, short_desc, full_desc, help, what, example) \
    {name, TP_LEVEL_NAME(level), short_desc, full_desc, help, what, example},
#include "compiler/diag/checks.def"
#undef TP_CHECK
};

static const char intro[] =
    "<!-- Generated from compiler/diag/checks.def by tools/gen_checks_md.c:\n"
    "     edit the table, then `cmake --build build --target checks_md`. -->\n"
    "# The checks\n"
    "\n"
    "Every finding names its check, points at the plan entry (and notes the model\n"
    "locations involved), shows the layouts, and says how to fix it; where the fix\n"
    "is an edit of the plan, `--fix` applies it ([the command line](cli.md)). A\n"
    "finding repeated in every layer is reported once with \"the same happens in 31\n"
    "more modules\". Each check has a bad plan in [`tests/bad/`](../tests/bad) with\n"
    "its expected diagnostics written next to the offending line; the `--hf-config`\n"
    "checks have config.json fixtures in [`tests/fixtures/`](../tests/fixtures),\n"
    "tested in `tests/driver/test_cli.cc`.\n"
    "\n"
    "A check's level is the most serious level its findings have: an **error**\n"
    "means PyTorch raises, or computes something other than the model, and no\n"
    "option or comment hides it; only **warnings** can be silenced (`-W no-CHECK`,\n"
    "`# tpcc: ignore[CHECK]`) or promoted (`-Werror`, `-W CHECK=error`), as\n"
    "[Lint in CI](lint.md) describes. What tpcc cannot handle yet is not an\n"
    "error but its own level and check, [`unsupported`](#unsupported): the plan\n"
    "may be right, `--check` exits 0, and an output that cannot be made exits 3.\n"
    "SARIF's rules carry each check's\n"
    "descriptions and help, and their `helpUri` is the check's section here.\n"
    "\n"
    "| check | level | what |\n"
    "|---|---|---|\n";

static void paragraph(FILE *out, const char *label, const char *text)
{
    if (!text[0])
        return;
    if (label)
        fprintf(out, "\n**%s** %s\n", label, text);
    else
        fprintf(out, "\n%s\n", text);
}

int main(int argc, char **argv)
{
    FILE *out = stdout;
    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: gen_checks_md [OUT]\n");
        return 2;
    }
    if (argc == 2 && !(out = fopen(argv[1], "w"))) {
        perror(argv[1]);
        return 1;
    }
    int n = (int)(sizeof checks / sizeof checks[0]);
    fputs(intro, out);
    for (int i = 0; i < n; i++)
        fprintf(out, "| [`%s`](#%s) | %s | %s |\n", checks[i].name, checks[i].name, checks[i].level,
                checks[i].short_desc);
    for (int i = 0; i < n; i++) {
        const check_doc *c = &checks[i];
        fprintf(out, "\n## %s\n\n**%s**: %s.\n", c->name, c->level, c->short_desc);
        paragraph(out, NULL, c->full_desc);
        paragraph(out, "What it catches:", c->what);
        paragraph(out, "Example:", c->example);
        paragraph(out, "Fix:", c->help);
    }
    if (fflush(out) != 0 || (out != stdout && fclose(out) != 0)) {
        perror(argc == 2 ? argv[1] : "stdout");
        return 1;
    }
    return 0;
}
