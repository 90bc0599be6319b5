/* main.c: the tpcc command line. The only place that exits. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "compiler/diag/lint.h"
#include "compiler/driver/clobber.h"
#include "compiler/driver/auto_plan.h"
#include "compiler/driver/compile.h"
#include "compiler/driver/fix.h"
#include "compiler/driver/input_roots.h"
#include "compiler/driver/output.h"
#include "compiler/driver/settings_find.h"
#include "compiler/export/export.h"
#include "compiler/front/config.h"
#include "compiler/report/report.h"
#include "util/atomic_write.h"
#include "util/bytes.h"
#include "sched/write.h"
#include "sched/format.h"
#include "util/hash.h"
#include "util/number.h"
#include "util/xalloc.h"

static const char usage[] =
    "usage: tpcc [options] PLAN -o OUT.sched     compile a plan to a per-rank schedule\n"
    "       tpcc [options] --check PLAN...       check plans (lint)\n"
    "       tpcc [options] --explain PLAN        show every value's layout\n"
    "       tpcc [options] --report PLAN         what the plan costs\n"
    "       tpcc --dump OUT.sched [--rank R]     print a schedule\n"
    "       tpcc --export=FMT PLAN [-o FILE]     write the checked plan for PyTorch or transformers\n"
    "       tpcc [mode] --tp-plan auto --hf-config DIR   the plan transformers applies (tp_plan=\"auto\")\n"
    "\n"
    "Check tensor-parallel plans (PyTorch parallelize_module semantics) and compile them\n"
    "to static per-rank schedules for tprun.\n"
    "\n"
    "  -o FILE                    write the schedule (nothing is written when the plan has errors)\n"
    "  --check                    check each plan; report every layout error\n"
    "  --explain                  print the placement, DTensor or plain, of every value at\n"
    "                             every module boundary, and the collectives of a forward pass\n"
    "  --report                   per-rank parameters, activation arena, FLOPs and every collective,\n"
    "                             against the Megatron bound\n"
    "  --report-format=FMT        text (default) or json\n"
    "  --device-memory SIZE       with --report: whether a step (training with --train) fits (80GiB, 40GB)\n"
    "  --dump FILE                print a schedule's per-rank program; --rank R for one rank\n"
    "  --export=pytorch|hf        a Python module applying the plan with parallelize_module, or\n"
    "                             the Hugging Face tp_plan dict (JSON); -o FILE, never an input\n"
    "  -O0, -O1                   -O1 (default) merges redistributions of the same tensor, drops\n"
    "                             ones immediately undone and fuses ops (silu_mul, add_rmsnorm,\n"
    "                             bias_gelu, rope_attention); -O0 keeps every redistribution and op\n"
    "  --dtype fp32|bf16          element type of the schedule (default fp32)\n"
    "  --train                    a training step: the forward, the backward derived from it (each\n"
    "                             collective's conjugate, the weights' gradient all-reduces) and\n"
    "                             every weight's gradient; tprun --steps trains with it\n"
    "  --loss sum|cross_entropy   with --train, for a model that returns its logits: the loss the\n"
    "                             training loop computes on them (sum: output.sum().backward();\n"
    "                             cross_entropy: against labels, vocab-parallel on vocab shards)\n"
    "  --recompute none|full|selective\n"
    "                             with --train: the activation recomputation of the transformer\n"
    "                             layers, overriding the plan's train { recompute }\n"
    "  --segments                 the schedule takes segments, each position's document (-1:\n"
    "                             padding): attention within documents, positions restarting at\n"
    "                             each (tprun --eos-id, --pad-id fill them)\n"
    "  -D name=value              override a configuration value (tp, seq, hidden, ...)\n"
    "  --allow-outside PATH       a plan may also read its model from PATH (repeatable)\n"
    "  --config FILE              the settings of FILE (a .tpcc.toml, or a pyproject.toml's\n"
    "                             [tool.tpcc]) for every plan, instead of the nearest file\n"
    "  --isolated                 no settings file\n"
    "  --hf-config FILE|DIR       read hf(key, default) values from a Hugging Face config.json\n"
    "                             (or a model directory's), checked against the model's hf { }\n"
    "  --tp-plan auto             with --hf-config and no plan file: the plan transformers itself\n"
    "                             applies for config.json's model_type (plans/hf/<model_type>.plan)\n"
    "  --fix                      apply the fixes that are sure to the plan files (never the\n"
    "                             model or config.json), then check the plans again\n"
    "  --diagnostics-format=FMT   text (default), json or sarif (SARIF 2.1.0): one document\n"
    "                             for all the plans; github: GitHub Actions' annotations\n"
    "  --output-format=FMT        the same (ruff's name)\n"
    "  --sarif-root DIR           SARIF URIs relative to DIR (default: the working directory)\n"
    "  --diagnostics-limit=N      show at most N diagnostics of each check per plan (default 100;\n"
    "                             0: all); the last one shown says how many more there are\n"
    "  -Werror                    report warnings as errors (exit status 1); -Wno-error undoes it\n"
    "  -W no-CHECK, -Wno-CHECK    drop CHECK's warnings (errors cannot be dropped); -W no-unsupported\n"
    "                             leaves what tpcc cannot handle yet out of --check\n"
    "  -W CHECK=error|warning     report CHECK's warnings as errors, or as warnings under -Werror;\n"
    "                             -Werror=CHECK is -W CHECK=error; -W unsupported=error makes what\n"
    "                             tpcc cannot handle yet errors\n"
    "  --color=WHEN               auto (default), always or never\n"
    "  -h, --help                 show this help\n"
    "  --version                  show the version\n"
    "\n"
    "A comment '# tpcc: ignore[CHECK]' on a line (or alone on the line above it)\n"
    "silences CHECK's warnings there. Settings (model-path, allow-outside, defines,\n"
    "werror, warnings) come from the nearest .tpcc.toml or pyproject.toml [tool.tpcc]\n"
    "above each plan; options override them (docs/lint.md).\n"
    "\n"
    "Examples (from the source tree; installed, the plans are in PREFIX/share/tpcc/plans):\n"
    "  tpcc --check plans/*.plan\n"
    "  tpcc --report -D tp=4 --train --dtype bf16 --device-memory 80GiB plans/llama-sp.plan\n"
    "  tpcc plans/llama-tiny.plan -o tiny.sched      # then: tprun -n 2 tiny.sched\n"
    "\n"
    "Exit status: 0 when no plan has errors (warnings and unsupported findings allowed),\n"
    "1 when a plan has errors, 2 for usage errors and unreadable files, 3 when -o, --report\n"
    "or --export cannot be made of a plan for what tpcc does not support yet.\n"
    "Documentation: docs/ (language.md the language, checks.md every check, cli.md every option,\n"
    "schedule.md the schedule).\n";

enum {
    OPT_CHECK = 256, OPT_EXPLAIN, OPT_HF, OPT_FIX, OPT_FORMAT, OPT_COLOR, OPT_VERSION, OPT_REPORT,
    OPT_REPORT_FORMAT, OPT_DUMP, OPT_RANK, OPT_DTYPE, OPT_EXPORT, OPT_SARIF_ROOT, OPT_TP_PLAN, OPT_TRAIN, OPT_LOSS, OPT_RECOMPUTE, OPT_SEGMENTS, OPT_DEVICE_MEMORY,
    OPT_ALLOW_OUTSIDE, OPT_DIAG_LIMIT, OPT_CONFIG, OPT_ISOLATED,
};

/* Diagnostics of one check shown per plan unless --diagnostics-limit says
 * otherwise: more than any real plan makes, few enough that a generated
 * plan with one mistake repeated stays readable. */
