// runtime/io/npy.c: .npy v1.0 writing (header layout, atomic replacement) and
// reading token ids (int32/int64, 1-D/2-D; everything else rejected), with
// a cross-check against NumPy (a python3 with numpy must be installed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/process.h"
extern "C" {
#include "runtime/io/npy.h"
}

namespace fs = std::filesystem;

namespace {

// A scratch directory (tests/support/process.h) addressed with `dir / "name"`.
class NpyDir {
  public:
    std::string operator/(const std::string &s) const { return (fs::path(dir_.path) / s).string(); }
    fs::path path() const { return dir_.path; }

  private:
    tpcc_test::TempDir dir_;
};

std::string slurp(const std::string &p)
{
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void spit(const std::string &p, const std::string &bytes)
{
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A .npy file with the given header dict (padded like NumPy's, version 1.0
// unless major says otherwise) and raw data.
std::string npy_bytes(const std::string &dict, const std::string &data, int major = 1)
{
    size_t pre = major == 1 ? 10 : 12;
    std::string h = dict;
    while ((pre + h.size() + 1) % 64)
        h += ' ';
    h += '\n';
    std::string out = "\x93NUMPY";
    out += char(major);
    out += char(0);
    out += char(h.size() & 0xff);
    out += char((h.size() >> 8) & 0xff);
    if (major != 1) {
        out += char(0);
        out += char(0);
    }
    return out + h + data;
}

template <typename T> std::string raw(const std::vector<T> &v)
{
    return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

struct Tokens {
    int32_t *ids = nullptr;
    int64_t shape[2] = {-1, -1};
    int ndim = -1;
    char err[512] = {0};
    int read(const std::string &p) { return tp_npy_read_tokens(p.c_str(), &ids, shape, &ndim, err, sizeof err); }
    ~Tokens() { free(ids); }
};

TEST(NpyWrite, HeaderIsVersion1PaddedTo64)
{
    NpyDir dir;
    struct Case {
        std::vector<int64_t> shape;
        const char *shape_text;
    } cases[] = {{{2, 3}, "'shape': (2, 3), }"}, {{6}, "'shape': (6,), }"}, {{}, "'shape': (), }"},
                 {{1, 2, 3}, "'shape': (1, 2, 3), }"}, {{0, 4}, "'shape': (0, 4), }"}};
    for (const Case &c : cases) {
        size_t n = 1;
        for (int64_t d : c.shape)
            n *= size_t(d);
        std::vector<float> v(n);
        for (size_t i = 0; i < n; i++)
            v[i] = 0.5f * float(i) - 1.0f;
        char err[256];
        std::string p = dir / "a.npy";
        ASSERT_EQ(tp_npy_write_f32(p.c_str(), v.data(), c.shape.data(), int(c.shape.size()), err, sizeof err), 0)
            << err;
        std::string b = slurp(p);
        ASSERT_GE(b.size(), 64u);
        EXPECT_EQ(b.substr(0, 6), "\x93NUMPY");
        EXPECT_EQ(b[6], 1);
        EXPECT_EQ(b[7], 0);
        size_t hlen = size_t((unsigned char)b[8]) | size_t((unsigned char)b[9]) << 8;
        EXPECT_EQ((10 + hlen) % 64, 0u) << c.shape_text;
        std::string header = b.substr(10, hlen);
        EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, ", 0), 0u) << header;
        EXPECT_NE(header.find(c.shape_text), std::string::npos) << header;
        EXPECT_EQ(header.back(), '\n');
        EXPECT_EQ(b.size(), 10 + hlen + 4 * n);
        if (n) {
            EXPECT_EQ(memcmp(b.data() + 10 + hlen, v.data(), 4 * n), 0);
        }
    }
}

TEST(NpyWrite, Int32RoundTripAndAtomicReplace)
{
    NpyDir dir;
    std::string p = dir / "ids.npy";
    spit(p, "old contents");
    std::vector<int32_t> v = {0, 1, -100, 2147483647, -2147483647 - 1, 7, 8, 9};
    int64_t shape[2] = {2, 4};
    char err[256];
    ASSERT_EQ(tp_npy_write_i32(p.c_str(), v.data(), shape, 2, err, sizeof err), 0) << err;
    EXPECT_NE(slurp(p).find("'descr': '<i4'"), std::string::npos);
    // no temporary file is left behind
    int files = 0;
    for (auto &e : fs::directory_iterator(dir.path())) {
        (void)e;
        files++;
    }
    EXPECT_EQ(files, 1);
    struct stat st;
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);

    Tokens t;
    ASSERT_EQ(t.read(p), 0) << t.err;
    EXPECT_EQ(t.ndim, 2);
    EXPECT_EQ(t.shape[0], 2);
    EXPECT_EQ(t.shape[1], 4);
    EXPECT_EQ(std::vector<int32_t>(t.ids, t.ids + 8), v);

    int64_t one[1] = {3};
    ASSERT_EQ(tp_npy_write_i32(p.c_str(), v.data(), one, 1, err, sizeof err), 0) << err;
    Tokens u;
    ASSERT_EQ(u.read(p), 0) << u.err;
    EXPECT_EQ(u.ndim, 1);
    EXPECT_EQ(u.shape[0], 3);
    EXPECT_EQ(u.shape[1], 0);
    EXPECT_EQ(u.ids[2], -100);
}

TEST(NpyWrite, Errors)
{
    NpyDir dir;
    float x = 1;
    int64_t shape[1] = {1};
    char err[256] = {0};
    std::string p = dir / "no/such/dir/a.npy";
    EXPECT_EQ(tp_npy_write_f32(p.c_str(), &x, shape, 1, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("no/such/dir/a.npy"), std::string::npos) << err;
    int64_t neg[1] = {-1};
    EXPECT_EQ(tp_npy_write_f32((dir / "b.npy").c_str(), &x, neg, 1, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("negative"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(dir / "b.npy"));
}

TEST(NpyRead, Int64Tokens)
{
    NpyDir dir;
    std::vector<int64_t> v = {5, 6, 7, -100, 31999, 0};
    std::string p = dir / "t.npy";
    spit(p, npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", raw(v)));
    Tokens t;
    ASSERT_EQ(t.read(p), 0) << t.err;
    EXPECT_EQ(t.ndim, 2);
    EXPECT_EQ(t.shape[0], 2);
    EXPECT_EQ(t.shape[1], 3);
    for (size_t i = 0; i < v.size(); i++)
        EXPECT_EQ(t.ids[i], int32_t(v[i]));

    // version 2.0 and 3.0 headers, double quotes, no trailing comma, 1-D
    spit(p, npy_bytes("{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (6,)}", raw(v), 2));
    Tokens u;
    ASSERT_EQ(u.read(p), 0) << u.err;
    EXPECT_EQ(u.ndim, 1);
    EXPECT_EQ(u.shape[0], 6);
    EXPECT_EQ(u.ids[4], 31999);
    spit(p, npy_bytes("{'shape': (6,), 'fortran_order': False, 'descr': '<i8', }", raw(v), 3));
    Tokens w;
    ASSERT_EQ(w.read(p), 0) << w.err;

    // a Fortran-order vector is the same bytes: accepted
    spit(p, npy_bytes("{'descr': '<i8', 'fortran_order': True, 'shape': (6,), }", raw(v)));
    Tokens f;
    EXPECT_EQ(f.read(p), 0) << f.err;

    // empty
    spit(p, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (0,), }", ""));
    Tokens e;
    ASSERT_EQ(e.read(p), 0) << e.err;
    EXPECT_NE(e.ids, nullptr);
    EXPECT_EQ(e.shape[0], 0);
}

TEST(NpyRead, RejectsWithClearMessages)
{
    NpyDir dir;
    std::string p = dir / "t.npy";
    std::vector<int32_t> six = {1, 2, 3, 4, 5, 6};
    struct Case {
        const char *what;
        std::string bytes;
        std::vector<std::string> words;
    } cases[] = {
        {"float", npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", raw(six)),
         {"t.npy", "'<f4'", "float", "int32", "'<i4'", "astype"}},
        {"float64", npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", raw(six)), {"'<f8'"}},
        {"big-endian", npy_bytes("{'descr': '>i4', 'fortran_order': False, 'shape': (6,), }", raw(six)),
         {"'>i4'"}},
        {"uint8", npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (6,), }", raw(six)),
         {"'|u1'", "unsigned"}},
        {"int16", npy_bytes("{'descr': '<i2', 'fortran_order': False, 'shape': (6,), }", raw(six)), {"'<i2'"}},
        {"fortran", npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", raw(six)),
         {"t.npy", "Fortran order", "C-order"}},
        {"3-D", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 3), }", raw(six)),
         {"1-D", "2-D", "(1, 2, 3)"}},
        {"0-D", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (), }", raw(six)), {"shape ()"}},
        {"truncated data", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (7,), }", raw(six)),
         {"truncated", "24 of 28"}},
        {"bad magic", std::string("\x93NUMPZ\x01\x00\x10\x00", 10) + std::string(64, ' '), {"not a NumPy .npy"}},
        {"text file", "hello", {"not a NumPy .npy"}},
        {"huge shape", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (1000000000000000,), }", raw(six)),
         {"truncated", "24 of 4000000000000000"}},
        {"version 4", npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), }", raw(six), 4),
         {"version 4.0"}},
        {"truncated header", std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 17), {"truncated"}},
        {"garbled header", npy_bytes("{'descr': '<i4', 'fortran_order': Maybe, 'shape': (6,), }", raw(six)),
         {"cannot parse"}},
        {"missing key", npy_bytes("{'descr': '<i4', 'shape': (6,), }", raw(six)), {"cannot parse"}},
        {"structured", npy_bytes("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (6,), }", raw(six)),
         {"structured"}},
        {"int64 overflow",
         npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", raw(std::vector<int64_t>{1LL << 40})),
         {"1099511627776", "does not fit in int32"}},
    };
    for (const Case &c : cases) {
        SCOPED_TRACE(c.what);
        spit(p, c.bytes);
        Tokens t;
        EXPECT_EQ(t.read(p), -1);
        EXPECT_EQ(t.ids, nullptr);
        for (const auto &w : c.words)
            EXPECT_NE(std::string(t.err).find(w), std::string::npos) << "'" << w << "' not in: " << t.err;
    }
    Tokens missing;
    EXPECT_EQ(missing.read(dir / "absent.npy"), -1);
    EXPECT_NE(std::string(missing.err).find("absent.npy"), std::string::npos);
}

TEST(NpyReadF32, RoundTripAndConversions)
{
    NpyDir dir;
    std::string p = dir / "x.npy";
    std::vector<float> v(24);
    for (size_t i = 0; i < v.size(); i++)
        v[i] = float(i) * 0.25f - 3.0f;
    int64_t shape[3] = {2, 3, 4};
    char err[256];
    ASSERT_EQ(tp_npy_write_f32(p.c_str(), v.data(), shape, 3, err, sizeof err), 0) << err;
    float *out = nullptr;
    int64_t got[TP_NPY_MAX_DIMS];
    int nd = 0;
    ASSERT_EQ(tp_npy_read_f32(p.c_str(), &out, got, &nd, err, sizeof err), 0) << err;
    EXPECT_EQ(nd, 3);
    EXPECT_EQ(got[0], 2);
    EXPECT_EQ(got[1], 3);
    EXPECT_EQ(got[2], 4);
    EXPECT_EQ(got[3], 0);
    EXPECT_EQ(std::vector<float>(out, out + 24), v);
    free(out);

    std::vector<double> d = {0.5, -1.25, 1e300};
    spit(p, npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", raw(d)));
    ASSERT_EQ(tp_npy_read_f32(p.c_str(), &out, got, &nd, err, sizeof err), 0) << err;
    EXPECT_EQ(nd, 1);
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(out[1], -1.25f);
    EXPECT_TRUE(std::isinf(out[2]));
    free(out);

    std::vector<int32_t> ints = {1, 2};
    spit(p, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", raw(ints)));
    EXPECT_EQ(tp_npy_read_f32(p.c_str(), &out, got, &nd, err, sizeof err), -1);
    EXPECT_EQ(out, nullptr);
    EXPECT_NE(std::string(err).find("expected a float32 ('<f4')"), std::string::npos) << err;
    EXPECT_NE(std::string(err).find("'<i4'"), std::string::npos) << err;
    spit(p, npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", raw(ints) + raw(ints)));
    EXPECT_EQ(tp_npy_read_f32(p.c_str(), &out, got, &nd, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("Fortran"), std::string::npos) << err;
}

// ---- NumPy itself ----------------------------------------------------------

TEST(NpyNumpy, NumpyReadsOursAndWeReadNumpys)
{
    std::string py = tpcc_test::python_with_numpy();
    ASSERT_FALSE(py.empty()) << tpcc_test::kInstallNumpy;
    NpyDir dir;
    std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, 7.0f};
    int64_t shape[3] = {1, 2, 3};
    char err[256];
    std::string ours = dir / "ours.npy";
    ASSERT_EQ(tp_npy_write_f32(ours.c_str(), v.data(), shape, 3, err, sizeof err), 0) << err;
    std::string ids64 = dir / "ids64.npy", ids32 = dir / "ids32.npy";
    std::string script = "import numpy as np\n"
                         "a = np.load('" + ours + "')\n"
                         "assert a.dtype == np.float32 and a.shape == (1, 2, 3), (a.dtype, a.shape)\n"
                         "assert a.ravel().tolist() == [1.5, -2.0, 3.25, 0.0, float(np.float32(1e-30)), 7.0]\n"
                         "np.save('" + ids64 + "', np.arange(12, dtype=np.int64).reshape(3, 4) * 1000)\n"
                         "np.save('" + ids32 + "', np.array([3, 1, 4, 1, 5], dtype=np.int32))\n";
    std::string sp = dir / "check.py";
    spit(sp, script);
    int rc = system((py + " " + sp).c_str());
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    Tokens a;
    ASSERT_EQ(a.read(ids64), 0) << a.err;
    EXPECT_EQ(a.ndim, 2);
    EXPECT_EQ(a.shape[0], 3);
    EXPECT_EQ(a.shape[1], 4);
    EXPECT_EQ(a.ids[11], 11000);
    Tokens b;
    ASSERT_EQ(b.read(ids32), 0) << b.err;
    float *f = nullptr;
    int64_t fshape[TP_NPY_MAX_DIMS];
    int fnd = 0;
    std::string f64 = dir / "f64.npy";
    spit(sp, "import numpy as np\nnp.save('" + f64 + "', np.linspace(0, 1, 6).reshape(2, 3))\n");
    rc = system((py + " " + sp).c_str());
    ASSERT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0);
    ASSERT_EQ(tp_npy_read_f32(f64.c_str(), &f, fshape, &fnd, err, sizeof err), 0) << err;
    EXPECT_EQ(fnd, 2);
    EXPECT_EQ(f[5], 1.0f);
    EXPECT_EQ(f[1], 0.2f);
    free(f);
    EXPECT_EQ(b.ndim, 1);
    EXPECT_EQ(std::vector<int32_t>(b.ids, b.ids + 5), std::vector<int32_t>({3, 1, 4, 1, 5}));
}

}  // namespace
