// process.h: what the tests share for files and processes: a scratch
// directory removed at scope exit, running a program with its output
// captured (and a time limit, so a hang fails the test instead of CI), and
// finding the tools the runtime tests run.
#pragma once

#include <string>
#include <vector>

#include <sys/wait.h>

namespace tpcc_test {

class TempDir {
public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
    // Write `bytes` to path/name; returns the full path.
    std::string write(const std::string &name, const std::string &bytes) const;
    std::string path;
};

std::string slurp(const std::string &path);

// text with its first `from` replaced by `to`; `from` must occur (a test
// failure says where it does not).
std::string replaced(std::string text, const std::string &from, const std::string &to);

struct Proc {
    int status = -1;          // raw wait status
    bool timed_out = false;
    long max_rss_kb = 0;      // the largest resident set of the program or any process it waited for
    std::string out, err;
    bool signaled() const { return WIFSIGNALED(status); }
    int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
    std::string describe() const;
};

// Run `program` with `args` (argv[0] is the program), stdin from /dev/null,
// stdout and stderr captured, NO_COLOR removed from and `env_extra`
// ("NAME=value", replacing an inherited NAME) added to the environment, and TPCC_MODEL_PATH set to
// tests/models/ unless the environment or env_extra sets it (tpcc reads a
// plan's model from there only when told). A run longer than
// `timeout_s` seconds is killed (with its process group) and marked
// timed_out.
Proc run_program(const std::string &program, const std::vector<std::string> &args,
                 const std::vector<std::string> &env_extra = {}, int timeout_s = 120);

// This build's tpcc and tprun (TPCC_BINARY_DIR): inline, so each is
// initialised before any test parameter of a file that includes this one.
inline const std::string kTpcc = std::string(TPCC_BINARY_DIR) + "/tpcc";
inline const std::string kTprun = std::string(TPCC_BINARY_DIR) + "/tprun";

// The tpcc binary of this build with `args`, as run_program runs it.
Proc run_tpcc(const std::vector<std::string> &args);

bool contains(const std::string &s, const std::string &part);

// tprun's --labels for a schedule: {"--labels", "tokens"} when its model
// computes a loss, none when it returns the logits (torchtitan's
// Transformer), which tprun refuses labels for. `tpcc` dumps it.
std::vector<std::string> labels_for(const std::string &tpcc, const std::string &sched);

// The tools the runtime tests run: mpiexec (MPICH) and a python3 with
// NumPy. tools/setup.sh installs both. A test that needs one fails where
// it is missing, with kInstallMpich or kInstallNumpy saying what to
// install; it never skips.
bool on_path(const std::string &program);
// A python3 that can import numpy ("python3" first, then Debian's
// /usr/bin/python3, which a pyenv or venv python3 on PATH may hide), or ""
// when there is none.
std::string python_with_numpy();
// The same for any module (jsonschema, yaml: python3-jsonschema,
// python3-yaml).
std::string python_with(const std::string &module);
extern const char *const kInstallMpich;
extern const char *const kInstallNumpy;

}  // namespace tpcc_test