enum { DEFAULT_DIAG_LIMIT = 100 };

typedef enum mode { MODE_CHECK, MODE_COMPILE, MODE_EXPLAIN, MODE_REPORT, MODE_DUMP, MODE_EXPORT } mode;

typedef struct cli {
    mode mode;
    int modes;                  /* how many mode flags were given */
    bool fix, optimize;
    bool train;                 /* --train */
    tp_outer_loss loss;         /* --loss sum|cross_entropy */
    bool recompute_given;       /* --recompute, which overrides the plan's train { recompute } */
    tp_recompute recompute;
    bool segments;              /* --segments */
    int64_t device_memory;      /* --device-memory, bytes; 0: not given */
    bool auto_plan;             /* --tp-plan auto */
    const char **defines; int ndefines;
    char **allow_outside; int nallow_outside;   /* --allow-outside, resolved */
    const char *hf, *out, *dump, *sarif_root;
    const char **warnings; int nwarnings;       /* -W arguments (-Werror is "error"), checked */
    bool output;                /* -o, --report or --export: what an unsupported finding stops (exit 3) */
    const char *config;         /* --config FILE */
    bool isolated;              /* --isolated: no settings file */
    tp_diag_format format;
    tp_report_format report_format;
    tp_dtype dtype;
    int color;                  /* -1 auto */
    int rank;                   /* --rank, -1 for all */
    int diag_limit;             /* --diagnostics-limit, 0 for all */
    tp_export_format export_format;
} cli;

