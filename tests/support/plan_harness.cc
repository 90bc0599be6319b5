// plan_harness.cc: see plan_harness.h.
#include "tests/support/plan_harness.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "compiler/diag/lint.h"
#include "grammar/parse.h"
}

namespace fs = std::filesystem;

namespace tpcc_test {

std::string source_path(const std::string &rel) { return std::string(TPCC_SOURCE_DIR) + "/" + rel; }

tp_compile_opts compile_options(const std::vector<const char *> &defines, bool train, bool program)
{
    // the test plans under tests/ name the test families' models there
    static char *test_models = realpath(source_path("tests/models").c_str(), nullptr);
    return {defines.data(), int(defines.size()), nullptr, true, TP_F32, program, train, TP_LOSS_NONE,
            &test_models, 1, false, TP_RECOMPUTE_NONE, false, nullptr, nullptr, 0};
}

void compile(tp_unit *u, const std::string &plan, const std::vector<std::string> &defines, bool train)
{
    std::vector<const char *> d;
    for (const auto &s : defines)
        d.push_back(s.c_str());
    tp_compile_opts opts = compile_options(d, train, true);
    tp_compile(u, plan.c_str(), &opts);
    // as tpcc reports them: the plan's `# tpcc: ignore[...]` comments silence their warnings
    const tp_lint no_options = {};
    tp_lint_apply(&u->diags, &no_options);
    tp_diags_sort(&u->diags);
}

bool is_train_plan(const std::string &plan) { return fs::path(plan).filename().string().rfind("train-", 0) == 0; }

void configure(tp_unit *u, const std::string &plan, const std::vector<std::string> &defines)
{
    memset(u, 0, sizeof *u);
    tp_sources_init(&u->src);
    tp_diags_init(&u->diags);
    tp_config_init(&u->config, &u->diags);
    char err[512];
    u->plan_file = tp_sources_load(&u->src, plan.c_str(), err, sizeof err);
    if (u->plan_file < 0) {
        tp_diag_add(&u->diags, TP_ERROR, TP_NO_SPAN, "io", "%s", err);
        return;
    }
    u->plan_ast = tp_parse(&u->src, u->plan_file, &u->diags);
    const tp_node *ref = nullptr;
    for (int i = 0; i < u->plan_ast->nkids && !ref; i++)
        if (u->plan_ast->kids[i]->kind == N_MODEL_REF)
            ref = u->plan_ast->kids[i];
    if (!ref) {
        tp_diag_add(&u->diags, TP_ERROR, TP_NO_SPAN, "plan", "%s names no model", plan.c_str());
        return;
    }
    char *model = tp_path_relative_to(plan.c_str(), ref->str);
    u->model_file = tp_sources_load(&u->src, model, err, sizeof err);
    free(model);
    if (u->model_file < 0) {
        tp_diag_add(&u->diags, TP_ERROR, ref->span, "io", "%s", err);
        return;
    }
    u->model_ast = tp_parse(&u->src, u->model_file, &u->diags);
    // the precedence of tp_compile: the model's block, the plan's, -D
    for (const tp_node *file : {u->model_ast, u->plan_ast})
        for (int i = 0; i < file->nkids; i++)
            if (file->kids[i]->kind == N_CONFIG)
                tp_config_bind_block(&u->config, file->kids[i], file == u->model_ast ? TP_CFG_MODEL : TP_CFG_PLAN);
    for (const auto &d : defines)
        if (tp_config_override(&u->config, d.c_str(), err, sizeof err) < 0)
            tp_diag_add(&u->diags, TP_ERROR, TP_NO_SPAN, "config", "%s", err);
}

bool tp_divides_sizes(tp_unit *u, int64_t tp)
{
    static const char *const names[] = {"heads", "kv_heads", "ffn", "hidden", "seq"};
    for (const char *n : names) {
        int64_t v;
        if (tp_config_has(&u->config, n) && tp_config_get(&u->config, n, TP_NO_SPAN, &v) && v % tp)
            return false;
    }
    return true;
}

static std::string canonical(const std::string &p)
{
    std::error_code ec;
    auto c = fs::weakly_canonical(p, ec);
    return ec ? p : c.string();
}

std::multiset<Finding> findings(const tp_unit *u)
{
    std::multiset<Finding> out;
    for (int i = 0; i < u->diags.count; i++) {
        const tp_diag &g = u->diags.items[i];
        if (g.level == TP_NOTE || g.suppression)
            continue;
        std::string where;
        if (g.span.file >= 0)
            where = canonical(u->src.files[g.span.file].path) + ":" + std::to_string(g.span.line);
        out.insert({where, tp_diag_level_name(g.level), g.check});
    }
    return out;
}

std::multiset<Finding> expectations(const std::string &plan)
{
    std::multiset<Finding> out;
    std::ifstream in(plan);
    std::string line;
    static const std::regex item(R"((error|warning|unsupported)\[([a-z-]+)\])");
    static const std::regex at(R"(#\s*expect-at\s+(\S+):(\d+):(.*))");
    std::string dir = fs::path(plan).parent_path().string();
    for (int n = 1; std::getline(in, line); n++) {
        std::smatch m;
        std::string where, rest;
        size_t pos;
        if (std::regex_search(line, m, at)) {
            where = canonical(dir + "/" + m[1].str()) + ":" + m[2].str();
            rest = m[3].str();
        } else if ((pos = line.find("# expect-nowhere:")) != std::string::npos) {
            rest = line.substr(pos);
        } else if ((pos = line.find("# expect:")) != std::string::npos) {
            where = canonical(plan) + ":" + std::to_string(n);
            rest = line.substr(pos);
        } else {
            continue;
        }
        for (std::sregex_iterator it(rest.begin(), rest.end(), item), end; it != end; ++it)
            out.insert({where, (*it)[1].str(), (*it)[2].str()});
    }
    return out;
}

std::string rendered(tp_unit *u)
{
    char *t = tp_diags_render_text(&u->diags, &u->src, 0);
    std::string s(t);
    free(t);
    return s;
}

std::vector<std::string> files_in(const std::string &dir, const std::string &ext)
{
    std::vector<std::string> out;
    for (const auto &e : fs::directory_iterator(source_path(dir)))
        if (e.path().extension() == ext)
            out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
}

std::string scratch_copy(const std::string &plan)
{
    char tmpl[] = "/tmp/tpcc-test-XXXXXX";
    const char *root = mkdtemp(tmpl);
    if (!root)
        throw std::runtime_error("mkdtemp failed");
    fs::path rel = fs::relative(plan, TPCC_SOURCE_DIR);
    fs::path copy = fs::path(root) / rel;
    fs::create_directories(copy.parent_path());
    fs::copy_file(plan, copy);
    fs::create_directory_symlink(source_path("models"), fs::path(root) / "models");
    fs::create_directories(fs::path(root) / "tests");
    fs::create_directory_symlink(source_path("tests/models"), fs::path(root) / "tests/models");
    return copy.string();
}

std::string scratch_root(const std::string &copy, const std::string &plan)
{
    std::string rel = fs::relative(plan, TPCC_SOURCE_DIR).string();
    return copy.substr(0, copy.size() - rel.size() - 1);
}

}  // namespace tpcc_test
