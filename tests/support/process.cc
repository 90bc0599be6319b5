// process.cc: see process.h.
#include "tests/support/process.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

namespace fs = std::filesystem;

namespace tpcc_test {

TempDir::TempDir()
{
    char tmpl[] = "/tmp/tpcc-test-XXXXXX";
    const char *d = mkdtemp(tmpl);
    if (!d)
        throw std::runtime_error("mkdtemp failed");
    path = d;
}

TempDir::~TempDir()
{
    std::error_code ec;
    fs::remove_all(path, ec);
}

std::string TempDir::write(const std::string &name, const std::string &bytes) const
{
    std::string p = path + "/" + name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
}

std::string slurp(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string replaced(std::string text, const std::string &from, const std::string &to)
{
    size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from << " is not in\n" << text;
    if (at != std::string::npos)
        text.replace(at, from.size(), to);
    return text;
}

std::string Proc::describe() const
{
    std::string how = timed_out ? "timed out" : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                                    : "exit " + std::to_string(code());
    return how + "\n--- stdout:\n" + out.substr(0, 4000) + "\n--- stderr:\n" + err.substr(0, 4000);
}

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

Proc run_program(const std::string &program, const std::vector<std::string> &args,
                 const std::vector<std::string> &env_extra, int timeout_s)
{
    TempDir dir;
    std::string out = dir.path + "/out", err = dir.path + "/err";
    std::vector<std::string> env_s;
    // a variable env_extra sets replaces the inherited one (getenv takes the first)
    auto set_by_extra = [&](const char *e) {
        return std::any_of(env_extra.begin(), env_extra.end(), [&](const std::string &x) {
            size_t eq = x.find('=');
            return eq != std::string::npos && !strncmp(e, x.c_str(), eq + 1);
        });
    };
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "NO_COLOR=", 9) && !set_by_extra(*e))
            env_s.push_back(*e);
    env_s.insert(env_s.end(), env_extra.begin(), env_extra.end());
    // the plans under tests/ name the test families' models in tests/models/:
    // tpcc reads a plan's model there only when told (TPCC_MODEL_PATH), as a
    // user's own models directory
    if (std::none_of(env_s.begin(), env_s.end(), [](const std::string &e) { return !e.rfind("TPCC_MODEL_PATH=", 0); }))
        env_s.push_back("TPCC_MODEL_PATH=" + std::string(TPCC_SOURCE_DIR) + "/tests/models");
    Proc r;
    pid_t pid = fork();
    if (pid < 0)
        throw std::runtime_error(std::string("fork: ") + strerror(errno));
    if (pid == 0) {
        // the child: its own process group, so a timeout kills mpiexec's ranks too
        setpgid(0, 0);
        int in = open("/dev/null", O_RDONLY), o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600),
            e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (in < 0 || o < 0 || e < 0 || dup2(in, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(126);
        std::vector<char *> argv, envp;
        std::vector<std::string> argv_s = {program};
        argv_s.insert(argv_s.end(), args.begin(), args.end());
        for (auto &s : argv_s)
            argv.push_back(s.data());
        argv.push_back(nullptr);
        for (auto &s : env_s)
            envp.push_back(s.data());
        envp.push_back(nullptr);
        execvpe(program.c_str(), argv.data(), envp.data());
        _exit(127);
    }
    setpgid(pid, pid);
    time_t deadline = time(nullptr) + timeout_s;
    for (;;) {
        struct rusage use;
        pid_t w = wait4(pid, &r.status, WNOHANG, &use);
        if (w == pid) {
            r.max_rss_kb = use.ru_maxrss;
            break;
        }
        if (time(nullptr) >= deadline) {
            r.timed_out = true;
            kill(-pid, SIGKILL);
            waitpid(pid, &r.status, 0);
            break;
        }
        usleep(5000);
    }
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

Proc run_tpcc(const std::vector<std::string> &args)
{
    return run_program(kTpcc, args);
}

const char *const kInstallMpich =
    "mpiexec is not on PATH: install MPICH (Debian: apt-get install mpich; tools/setup.sh installs it)";
const char *const kInstallNumpy =
    "no python3 with numpy (tried python3 and /usr/bin/python3): install NumPy (Debian: apt-get install "
    "python3-numpy; tools/setup.sh installs it)";

bool on_path(const std::string &program)
{
    const char *path = getenv("PATH");
    if (!path)
        return false;
    std::stringstream dirs(path);
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        std::string p = (dir.empty() ? "." : dir) + "/" + program;
        struct stat st;
        if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0)
            return true;
    }
    return false;
}

std::string python_with(const std::string &module)
{
    for (const char *py : {"python3", "/usr/bin/python3"})
        if (run_program(py, {"-c", "import " + module}).code() == 0)
            return py;
    return "";
}

std::string python_with_numpy()
{
    static const std::string found = python_with("numpy");
    return found;
}

std::vector<std::string> labels_for(const std::string &tpcc, const std::string &sched)
{
    Proc dump = run_program(tpcc, {"--dump", sched});
    if (dump.code() == 0 && !contains(dump.out, " cross_entropy ") && !contains(dump.out, " ce_loss "))
        return {};
    return {"--labels", "tokens"};
}

}  // namespace tpcc_test