static int set_mode(cli *o, mode m)
{
    o->mode = m;
    o->modes++;
    return 0;
}

/* A write to f failed just now (errno says why): say so, and clear the
 * error so that check_stdout does not say it again. Returns 2. */
static int write_failed(FILE *f, const char *what)
{
    fprintf(stderr, "tpcc: cannot write %s: %s\n", what, strerror(errno));
    clearerr(f);
    return 2;
}

static int bad_usage(const char *fmt, const char *arg)
{
    fputs("tpcc: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\nTry 'tpcc --help'.\n", stderr);
    return -1;
}

static int parse_rank(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 1 << 20)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_option(cli *o, int c, const char *arg, char **argv)
{
    switch (c) {
    case OPT_CHECK: return set_mode(o, MODE_CHECK);
    case OPT_EXPLAIN: return set_mode(o, MODE_EXPLAIN);
    case OPT_REPORT: return set_mode(o, MODE_REPORT);
    case OPT_DUMP: o->dump = arg; return set_mode(o, MODE_DUMP);
    case 'o': o->out = arg; return 0;   /* a mode of its own unless --export */
    case OPT_EXPORT: {
        int f = tp_export_format_parse(arg);
        if (f < 0)
            return bad_usage("--export must be pytorch or hf, not '%s'", arg);
        o->export_format = (tp_export_format)f;
        return set_mode(o, MODE_EXPORT);
    }
    case OPT_HF: o->hf = arg; return 0;
    case OPT_SARIF_ROOT: o->sarif_root = arg; return 0;
    case 'W': {
        /* checked now, applied per plan after its settings file's (plan_opts_init) */
        char err[512];
        tp_lint scratch = {0};
        int rc = tp_lint_option(&scratch, arg, err, sizeof err);
        tp_lint_free(&scratch);
        if (rc < 0)
            return bad_usage("%s", err);
        o->warnings = tp_xreallocarray(o->warnings, (size_t)o->nwarnings + 1, sizeof *o->warnings);
        o->warnings[o->nwarnings++] = arg;
        return 0;
    }
    case OPT_CONFIG: o->config = arg; return 0;
    case OPT_ISOLATED: o->isolated = true; return 0;
    case OPT_ALLOW_OUTSIDE: {
        char err[512];
        char *real = tp_roots_resolve(arg, err, sizeof err);
        if (!real)
            return bad_usage("--allow-outside: %s", err);
        o->allow_outside = tp_xreallocarray(o->allow_outside, (size_t)o->nallow_outside + 1, sizeof *o->allow_outside);
        o->allow_outside[o->nallow_outside++] = real;
        return 0;
    }
    case OPT_TP_PLAN:
        if (strcmp(arg, "auto"))
            return bad_usage("--tp-plan takes 'auto' (the plan transformers applies), not '%s'; give a plan "
                             "file as an argument instead", arg);
        o->auto_plan = true;
        return 0;
    case OPT_FIX: o->fix = true; return 0;
    case 'D':
        o->defines = tp_xreallocarray(o->defines, (size_t)o->ndefines + 1, sizeof *o->defines);
        o->defines[o->ndefines++] = arg;
        return 0;
    case 'O':
        if (strcmp(arg, "0") && strcmp(arg, "1"))
            return bad_usage("-O takes 0 or 1, not '%s'", arg);
        o->optimize = arg[0] == '1';
        return 0;
    case OPT_DTYPE:
        if (!strcmp(arg, "fp32")) o->dtype = TP_F32;
        else if (!strcmp(arg, "bf16")) o->dtype = TP_BF16;
        else return bad_usage("--dtype must be fp32 or bf16, not '%s'", arg);
        return 0;
    case OPT_TRAIN: o->train = true; return 0;
    case OPT_LOSS:
        if (!strcmp(arg, "sum")) o->loss = TP_LOSS_SUM;
        else if (!strcmp(arg, "cross_entropy")) o->loss = TP_LOSS_CROSS_ENTROPY;
        else return bad_usage("--loss must be sum or cross_entropy, not '%s'", arg);
        return 0;
    case OPT_RECOMPUTE:
        if (!tp_recompute_parse(arg, &o->recompute))
            return bad_usage("--recompute must be none, full or selective, not '%s'", arg);
        o->recompute_given = true;
        return 0;
    case OPT_SEGMENTS: o->segments = true; return 0;
    case OPT_DEVICE_MEMORY:
        o->device_memory = tp_parse_bytes(arg);
        return o->device_memory > 0 ? 0 : bad_usage("--device-memory takes a size such as 80GiB or 40GB, not '%s'", arg);
    case OPT_RANK:
        return parse_rank(arg, &o->rank) ? bad_usage("--rank takes a rank number, not '%s'", arg) : 0;
    case OPT_FORMAT:
        if (!strcmp(arg, "text")) o->format = TP_FMT_TEXT;
        else if (!strcmp(arg, "json")) o->format = TP_FMT_JSON;
        else if (!strcmp(arg, "sarif")) o->format = TP_FMT_SARIF;
        else if (!strcmp(arg, "github")) o->format = TP_FMT_GITHUB;
        else return bad_usage("--diagnostics-format must be text, json, sarif or github, not '%s'", arg);
        return 0;
    case OPT_DIAG_LIMIT: {
        int64_t n;
        if (tp_parse_int(arg, 0, INT32_MAX, &n))
            return bad_usage("--diagnostics-limit takes a number of diagnostics from 0 (all) to 2147483647, not '%s'",
                             arg);
        o->diag_limit = (int)n;
        return 0;
    }
    case OPT_REPORT_FORMAT:
        if (!strcmp(arg, "text")) o->report_format = TP_REPORT_TEXT;
        else if (!strcmp(arg, "json")) o->report_format = TP_REPORT_JSON;
        else return bad_usage("--report-format must be text or json, not '%s'", arg);
        return 0;
    case OPT_COLOR:
        if (!strcmp(arg, "auto")) o->color = -1;
        else if (!strcmp(arg, "always")) o->color = 1;
        else if (!strcmp(arg, "never")) o->color = 0;
        else return bad_usage("--color must be auto, always or never, not '%s'", arg);
        return 0;
    case 'h':
        if (fputs(usage, stdout) != EOF)
            return 1;
        write_failed(stdout, "the help");
        return -1;
    case OPT_VERSION: printf("tpcc %s\n", TPCC_VERSION); return 1;
    case ':': return bad_usage("option '%s' requires an argument", argv[optind - 1]);
    default: return bad_usage("unknown option '%s'", argv[optind - 1]);
    }
}

