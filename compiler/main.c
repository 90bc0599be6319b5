/* main.c: the tpcc command line. The only place that exits. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compile.h"
#include "xalloc.h"

static const char usage[] =
    "usage: tpcc [options] --check PLAN...\n"
    "       tpcc [options] --explain PLAN\n"
    "\n"
    "Check tensor-parallel plans (PyTorch parallelize_module semantics) before launch.\n"
    "\n"
    "  --check PLAN...            check each plan; report every layout error (lint)\n"
    "  --explain PLAN             print the placement, DTensor or plain, of every value at\n"
    "                             every module boundary, and the collectives of a forward pass\n"
    "  -D name=value              override a configuration value (tp, seq, hidden, ...)\n"
    "  --hf-config FILE           read sizes from a Hugging Face config.json\n"
    "  --fix                      apply the machine-applicable fixes to the plan files\n"
    "  --diagnostics-format=FMT   text (default), json or sarif (SARIF 2.1.0)\n"
    "  --color=WHEN               auto (default), always or never\n"
    "  -h, --help                 show this help\n"
    "  --version                  show the version\n"
    "\n"
    "Exit status: 0 when no plan has errors (warnings allowed), 1 when a plan has\n"
    "errors, 2 for usage errors and unreadable files.\n"
    "Documentation: README.md (the language, every check with an example).\n";

enum { OPT_CHECK = 256, OPT_EXPLAIN, OPT_HF, OPT_FIX, OPT_FORMAT, OPT_COLOR, OPT_VERSION };

typedef struct cli {
    bool check, explain, fix;
    const char **defines; int ndefines;
    const char *hf;
    tp_diag_format format;
    int color;                  /* -1 auto */
} cli;

static int parse_args(cli *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"check", no_argument, 0, OPT_CHECK},
        {"explain", no_argument, 0, OPT_EXPLAIN},
        {"hf-config", required_argument, 0, OPT_HF},
        {"fix", no_argument, 0, OPT_FIX},
        {"diagnostics-format", required_argument, 0, OPT_FORMAT},
        {"color", required_argument, 0, OPT_COLOR},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {0, 0, 0, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hD:", longs, NULL)) != -1) {
        switch (c) {
        case OPT_CHECK: o->check = true; break;
        case OPT_EXPLAIN: o->explain = true; break;
        case OPT_HF: o->hf = optarg; break;
        case OPT_FIX: o->fix = true; break;
        case 'D':
            o->defines = tp_xrealloc(o->defines, (size_t)(o->ndefines + 1) * sizeof *o->defines);
            o->defines[o->ndefines++] = optarg;
            break;
        case OPT_FORMAT:
            if (!strcmp(optarg, "text")) o->format = TP_FMT_TEXT;
            else if (!strcmp(optarg, "json")) o->format = TP_FMT_JSON;
            else if (!strcmp(optarg, "sarif")) o->format = TP_FMT_SARIF;
            else { fprintf(stderr, "tpcc: --diagnostics-format must be text, json or sarif, not '%s'\n", optarg); return -1; }
            break;
        case OPT_COLOR:
            if (!strcmp(optarg, "auto")) o->color = -1;
            else if (!strcmp(optarg, "always")) o->color = 1;
            else if (!strcmp(optarg, "never")) o->color = 0;
            else { fprintf(stderr, "tpcc: --color must be auto, always or never\n"); return -1; }
            break;
        case 'h': fputs(usage, stdout); return 1;
        case OPT_VERSION: printf("tpcc %s\n", TPCC_VERSION); return 1;
        default:
            fprintf(stderr, "tpcc: unknown option '%s'\n%s", argv[optind - 1], "Try 'tpcc --help'.\n");
            return -1;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "tpcc: no plan given\nTry 'tpcc --help'.\n");
        return -1;
    }
    if (o->explain && argc - optind != 1) {
        fprintf(stderr, "tpcc: --explain takes one plan\n");
        return -1;
    }
    if (!o->explain)
        o->check = true;
    return 0;
}

/* Check one plan; returns 0 clean, 1 errors, 2 I/O or usage error. */
static int run_plan(const cli *o, const char *path, int color)
{
    tp_compile_opts opts = {o->defines, o->ndefines, o->hf};
    tp_unit u;
    tp_compile(&u, path, &opts);
    tp_diags_sort(&u.diags);
    int rc = u.io_error ? 2 : u.diags.errors ? 1 : 0;
    if (o->explain && u.built)
        tp_explain_print(&u.analysis, &u.plan, stdout);
    if (tp_diags_render(&u.diags, &u.src, o->format, color, o->format == TP_FMT_TEXT ? stderr : stdout) < 0)
        rc = 2;
    if (o->fix) {
        char err[512];
        int n = tp_diags_apply_fixits(&u.diags, &u.src, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "tpcc: --fix: %s\n", err);
            rc = 2;
        } else if (n > 0) {
            fprintf(stderr, "tpcc: applied %d fix%s to %s\n", n, n == 1 ? "" : "es", path);
        }
    }
    tp_unit_free(&u);
    return rc;
}

int main(int argc, char **argv)
{
    cli o = {0};
    o.color = -1;
    int r = parse_args(&o, argc, argv);
    if (r != 0) {
        free(o.defines);
        return r < 0 ? 2 : 0;
    }
    int color = o.color < 0 ? isatty(STDERR_FILENO) && !getenv("NO_COLOR") : o.color;
    int rc = 0;
    for (int i = optind; i < argc; i++) {
        int one = run_plan(&o, argv[i], color);
        if (one > rc)
            rc = one;
    }
    free(o.defines);
    return rc;
}