/* --tp-plan auto stands for the plan file: it needs the config.json that
 * picks the plan, and a shipped plan is never rewritten. */
static int check_auto_plan(const cli *o, int argc, char **argv)
{
    if (!o->hf)
        return bad_usage("%s", "--tp-plan auto needs --hf-config FILE|DIR: config.json's model_type picks the plan");
    if (optind < argc)
        return bad_usage("--tp-plan auto takes no plan file ('%s'): give one or the other", argv[optind]);
    if (o->fix)
        return bad_usage("%s", "--fix does not rewrite the shipped plan --tp-plan auto reads; copy it and fix the copy");
    return 0;
}

/* A pattern the shell left as it was because no file matches it
 * (a *.plan in a directory without plans): no plan at all, not a
 * plan that cannot be read. */
static bool unmatched_pattern(const char *arg)
{
    return strpbrk(arg, "*?[") && access(arg, F_OK) != 0;
}

/* Returns 0 to run, 1 to exit successfully (help, version), -1 on a usage error. */
static int parse_args(cli *o, int argc, char **argv)
{
    static const struct option longs[] = {
        {"check", no_argument, 0, OPT_CHECK},
        {"explain", no_argument, 0, OPT_EXPLAIN},
        {"report", no_argument, 0, OPT_REPORT},
        {"report-format", required_argument, 0, OPT_REPORT_FORMAT},
        {"dump", required_argument, 0, OPT_DUMP},
        {"rank", required_argument, 0, OPT_RANK},
        {"dtype", required_argument, 0, OPT_DTYPE},
        {"hf-config", required_argument, 0, OPT_HF},
        {"fix", no_argument, 0, OPT_FIX},
        {"tp-plan", required_argument, 0, OPT_TP_PLAN},
        {"diagnostics-format", required_argument, 0, OPT_FORMAT},
        {"output-format", required_argument, 0, OPT_FORMAT},     /* ruff's name */
        {"color", required_argument, 0, OPT_COLOR},
        {"sarif-root", required_argument, 0, OPT_SARIF_ROOT},
        {"diagnostics-limit", required_argument, 0, OPT_DIAG_LIMIT},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, OPT_VERSION},
        {"export", required_argument, 0, OPT_EXPORT},
        {"train", no_argument, 0, OPT_TRAIN},
        {"loss", required_argument, 0, OPT_LOSS},
        {"recompute", required_argument, 0, OPT_RECOMPUTE},
        {"segments", no_argument, 0, OPT_SEGMENTS},
        {"device-memory", required_argument, 0, OPT_DEVICE_MEMORY},
        {"allow-outside", required_argument, 0, OPT_ALLOW_OUTSIDE},
        {"config", required_argument, 0, OPT_CONFIG},
        {"isolated", no_argument, 0, OPT_ISOLATED},
        {0, 0, 0, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":hD:o:O:W:", longs, NULL)) != -1) {
        int r = parse_option(o, c, optarg, argv);
        if (r)
            return r;
    }
    if (o->out && o->mode != MODE_EXPORT)
        set_mode(o, MODE_COMPILE);
    if (o->modes > 1)
        return bad_usage("%s", "choose one of -o, --check, --explain, --report, --dump and --export");
    if (o->config && o->isolated)
        return bad_usage("%s", "--config FILE and --isolated (no settings file) exclude each other");
    if (o->loss != TP_LOSS_NONE && !o->train)
        return bad_usage("%s", "--loss goes with --train (the loss a training step computes on the logits)");
    if (o->recompute_given && !o->train)
        return bad_usage("%s", "--recompute goes with --train (what a training step's backward recomputes)");
    if (o->segments && o->mode != MODE_COMPILE && o->mode != MODE_REPORT && o->mode != MODE_CHECK)
        return bad_usage("%s", "--segments goes with -o, --check or --report (it changes the schedule)");
    if (o->device_memory && o->mode != MODE_REPORT)
        return bad_usage("%s", "--device-memory goes with --report");
    if (o->train && (o->mode == MODE_DUMP || o->mode == MODE_EXPORT || o->mode == MODE_EXPLAIN))
        return bad_usage("%s", "--train goes with -o, --check or --report");
    /* the outputs that cannot be made past an unsupported finding (exit 3) */
    o->output = o->mode == MODE_COMPILE || o->mode == MODE_REPORT || o->mode == MODE_EXPORT;
    if (o->mode == MODE_DUMP && o->auto_plan)
        return bad_usage("%s", "--dump reads a schedule; --tp-plan auto is for checking and compiling");
    if (o->mode == MODE_DUMP)
        return optind < argc ? bad_usage("--dump takes a schedule, not a plan: '%s'", argv[optind]) : 0;
    if (o->auto_plan)
        return check_auto_plan(o, argc, argv);
    if (optind >= argc)
        return bad_usage("%s", "no plan given");
    for (int i = optind; i < argc; i++)
        if (unmatched_pattern(argv[i]))
            return bad_usage("no plan matches '%s' (the shell passes on a pattern that matches no file as it is): "
                             "name the plans, or check where they are", argv[i]);
    if (o->mode != MODE_CHECK && argc - optind != 1)
        return bad_usage("%s", "-o, --explain, --report and --export take one plan");
    return 0;
}

/* What one plan is checked with: its settings file's values, then the
 * command line's on top (settings.h). */
typedef struct plan_opts {
    const tp_settings *settings;            /* NULL: none */
    const char **defines, **define_at;      /* the file's, then -D's (define_at NULL) */
    int ndefines;
    char **allow_outside;                   /* the file's and --allow-outside's (borrowed) */
    int nallow_outside;
    tp_lint lint;                           /* the file's -W and -Werror, then the command line's */
} plan_opts;

static void plan_opts_init(plan_opts *p, const cli *o, const tp_settings *s)
{
    static const tp_settings none;
    memset(p, 0, sizeof *p);
    p->settings = s;
    if (!s)
        s = &none;
    p->ndefines = s->ndefines + o->ndefines;
    p->defines = tp_xcalloc((size_t)p->ndefines + 1, sizeof *p->defines);
    p->define_at = tp_xcalloc((size_t)p->ndefines + 1, sizeof *p->define_at);
    for (int i = 0; i < s->ndefines; i++) {
        p->defines[i] = s->defines[i];
        p->define_at[i] = s->define_at[i];
    }
    for (int i = 0; i < o->ndefines; i++)
        p->defines[s->ndefines + i] = o->defines[i];
    p->nallow_outside = s->nallow_outside + o->nallow_outside;
    p->allow_outside = tp_xcalloc((size_t)p->nallow_outside + 1, sizeof *p->allow_outside);
    for (int i = 0; i < s->nallow_outside; i++)
        p->allow_outside[i] = s->allow_outside[i];
    for (int i = 0; i < o->nallow_outside; i++)
        p->allow_outside[s->nallow_outside + i] = o->allow_outside[i];
    /* both lists were checked when they were read: neither can fail here */
    char err[512];
    for (int i = 0; i < s->nwarnings; i++)
        tp_lint_option(&p->lint, s->warnings[i], err, sizeof err);
    for (int i = 0; i < o->nwarnings; i++)
        tp_lint_option(&p->lint, o->warnings[i], err, sizeof err);
    p->lint.output = o->output;
}

static void plan_opts_free(plan_opts *p)
{
    free(p->defines);
    free(p->define_at);
    free(p->allow_outside);
    tp_lint_free(&p->lint);
}

static tp_compile_opts compile_opts(const cli *o, const plan_opts *p, bool optimize)
{
    /* --check --train derives the backward too: what it cannot differentiate is an error there */
    bool program = o->mode == MODE_COMPILE || o->mode == MODE_REPORT || (o->mode == MODE_CHECK && o->train);
    tp_compile_opts c = {.defines = p->defines, .ndefines = p->ndefines, .define_at = p->define_at,
                         .hf_config = o->hf, .optimize = optimize, .dtype = o->dtype, .program = program,
                         .train = o->train, .loss = o->loss, .allow_outside = p->allow_outside,
                         .nallow_outside = p->nallow_outside, .recompute_given = o->recompute_given,
                         .recompute = o->recompute, .segments = o->segments};
    if (p->settings) {
        c.model_path = p->settings->model_path;
        c.nmodel_path = p->settings->nmodel_path;
    }
    return c;
}

/* The exit status of linted findings: 2 when an input could not be read,
 * 1 for errors, 3 for what tpcc cannot handle yet when an output was asked
 * for (a schedule, a report, an export: none can be made), else 0. */
static int findings_status(const cli *o, const tp_diags *d, bool unreadable)
{
    return unreadable ? 2 : d->errors ? 1 : d->unsupported && o->output ? 3 : 0;
}

/* The more serious of two exit statuses: 2 (usage, unreadable input) over
 * 1 (plan errors) over 3 (unsupported, no output made) over 0. */
static int worse_status(int a, int b)
{
    static const int rank[] = {[0] = 0, [3] = 1, [1] = 2, [2] = 3};
    return rank[b] > rank[a] ? b : a;
}

/* Apply -W and suppressions to the unit's diagnostics, then hand them to
 * the output with the plan's status: theirs, or fix_rc (--fix's) where
 * that is worse. Returns the exit status. */
static int finish_diagnostics(const cli *o, const plan_opts *p, tp_unit *u, int fix_rc, const char *path,
                              tp_output *output)
{
    tp_diags_sort(&u->diags);
    tp_lint_apply(&u->diags, &p->lint);
    tp_diags_limit(&u->diags, o->diag_limit);
    int rc = worse_status(findings_status(o, &u->diags, u->io_error), fix_rc);
    if (tp_output_add(output, path, &u->diags, &u->src, rc) < 0)
        rc = 2;
    return rc;
}

/* --fix: edit the plan, then u holds the plan as fixed (what is left).
 * Returns 0, or 2 when the plan could not be written. */
static int fix(tp_unit *u, const char *path, const tp_compile_opts *opts, const tp_lint *lint)
{
    char err[512];
    if (tp_fix_plan(u, path, opts, lint, stderr, err, sizeof err) >= 0)
        return 0;
    fprintf(stderr, "tpcc: --fix: %s\n", err);
    return 2;
}

/* What determines the schedule: the sources, every resolved config value,
 * the dtype, the optimisation level and --segments. */
static uint64_t input_hash(tp_unit *u, const cli *o)
{
    uint64_t h = TP_HASH_INIT;
    for (int i = 0; i < u->src.count; i++)
        h = tp_hash(h, u->src.files[i].text, u->src.files[i].size);
    for (int i = 0; i < u->config.count; i++) {
        tp_cfg_value v = {0};
        tp_config_value(&u->config, u->config.items[i].name, TP_NO_SPAN, &v);
        h = tp_hash(h, u->config.items[i].name, strlen(u->config.items[i].name));
        h = v.s ? tp_hash(h, v.s, strlen(v.s)) : v.is_float ? tp_hash(h, &v.f, sizeof v.f) : tp_hash(h, &v.i, sizeof v.i);
    }
    int flags[2] = {(int)o->dtype, o->optimize};
    h = tp_hash(h, flags, sizeof flags);
    /* only when given, so that every other schedule keeps its hash */
    return o->segments ? tp_hash(h, "--segments", strlen("--segments")) : h;
}

static int compile_to_file(const cli *o, tp_unit *u, const char *path)
{
    char producer[64], err[512];
    snprintf(producer, sizeof producer, "tpcc %s", TPCC_VERSION);
    int nsettings;
    tp_setting *settings = tp_config_settings(&u->config, &nsettings);
    tp_schedule_meta meta = {producer, input_hash(u, o), o->dtype, settings, nsettings, path,
                             u->plan.data_parallel, o->train ? &u->plan.train.values : NULL,
                             u->plan.train.shard_mode};
    int rc = tp_schedule_write(&u->ir, &meta, o->out, err, sizeof err);
    free(settings);
    if (rc < 0) {
        fprintf(stderr, "tpcc: %s\n", err);
        return 2;
    }
    return 0;
}

static int report(const cli *o, const plan_opts *p, tp_unit *u, const char *path)
{
    tp_compile_opts opts = compile_opts(o, p, false);
    tp_unit unopt;
    tp_compile(&unopt, path, &opts);
    int rc = 0;
    if (tp_report(&u->ir, &unopt.ir, &u->plan, path, o->dtype, o->device_memory, o->report_format, stdout) < 0)
        rc = write_failed(stdout, "the report");
    tp_unit_free(&unopt);
    return rc;
}

static int write_export(const char *text, const char *out)
{
    char err[512];
    if (tp_export_write(text, out, err, sizeof err) < 0) {
        fprintf(stderr, "tpcc: %s\n", err);
        return 2;
    }
    return 0;
}

/* Run one plan in the selected mode; returns its exit status. */
static int run_plan(const cli *o, const tp_settings *settings, const char *path, tp_output *output)
{
    plan_opts p;
    plan_opts_init(&p, o, settings);
    tp_compile_opts opts = compile_opts(o, &p, o->optimize);
    tp_unit u;
    tp_compile(&u, path, &opts);
    char msg[1024];
    bool writes_out = o->mode == MODE_COMPILE || (o->mode == MODE_EXPORT && o->out && strcmp(o->out, "-"));
    if (writes_out && tp_output_clobbers_input(o->out, &u, o->mode == MODE_COMPILE, msg, sizeof msg)) {
        fprintf(stderr, "tpcc: %s\n", msg);
        tp_unit_free(&u);
        plan_opts_free(&p);
        return 2;
    }
    int fix_rc = o->fix ? fix(&u, path, &opts, &p.lint) : 0;
    if (o->mode == MODE_EXPLAIN && u.built)
        tp_explain_print(&u.analysis, &u.plan, stdout);
    char *exported = NULL;
    if (o->mode == MODE_EXPORT && u.built && !u.diags.errors && !u.io_error) {
        const tp_export_unit checked = {&u.plan, &u.model, &u.diags};
        exported = tp_export(&checked, path, o->export_format);
        if (!exported && !u.diags.errors) {
            fprintf(stderr, "tpcc: --export: out of memory\n");
            u.io_error = true;
        }
    }
    int rc = finish_diagnostics(o, &p, &u, fix_rc, path, output);
    if (rc == 0 && exported)
        rc = write_export(exported, o->out);
    free(exported);
    if (rc == 0 && o->mode == MODE_COMPILE)
        rc = compile_to_file(o, &u, path);
    else if (rc == 0 && o->mode == MODE_REPORT)
        rc = report(o, &p, &u, path);
    tp_unit_free(&u);
    plan_opts_free(&p);
    return rc;
}

/* --tp-plan auto: the shipped plan config.json's model_type picks, or a
 * finding in config.json saying why there is none: an error (exit 2, as
 * an unreadable input) or what tpcc cannot handle yet (a MoE family). */
static int run_auto_plan(const cli *o, const tp_settings *settings, tp_output *output)
{
    char *config = tp_config_json_path(o->hf);
    char *plans_dir = tp_plans_dir();
    tp_sources src;
    tp_diags diags;
    tp_sources_init(&src);
    tp_diags_init(&diags);
    char *plan = tp_auto_plan(config, plans_dir, &src, &diags);
    int rc;
    if (plan) {
        rc = run_plan(o, settings, plan, output);
    } else {
        bool unreadable = diags.errors > 0;
        plan_opts p;
        plan_opts_init(&p, o, settings);
        tp_lint_apply(&diags, &p.lint);
        plan_opts_free(&p);
        rc = findings_status(o, &diags, unreadable);
        if (tp_output_add(output, config, &diags, &src, rc) < 0)
            rc = 2;
    }
    tp_diags_free(&diags);
    tp_sources_free(&src);
    free(plan);
    free(plans_dir);
    free(config);
    return rc;
}

/* The settings file of each plan (settings_find.h), of --tp-plan auto's
 * in settings[nplans]: its plan is tpcc's own, so its settings are the
 * working directory's. Returns 0, or 2 after saying what is wrong. */
static int find_settings(const cli *o, char **plans, int nplans, tp_settings_cache *cache,
                         const tp_settings **settings)
{
    char err[1024];
    for (int i = 0; i <= nplans && !o->isolated; i++) {
        if (i == nplans && !o->auto_plan)
            break;
        char *dir = i < nplans ? tp_path_parent(plans[i]) : tp_xstrdup(".");
        int rc = tp_settings_for(cache, dir, o->config, &settings[i], err, sizeof err);
        free(dir);
        if (rc < 0) {
            fprintf(stderr, "tpcc: %s\n", err);
            return 2;
        }
    }
    return 0;
}

static void cli_free(cli *o)
{
    free(o->warnings);
    free(o->defines);
    for (int i = 0; i < o->nallow_outside; i++)
        free(o->allow_outside[i]);
    free(o->allow_outside);
}

static int run(int argc, char **argv)
{
    cli o = {0};
    o.color = -1;
    o.rank = -1;
    o.optimize = true;
    o.diag_limit = DEFAULT_DIAG_LIMIT;
    int r = parse_args(&o, argc, argv);
    if (r != 0) {
        cli_free(&o);
        return r < 0 ? 2 : 0;
    }
    if (o.mode == MODE_DUMP) {
        char err[512];
        int rc = tp_schedule_dump(o.dump, o.rank, stdout, err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "tpcc: %s\n", err);
        cli_free(&o);
        return rc < 0 ? 2 : 0;
    }
    /* every plan's settings file before anything is written: a broken
     * one is a usage error, with nothing half-written */
    int nplans = argc - optind;
    tp_settings_cache cache = {0};
    const tp_settings **settings = tp_xcalloc((size_t)nplans + 1, sizeof *settings);
    int rc = find_settings(&o, argv + optind, nplans, &cache, settings);
    int color = o.color < 0 ? isatty(STDERR_FILENO) && !getenv("NO_COLOR") : o.color;
    tp_output output = {0};
    char err[512];
    /* an export on stdout keeps stdout for itself */
    FILE *docs = o.mode == MODE_EXPORT ? stderr : stdout;
    if (rc == 0 &&
        tp_output_init(&output, o.format, color, o.mode == MODE_CHECK, docs, o.sarif_root, err, sizeof err) < 0) {
        fprintf(stderr, "tpcc: %s\n", err);
        rc = 2;
    } else if (rc == 0) {
        if (o.auto_plan)
            rc = run_auto_plan(&o, settings[nplans], &output);
        for (int i = 0; i < nplans; i++) {
            int one = run_plan(&o, settings[i], argv[optind + i], &output);
            rc = worse_status(rc, one);
        }
        if (tp_output_finish(&output) < 0)
            rc = write_failed(docs, "the diagnostics");
    }
    tp_output_free(&output);
    free(settings);
    tp_settings_cache_free(&cache);
    cli_free(&o);
    return rc;
}

/* Whatever went to stdout (a document, --explain, --report, --dump,
 * --help) must have arrived: a full disk or a closed pipe is an error. */
static int check_stdout(int rc)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    fprintf(stderr, "tpcc: cannot write to standard output: %s\n", strerror(errno ? errno : EIO));
    return 2;
}

int main(int argc, char **argv)
{
    return check_stdout(run(argc, argv));
}
