// runtime/io/weights.c: safetensors checkpoints read slice by slice (dtype
// conversion, dim 0/1 slices, vocab padding, bytes read, sharded indexes,
// every malformed-file case), runs of rows of a slice and the file pages
// released once read, the seeded initialisation, and files written
// by tools/make_checkpoint.py (which needs a python3 with numpy).
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/process.h"
extern "C" {
#include "runtime/io/weights.h"
}

#ifndef TPCC_SOURCE_DIR
#define TPCC_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;

namespace {

// ---- building safetensors files -------------------------------------------

struct RawTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::string bytes;
};

std::string f32_bytes(const std::vector<float> &v)
{
    return std::string(reinterpret_cast<const char *>(v.data()), v.size() * 4);
}

std::string u16_bytes(const std::vector<uint16_t> &v)
{
    std::string s;
    for (uint16_t x : v) {
        s.push_back(char(x & 0xff));
        s.push_back(char(x >> 8));
    }
    return s;
}

std::string shape_json(const std::vector<int64_t> &shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++)
        s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

// The header of tensors laid out back to back, and their data.
std::string header_of(const std::vector<RawTensor> &ts, std::string *data)
{
    std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
    size_t off = 0;
    for (const auto &t : ts) {
        h += ",\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape) +
             ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}";
        off += t.bytes.size();
        *data += t.bytes;
    }
    return h + "}";
}

void write_bytes(const fs::path &p, const std::string &bytes)
{
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    ASSERT_TRUE(f.good()) << p;
}

std::string le64(uint64_t n)
{
    std::string s;
    for (int i = 0; i < 8; i++)
        s.push_back(char((n >> (8 * i)) & 0xff));
    return s;
}

// A file from an explicit header and data section.
void write_raw(const fs::path &p, const std::string &header, const std::string &data)
{
    write_bytes(p, le64(header.size()) + header + data);
}

void write_safetensors(const fs::path &p, const std::vector<RawTensor> &ts)
{
    std::string data;
    std::string h = header_of(ts, &data);
    while (h.size() % 8)
        h += ' ';
    write_raw(p, h, data);
}

// Row-major values v[i] = base + i, exactly representable in bf16 and f16
// for the small sizes used.
std::vector<float> iota(size_t n, float base = 0.0f)
{
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = base + float(i);
    return v;
}

uint16_t f32_to_bf16_exact(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return uint16_t(u >> 16);
}

// A scratch directory (tests/support/process.h) addressed with `dir / "name"`.
class TempDir {
  public:
    fs::path operator/(const std::string &s) const { return (fs::path(dir_.path) / s); }
    fs::path path() const { return dir_.path; }

  private:
    tpcc_test::TempDir dir_;
};

struct Checkpoint {
    tp_checkpoint *c = nullptr;
    char err[1024] = {0};
    int open(const fs::path &p) { return tp_checkpoint_open(&c, p.c_str(), err, sizeof err); }
    ~Checkpoint() { tp_checkpoint_close(c); }
};

tp_weight_slice whole(const char *name, int64_t r, int64_t cols)
{
    tp_weight_slice s{};
    s.name = name;
    s.shape[0] = r;
    s.shape[1] = cols;
    s.dim = -1;
    return s;
}

tp_weight_slice part(const char *name, int64_t r, int64_t cols, int dim, int64_t off, int64_t len, int rank = 0)
{
    tp_weight_slice s = whole(name, r, cols);
    s.dim = dim;
    s.offset = off;
    s.length = len;
    s.rank = rank;
    return s;
}

std::vector<float> read(tp_checkpoint *c, const tp_weight_slice &s)
{
    int64_t n = tp_weight_slice_numel(&s);
    EXPECT_GE(n, 0);
    std::vector<float> out(size_t(n < 0 ? 0 : n), -999.0f);
    char err[512] = {0};
    EXPECT_EQ(tp_checkpoint_read(c, &s, out.data(), err, sizeof err), 0) << err;
    return out;
}

bool same_bits(float a, float b)
{
    return memcmp(&a, &b, 4) == 0;
}

// ---- dtype conversion ------------------------------------------------------

TEST(WeightsDtype, F16KnownBitPatterns)
{
    struct {
        uint16_t bits;
        float want;
    } cases[] = {
        {0x0000, 0.0f},
        {0x3C00, 1.0f},
        {0xC000, -2.0f},
        {0x3555, 0.333251953125f},
        {0x7BFF, 65504.0f},
        {0x0400, 6.103515625e-05f},             // smallest normal, 2^-14
        {0x0001, 5.9604644775390625e-08f},      // smallest subnormal, 2^-24
        {0x03FF, 6.097555160522461e-05f},       // largest subnormal, 1023 * 2^-24
        {0x8001, -5.9604644775390625e-08f},
        {0x0200, 3.0517578125e-05f},            // 2^-15
        {0x7C00, INFINITY},
        {0xFC00, -INFINITY},
    };
    for (auto &c : cases)
        EXPECT_TRUE(same_bits(tp_f16_to_f32(c.bits), c.want)) << std::hex << c.bits << " -> " << tp_f16_to_f32(c.bits);
    EXPECT_TRUE(std::signbit(tp_f16_to_f32(0x8000)));
    EXPECT_EQ(tp_f16_to_f32(0x8000), 0.0f);
    EXPECT_TRUE(std::isnan(tp_f16_to_f32(0x7E00)));
    EXPECT_TRUE(std::isnan(tp_f16_to_f32(0x7C01)));  // signalling payload stays a nan
    EXPECT_TRUE(std::isnan(tp_f16_to_f32(0xFE00)));

    // Every finite f16 converts exactly: f32 -> f16 is not needed here, so
    // check monotonicity and the exponent ladder instead.
    float prev = 0.0f;
    for (uint32_t h = 1; h < 0x7C00; h++) {
        float f = tp_f16_to_f32(uint16_t(h));
        ASSERT_GT(f, prev) << std::hex << h;
        ASSERT_EQ(tp_f16_to_f32(uint16_t(h | 0x8000)), -f);
        prev = f;
    }
}

TEST(WeightsDtype, Bf16KnownBitPatterns)
{
    EXPECT_EQ(tp_bf16_to_f32(0x3F80), 1.0f);
    EXPECT_EQ(tp_bf16_to_f32(0xC000), -2.0f);
    EXPECT_EQ(tp_bf16_to_f32(0x4049), 3.140625f);
    EXPECT_EQ(tp_bf16_to_f32(0x7F7F), 3.3895313892515355e+38f);
    EXPECT_EQ(tp_bf16_to_f32(0x0001), 9.183549615799121e-41f);  // subnormal
    EXPECT_EQ(tp_bf16_to_f32(0x7F80), INFINITY);
    EXPECT_EQ(tp_bf16_to_f32(0xFF80), -INFINITY);
    EXPECT_TRUE(std::isnan(tp_bf16_to_f32(0x7FC0)));
    EXPECT_TRUE(std::signbit(tp_bf16_to_f32(0x8000)));
}

TEST(WeightsDtype, ReadsEachDtypeFromAFile)
{
    TempDir dir;
    std::vector<uint16_t> h16 = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E00, 0x8000};
    std::vector<uint16_t> b16 = {0x3F80, 0xC000, 0x0001, 0x4049, 0x7F80, 0xFF80, 0x7FC0, 0x8000};
    float tiny = 1e-45f, nan = NAN;
    std::vector<float> f32 = {1.0f, -2.0f, tiny, 3.25f, INFINITY, -INFINITY, nan, -0.0f};
    write_safetensors(dir / "m.safetensors", {{"h", "F16", {8}, u16_bytes(h16)},
                                              {"b", "BF16", {2, 4}, u16_bytes(b16)},
                                              {"f", "F32", {8}, f32_bytes(f32)}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "m.safetensors"), 0) << ck.err;
    EXPECT_EQ(tp_checkpoint_num_tensors(ck.c), 3u);
    EXPECT_EQ(tp_checkpoint_total_bytes(ck.c), 16u + 16u + 32u);

    auto h = read(ck.c, whole("h", 8, 0));
    for (size_t i = 0; i < 8; i++)
        if (i == 6)
            EXPECT_TRUE(std::isnan(h[i]));
        else
            EXPECT_TRUE(same_bits(h[i], tp_f16_to_f32(h16[i]))) << i;
    EXPECT_EQ(h[2], 5.9604644775390625e-08f);
    EXPECT_EQ(h[4], INFINITY);

    auto b = read(ck.c, whole("b", 2, 4));
    for (size_t i = 0; i < 8; i++)
        if (i == 6)
            EXPECT_TRUE(std::isnan(b[i]));
        else
            EXPECT_TRUE(same_bits(b[i], tp_bf16_to_f32(b16[i]))) << i;
    EXPECT_EQ(b[3], 3.140625f);

    auto f = read(ck.c, whole("f", 8, 0));
    for (size_t i = 0; i < 8; i++)
        EXPECT_TRUE(same_bits(f[i], f32[i])) << i;

    // [n] and [n, 1] are the same bytes when ndim is inferred
    auto f2 = read(ck.c, whole("f", 8, 1));
    EXPECT_TRUE(same_bits(f2[3], 3.25f));
    const char *dt = nullptr;
    int nd = 0;
    int64_t shape[8];
    ASSERT_EQ(tp_checkpoint_tensor_info(ck.c, "b", &dt, &nd, shape), 0);
    EXPECT_STREQ(dt, "BF16");
    EXPECT_EQ(nd, 2);
    EXPECT_EQ(shape[0], 2);
    EXPECT_EQ(shape[1], 4);
    EXPECT_EQ(tp_checkpoint_tensor_info(ck.c, "nope", &dt, &nd, shape), -1);
}

// ---- slices ----------------------------------------------------------------

class WeightsSlice : public ::testing::TestWithParam<const char *> {};

TEST_P(WeightsSlice, Dim0AndDim1SlicesEqualTheFullTensor)
{
    std::string dtype = GetParam();
    const int64_t R = 8, C = 12;
    auto vals = iota(size_t(R * C), -40.0f);
    std::string bytes;
    size_t es = dtype == "F32" ? 4 : 2;
    if (dtype == "F32") {
        bytes = f32_bytes(vals);
    } else {
        std::vector<uint16_t> bits;
        for (float v : vals) {
            if (dtype == "BF16") {
                bits.push_back(f32_to_bf16_exact(v));
            } else {  // F16 of a small integer
                uint16_t sign = v < 0 ? 0x8000 : 0;
                float a = std::fabs(v);
                if (a == 0) {
                    bits.push_back(sign);
                    continue;
                }
                int e = int(std::floor(std::log2(a)));
                uint16_t mant = uint16_t(std::lround((a / std::ldexp(1.0f, e) - 1.0f) * 1024.0f));
                bits.push_back(uint16_t(sign | uint16_t((e + 15) << 10) | mant));
            }
        }
        bytes = u16_bytes(bits);
    }
    TempDir dir;
    write_safetensors(dir / "model.safetensors", {{"w", dtype, {R, C}, bytes}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir.path()), 0) << ck.err;  // the directory form
    auto full = read(ck.c, whole("w", R, C));
    for (size_t i = 0; i < full.size(); i++)
        ASSERT_EQ(full[i], vals[i]) << dtype << " element " << i;
    size_t expect_bytes = size_t(R * C) * es;
    EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), expect_bytes);

    for (int tp : {1, 2, 4}) {
        // dim 0: rows [r * R/tp, ...)
        for (int r = 0; r < tp; r++) {
            int64_t len = R / tp;
            size_t before = tp_checkpoint_bytes_read(ck.c);
            size_t rank_before = tp_checkpoint_bytes_read_rank(ck.c, r);
            auto s = read(ck.c, part("w", R, C, 0, r * len, len, r));
            ASSERT_EQ(s.size(), size_t(len * C));
            for (int64_t i = 0; i < len; i++)
                for (int64_t j = 0; j < C; j++)
                    ASSERT_EQ(s[size_t(i * C + j)], full[size_t((r * len + i) * C + j)]);
            EXPECT_EQ(tp_checkpoint_bytes_read(ck.c) - before, size_t(len * C) * es);
            EXPECT_EQ(tp_checkpoint_bytes_read_rank(ck.c, r) - rank_before, size_t(len * C) * es);
        }
        // dim 1: columns [r * C/tp, ...) of every row, strided
        for (int r = 0; r < tp; r++) {
            int64_t len = C / tp;
            size_t before = tp_checkpoint_bytes_read(ck.c);
            auto s = read(ck.c, part("w", R, C, 1, r * len, len, r));
            ASSERT_EQ(s.size(), size_t(R * len));
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < len; j++)
                    ASSERT_EQ(s[size_t(i * len + j)], full[size_t(i * C + r * len + j)]);
            EXPECT_EQ(tp_checkpoint_bytes_read(ck.c) - before, size_t(R * len) * es);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WeightsSlice, ::testing::Values("F32", "BF16", "F16"));

TEST(WeightsSlice1D, BiasSlicesAlongDim0)
{
    TempDir dir;
    auto v = iota(12, 1.0f);
    write_safetensors(dir / "m.safetensors", {{"b", "F32", {12}, f32_bytes(v)}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "m.safetensors"), 0) << ck.err;
    tp_weight_slice s = part("b", 12, 0, 0, 4, 4, 1);
    auto got = read(ck.c, s);
    EXPECT_EQ(got, std::vector<float>({5, 6, 7, 8}));
    EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), 16u);
    EXPECT_EQ(tp_checkpoint_bytes_read_rank(ck.c, 1), 16u);
    EXPECT_EQ(tp_checkpoint_bytes_read_rank(ck.c, 0), 0u);
    // explicit ndim
    s.ndim = 1;
    EXPECT_EQ(read(ck.c, s), std::vector<float>({5, 6, 7, 8}));
    // dim 1 of a vector is an error
    s.dim = 1;
    float buf[16];
    char err[256];
    EXPECT_EQ(tp_checkpoint_read(ck.c, &s, buf, err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("dimension 1"), std::string::npos) << err;
}

TEST(WeightsPadding, VocabRowsBeyondTheCheckpointAreZero)
{
    // embedding [10, 4] padded to [12, 4] for tp = 2 (and 4 -> 3 rows each)
    TempDir dir;
    auto v = iota(40, 1.0f);
    write_safetensors(dir / "m.safetensors", {{"emb", "F32", {10, 4}, f32_bytes(v)}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "m.safetensors"), 0) << ck.err;

    tp_weight_slice s = part("emb", 12, 4, 0, 6, 6, 1);
    s.logical[0] = 10;
    s.logical[1] = 4;
    auto got = read(ck.c, s);
    ASSERT_EQ(got.size(), 24u);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            EXPECT_EQ(got[size_t(i * 4 + j)], v[size_t((6 + i) * 4 + j)]);
    for (size_t k = 16; k < 24; k++)
        EXPECT_EQ(got[k], 0.0f) << k;
    EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), 4u * 4u * 4u);  // only the 4 real rows

    // a rank holding padding only reads nothing
    tp_weight_slice pad_only = part("emb", 16, 4, 0, 12, 4, 3);
    pad_only.logical[0] = 10;
    pad_only.logical[1] = 4;
    auto z = read(ck.c, pad_only);
    for (float x : z)
        EXPECT_EQ(x, 0.0f);
    EXPECT_EQ(tp_checkpoint_bytes_read_rank(ck.c, 3), 0u);

    // whole tensor, padded
    tp_weight_slice w = whole("emb", 12, 4);
    w.logical[0] = 10;
    w.logical[1] = 4;
    auto all = read(ck.c, w);
    for (size_t k = 0; k < 48; k++)
        EXPECT_EQ(all[k], k < 40 ? v[k] : 0.0f);
}

TEST(WeightsPadding, ColumnsBeyondTheCheckpointAreZero)
{
    // [4, 10] padded to [4, 12]; dim 1 slices of 6 columns
    TempDir dir;
    auto v = iota(40, 1.0f);
    write_safetensors(dir / "m.safetensors", {{"head", "BF16", {4, 10}, [&] {
                                                   std::vector<uint16_t> b;
                                                   for (float x : v)
                                                       b.push_back(f32_to_bf16_exact(x));
                                                   return u16_bytes(b);
                                               }()}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "m.safetensors"), 0) << ck.err;
    tp_weight_slice s = part("head", 4, 12, 1, 6, 6, 1);
    s.logical[0] = 4;
    s.logical[1] = 10;
    auto got = read(ck.c, s);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            EXPECT_EQ(got[size_t(i * 6 + j)], 6 + j < 10 ? v[size_t(i * 10 + 6 + j)] : 0.0f) << i << "," << j;
    EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), 4u * 4u * 2u);
}

TEST(WeightsPadding, ShapeIsComparedWithTheLogicalShape)
{
    TempDir dir;
    write_safetensors(dir / "m.safetensors", {{"emb", "F32", {10, 4}, f32_bytes(iota(40))}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "m.safetensors"), 0) << ck.err;
    tp_weight_slice s = whole("emb", 12, 4);  // forgot logical: expects [12, 4]
    std::vector<float> buf(48);
    char err[512];
    ASSERT_EQ(tp_checkpoint_read(ck.c, &s, buf.data(), err, sizeof err), -1);
    EXPECT_NE(std::string(err).find("tensor 'emb' has shape [10, 4], expected [12, 4]"), std::string::npos) << err;
}

// ---- sharded checkpoints ---------------------------------------------------

TEST(WeightsSharded, IndexMapsTensorsToFiles)
{
    TempDir dir;
    write_safetensors(dir / "model-00001-of-00002.safetensors",
                      {{"a", "F32", {2, 3}, f32_bytes(iota(6))}, {"b", "F32", {3}, f32_bytes(iota(3, 10))}});
    write_safetensors(dir / "model-00002-of-00002.safetensors", {{"c", "F16", {2}, u16_bytes({0x3C00, 0x4000})}});
    write_bytes(dir / "model.safetensors.index.json",
                R"({"metadata": {"total_size": 40}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                   "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
    // a stray model.safetensors next to the index is ignored
    write_safetensors(dir / "model.safetensors", {{"zzz", "F32", {1}, f32_bytes({1})}});
    for (fs::path p : {dir.path(), dir / "model.safetensors.index.json"}) {
        Checkpoint ck;
        ASSERT_EQ(ck.open(p), 0) << ck.err;
        EXPECT_EQ(tp_checkpoint_num_tensors(ck.c), 3u);
        EXPECT_EQ(read(ck.c, whole("a", 2, 3)), iota(6));
        EXPECT_EQ(read(ck.c, part("b", 3, 0, 0, 1, 2)), std::vector<float>({11, 12}));
        EXPECT_EQ(read(ck.c, whole("c", 2, 0)), std::vector<float>({1, 2}));
        EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), 24u + 8u + 4u);
        EXPECT_EQ(tp_checkpoint_tensor_info(ck.c, "zzz", nullptr, nullptr, nullptr), -1);
    }
}

// ---- malformed files -------------------------------------------------------

struct BadCase {
    const char *what;
    std::function<void(const TempDir &)> make;  // writes what is opened: dir / "x.safetensors" or the dir
    std::vector<std::string> words;             // all must appear in the message
    bool open_dir = false;
};

std::string ok_entry(const char *name, size_t b, size_t e, const char *dtype = "F32", const char *shape = nullptr)
{
    std::string sh = shape ? shape : "[" + std::to_string((e - b) / 4) + "]";
    return std::string("\"") + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + sh + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
}

std::vector<BadCase> bad_cases()
{
    const std::string data64(64, '\0'), data96(96, '\0');
    auto x = [](const TempDir &d) { return d / "x.safetensors"; };
    return {
        {"short file", [=](const TempDir &d) { write_bytes(x(d), "abcd"); }, {"x.safetensors", "4 bytes", "shorter"}},
        {"empty file", [=](const TempDir &d) { write_bytes(x(d), ""); }, {"x.safetensors", "0 bytes", "shorter"}},
        {"header past end", [=](const TempDir &d) { write_bytes(x(d), le64(100) + "{}"); },
         {"x.safetensors", "header length runs past the end of the file (10 bytes)"}},
        {"absurd header", [=](const TempDir &d) { write_bytes(x(d), le64(uint64_t(1) << 40) + "{}"); },
         {"x.safetensors", "more than 100 MiB"}},
        {"max u64 header", [=](const TempDir &d) { write_bytes(x(d), le64(~uint64_t(0)) + "{}"); },
         {"x.safetensors", "more than 100 MiB"}},
        {"bad json", [=](const TempDir &d) { write_raw(x(d), "{\"a\": {", ""); },
         {"x.safetensors", "not valid JSON"}},
        {"not an object", [=](const TempDir &d) { write_raw(x(d), "[1, 2]", ""); },
         {"x.safetensors", "not a JSON object"}},
        {"entry not an object", [=](const TempDir &d) { write_raw(x(d), "{\"w\": 5}", ""); },
         {"x.safetensors", "'w'", "not a JSON object"}},
        {"missing dtype",
         [=](const TempDir &d) { write_raw(x(d), "{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", data64); },
         {"x.safetensors", "'w'", "missing \"dtype\""}},
        {"missing shape",
         [=](const TempDir &d) { write_raw(x(d), "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", data64); },
         {"x.safetensors", "'w'", "missing \"shape\""}},
        {"missing data_offsets",
         [=](const TempDir &d) { write_raw(x(d), "{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", data64); },
         {"x.safetensors", "'w'", "missing \"data_offsets\""}},
        {"unknown dtype", [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 0, 8, "F33") + "}", data64); },
         {"x.safetensors", "'w'", "unknown dtype 'F33'"}},
        {"dtype not a string",
         [=](const TempDir &d) { write_raw(x(d), "{\"w\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", data64); },
         {"x.safetensors", "'w'", "dtype"}},
        {"negative shape",
         [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 0, 8, "F32", "[-2]") + "}", data64); },
         {"x.safetensors", "'w'", "shape", "non-negative"}},
        {"shape not an array",
         [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 0, 8, "F32", "\"2\"") + "}", data64); },
         {"x.safetensors", "'w'", "\"shape\" is not an array"}},
        {"huge shape",
         [=](const TempDir &d) {
             write_raw(x(d), "{" + ok_entry("w", 0, 8, "F32", "[4294967296, 4294967296, 4294967296]") + "}", data64);
         },
         {"x.safetensors", "'w'", "too large"}},
        {"offsets out of range", [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 32, 96) + "}", data64); },
         {"x.safetensors", "'w'", "[32, 96)", "past the end of the data section (64 bytes)"}},
        {"begin > end",
         [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 16, 8, "F32", "[2]") + "}", data64); },
         {"x.safetensors", "'w'", "[16, 8)", "begin is past the end"}},
        {"negative offsets",
         [=](const TempDir &d) {
             write_raw(x(d), "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", data64);
         },
         {"x.safetensors", "'w'", "non-negative"}},
        {"offsets not a pair",
         [=](const TempDir &d) { write_raw(x(d), "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", data64); },
         {"x.safetensors", "'w'", "data_offsets"}},
        {"size mismatch",
         [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 0, 12, "F32", "[2, 2]") + "}", data64); },
         {"x.safetensors", "'w'", "12 bytes", "[2, 2]", "16 bytes"}},
        {"overlap",
         [=](const TempDir &d) {
             write_raw(x(d), "{" + ok_entry("model.norm.weight", 32, 96) + "," + ok_entry("lm_head.weight", 0, 64) + "}",
                       data96);
         },
         {"x.safetensors: tensor 'lm_head.weight': data_offsets [0, 64) overlap 'model.norm.weight' [32, 96)"}},
        {"overlap, contained",
         [=](const TempDir &d) {
             write_raw(x(d),
                       "{" + ok_entry("big", 0, 96) + "," + ok_entry("small", 8, 16) + "," + ok_entry("tail", 96, 96) +
                           "}",
                       data96);
         },
         {"'big'", "overlap 'small' [8, 16)"}},
        {"overlap after a contained one",
         [=](const TempDir &d) {
             write_raw(x(d),
                       "{" + ok_entry("a", 0, 64) + "," + ok_entry("b", 8, 16) + "," + ok_entry("c", 60, 96) + "}",
                       data96);
         },
         {"'a'", "overlap"}},
        {"duplicate name in one file",
         [=](const TempDir &d) { write_raw(x(d), "{" + ok_entry("w", 0, 8) + "," + ok_entry("w", 8, 16) + "}", data64); },
         {"x.safetensors", "duplicate"}},
        {"duplicate across shards",
         [=](const TempDir &d) {
             write_safetensors(d / "s1.safetensors", {{"w", "F32", {1}, f32_bytes({1})}});
             write_safetensors(d / "s2.safetensors", {{"w", "F32", {1}, f32_bytes({2})}});
             write_bytes(d / "model.safetensors.index.json",
                         R"({"weight_map": {"w": "s1.safetensors", "v": "s2.safetensors"}})");
         },
         {"'w'", "two shards", "s1.safetensors", "s2.safetensors"}, true},
        {"index points to a missing file",
         [=](const TempDir &d) {
             write_safetensors(d / "s1.safetensors", {{"w", "F32", {1}, f32_bytes({1})}});
             write_bytes(d / "model.safetensors.index.json",
                         R"({"weight_map": {"w": "s1.safetensors", "v": "s9.safetensors"}})");
         },
         {"model.safetensors.index.json", "'v'", "s9.safetensors", "does not exist"}, true},
        {"index maps a tensor its file lacks",
         [=](const TempDir &d) {
             write_safetensors(d / "s1.safetensors", {{"w", "F32", {1}, f32_bytes({1})}});
             write_bytes(d / "model.safetensors.index.json",
                         R"({"weight_map": {"w": "s1.safetensors", "v": "s1.safetensors"}})");
         },
         {"model.safetensors.index.json", "'v'", "no such tensor"}, true},
        {"index with the wrong file",
         [=](const TempDir &d) {
             write_safetensors(d / "s1.safetensors", {{"w", "F32", {1}, f32_bytes({1})}});
             write_safetensors(d / "s2.safetensors", {{"v", "F32", {1}, f32_bytes({1})}});
             write_bytes(d / "model.safetensors.index.json",
                         R"({"weight_map": {"w": "s2.safetensors", "v": "s1.safetensors"}})");
         },
         {"model.safetensors.index.json", "but it is in"}, true},
        {"index escaping the directory",
         [=](const TempDir &d) {
             write_bytes(d / "model.safetensors.index.json", R"({"weight_map": {"w": "../s1.safetensors"}})");
         },
         {"model.safetensors.index.json", "'w'", "not a path inside"}, true},
        {"index not json",
         [=](const TempDir &d) { write_bytes(d / "model.safetensors.index.json", "{weight_map"); },
         {"model.safetensors.index.json", "not valid JSON"}, true},
        {"index without weight_map",
         [=](const TempDir &d) { write_bytes(d / "model.safetensors.index.json", R"({"metadata": {}})"); },
         {"model.safetensors.index.json", "weight_map"}, true},
        {"index entry not a string",
         [=](const TempDir &d) { write_bytes(d / "model.safetensors.index.json", R"({"weight_map": {"w": 3}})"); },
         {"model.safetensors.index.json", "'w'", "not a string"}, true},
        {"bad shard behind an index",
         [=](const TempDir &d) {
             write_bytes(d / "s1.safetensors", "xy");
             write_bytes(d / "model.safetensors.index.json", R"({"weight_map": {"w": "s1.safetensors"}})");
         },
         {"s1.safetensors", "shorter"}, true},
        {"empty directory", [](const TempDir &) {}, {"neither", "model.safetensors"}, true},
    };
}

TEST(WeightsCorrupt, EveryCaseGivesAClearError)
{
    for (const BadCase &bc : bad_cases()) {
        SCOPED_TRACE(bc.what);
        TempDir dir;
        bc.make(dir);
        Checkpoint ck;
        EXPECT_EQ(ck.open(bc.open_dir ? dir.path() : dir / "x.safetensors"), -1);
        EXPECT_EQ(ck.c, nullptr);
        std::string msg = ck.err;
        for (const auto &w : bc.words)
            EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
    }
}

TEST(WeightsCorrupt, MissingPath)
{
    Checkpoint ck;
    EXPECT_EQ(ck.open("/nonexistent/tpcc/model.safetensors"), -1);
    EXPECT_NE(std::string(ck.err).find("no such file"), std::string::npos) << ck.err;
    // NULL err is allowed
    tp_checkpoint *c = reinterpret_cast<tp_checkpoint *>(1);
    EXPECT_EQ(tp_checkpoint_open(&c, "/nonexistent", nullptr, 0), -1);
    EXPECT_EQ(c, nullptr);
}

TEST(WeightsCorrupt, AcceptsEdgeCasesTheFormatAllows)
{
    TempDir dir;
    // zero-size tensors anywhere, a gap between tensors, metadata, no tensors at all
    write_raw(dir / "x.safetensors",
              "{\"__metadata__\":{\"k\":\"v\"}," + ok_entry("e", 8, 8, "F32", "[0, 3]") + "," + ok_entry("w", 16, 24) +
                  "," + ok_entry("s", 0, 4, "F32", "[]") + "}  ",
              std::string(24, '\0'));
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "x.safetensors"), 0) << ck.err;
    EXPECT_EQ(tp_checkpoint_num_tensors(ck.c), 3u);
    tp_weight_slice s = whole("e", 0, 3);
    s.ndim = 2;
    EXPECT_EQ(tp_weight_slice_numel(&s), 0);
    float dummy;
    char err[256];
    EXPECT_EQ(tp_checkpoint_read(ck.c, &s, &dummy, err, sizeof err), 0) << err;

    write_raw(dir / "empty.safetensors", "{}", "");
    Checkpoint e;
    ASSERT_EQ(e.open(dir / "empty.safetensors"), 0) << e.err;
    EXPECT_EQ(tp_checkpoint_num_tensors(e.c), 0u);
}

TEST(WeightsCorrupt, ReadErrorsNameTheTensor)
{
    TempDir dir;
    std::vector<int32_t> ints = {1, 2, 3, 4};
    write_safetensors(dir / "model.safetensors",
                      {{"model.layers.0.mlp.up_proj.weight", "F32", {8, 6}, f32_bytes(iota(48))},
                       {"ids", "I32", {4}, std::string(reinterpret_cast<const char *>(ints.data()), 16)},
                       {"f64", "F64", {2}, std::string(16, '\0')}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir.path()), 0) << ck.err;
    std::vector<float> buf(256);
    char err[512];
    auto expect_err = [&](tp_weight_slice s, std::vector<std::string> words) {
        err[0] = 0;
        EXPECT_EQ(tp_checkpoint_read(ck.c, &s, buf.data(), err, sizeof err), -1);
        for (auto &w : words)
            EXPECT_NE(std::string(err).find(w), std::string::npos) << "'" << w << "' not in: " << err;
    };
    expect_err(whole("lm_head.weight", 3, 4), {"checkpoint has no tensor 'lm_head.weight' (expected shape [3, 4])"});
    expect_err(whole("layers.0.mlp.up_proj.weight", 8, 6),
               {"no tensor 'layers.0.mlp.up_proj.weight'", "did you mean 'model.layers.0.mlp.up_proj.weight'"});
    expect_err(whole("model.layers.0.mlp.up_prj.weight", 8, 6), {"did you mean 'model.layers.0.mlp.up_proj.weight'"});
    expect_err(whole("model.layers.0.mlp.up_proj.weight", 6, 8),
               {"model.safetensors", "tensor 'model.layers.0.mlp.up_proj.weight' has shape [8, 6], expected [6, 8]",
                "transposed"});
    expect_err(whole("model.layers.0.mlp.up_proj.weight", 8, 5), {"has shape [8, 6], expected [8, 5]"});
    tp_weight_slice v = whole("model.layers.0.mlp.up_proj.weight", 48, 0);
    expect_err(v, {"has shape [8, 6], expected [48]"});
    expect_err(whole("ids", 4, 0), {"'ids'", "dtype I32", "F32, BF16, F16"});
    expect_err(whole("f64", 2, 0), {"'f64'", "dtype F64"});
    expect_err(part("model.layers.0.mlp.up_proj.weight", 8, 6, 0, 6, 4, 1), {"rank 1", "outside"});
    expect_err(part("model.layers.0.mlp.up_proj.weight", 8, 6, 2, 0, 4), {"dimension 2"});
    expect_err(part("model.layers.0.mlp.up_proj.weight", 8, 6, 1, -1, 4), {"outside"});
    tp_weight_slice big = whole("model.layers.0.mlp.up_proj.weight", 8, 6);
    big.logical[0] = 9;
    big.logical[1] = 6;
    expect_err(big, {"exceeds the padded size"});
    tp_weight_slice huge = whole("model.layers.0.mlp.up_proj.weight", INT64_C(1) << 40, INT64_C(1) << 40);
    expect_err(huge, {"too large"});
    EXPECT_EQ(tp_weight_slice_numel(&huge), -1);
    tp_weight_slice nd = whole("model.layers.0.mlp.up_proj.weight", 8, 6);
    nd.ndim = 3;
    expect_err(nd, {"ndim 3"});
    EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), 0u);
}

// Random corruption of a valid file: open either fails with a message or
// succeeds, and then every tensor reads without crashing.
TEST(WeightsCorrupt, MutatedFilesNeverCrash)
{
    TempDir dir;
    std::string data;
    std::vector<RawTensor> ts = {{"a.weight", "F32", {4, 3}, f32_bytes(iota(12))},
                                 {"b.weight", "BF16", {2, 5}, std::string(20, '\x3f')},
                                 {"c.norm.weight", "F16", {6}, std::string(12, '\x3c')}};
    std::string h = header_of(ts, &data);
    std::string good = le64(h.size()) + h + data;
    std::mt19937 rng(1234);
    int opened = 0;
    for (int iter = 0; iter < 400; iter++) {
        std::string m = good;
        int edits = 1 + int(rng() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = rng() % m.size();
            switch (rng() % 4) {
            case 0: m[at] = char(rng()); break;
            case 1: m[at] = "0123456789[]{},:\"-"[rng() % 18]; break;
            case 2: m.erase(at, 1 + rng() % 3); break;
            default: m.resize(at); break;
            }
            if (m.empty())
                m = "x";
        }
        write_bytes(dir / "m.safetensors", m);
        Checkpoint ck;
        if (ck.open(dir / "m.safetensors") != 0) {
            EXPECT_NE(ck.err[0], '\0');
            continue;
        }
        opened++;
        for (const char *name : {"a.weight", "b.weight", "c.norm.weight"}) {
            const char *dt;
            int nd;
            int64_t shape[8];
            if (tp_checkpoint_tensor_info(ck.c, name, &dt, &nd, shape) != 0 || nd < 1 || nd > 2)
                continue;
            int64_t cols = nd == 2 ? shape[1] : 0;
            if (shape[0] > 1000 || cols > 1000)
                continue;
            tp_weight_slice s = whole(name, shape[0], cols);
            s.ndim = nd;
            std::vector<float> out(size_t(std::max<int64_t>(1, tp_weight_slice_numel(&s))));
            char err[256];
            tp_checkpoint_read(ck.c, &s, out.data(), err, sizeof err);
        }
    }
    EXPECT_GT(opened, 0);
}

// ---- seeded initialisation -------------------------------------------------

std::vector<float> seeded(const tp_weight_slice &s, uint64_t seed)
{
    int64_t n = tp_weight_slice_numel(&s);
    EXPECT_GE(n, 0);
    std::vector<float> out(size_t(n < 0 ? 0 : n), -999.0f);
    EXPECT_EQ(tp_weight_init_seeded(&s, seed, out.data()), n);
    return out;
}

TEST(WeightsSeeded, SlicesEqualTheFullTensorForEveryTp)
{
    const int64_t R = 16, C = 24, LR = 14;  // rows [14, 16) are vocab padding
    tp_weight_slice full_s = whole("model.embed_tokens.weight", R, C);
    full_s.logical[0] = LR;
    full_s.logical[1] = C;
    auto full = seeded(full_s, 7);
    for (int64_t i = LR; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            EXPECT_EQ(full[size_t(i * C + j)], 0.0f);
    // the unpadded tensor agrees on the common rows
    auto unpadded = seeded(whole("model.embed_tokens.weight", LR, C), 7);
    for (size_t k = 0; k < unpadded.size(); k++)
        ASSERT_EQ(unpadded[k], full[k]);

    for (int tp : {1, 2, 4}) {
        for (int r = 0; r < tp; r++) {
            int64_t len = R / tp;
            tp_weight_slice s = full_s;
            s.dim = 0, s.offset = r * len, s.length = len, s.rank = r;
            auto got = seeded(s, 7);
            for (int64_t i = 0; i < len; i++)
                for (int64_t j = 0; j < C; j++)
                    ASSERT_EQ(got[size_t(i * C + j)], full[size_t((r * len + i) * C + j)]) << tp << " " << r;
            len = C / tp;
            s.dim = 1, s.offset = r * len, s.length = len;
            got = seeded(s, 7);
            for (int64_t i = 0; i < R; i++)
                for (int64_t j = 0; j < len; j++)
                    ASSERT_EQ(got[size_t(i * len + j)], full[size_t(i * C + r * len + j)]) << tp << " " << r;
        }
    }
    // 1-D bias slices
    auto bias = seeded(whole("model.layers.0.attn.q_proj.bias", 24, 0), 7);
    for (int tp : {1, 2, 4})
        for (int r = 0; r < tp; r++) {
            auto got = seeded(part("model.layers.0.attn.q_proj.bias", 24, 0, 0, r * 24 / tp, 24 / tp), 7);
            for (size_t j = 0; j < got.size(); j++)
                ASSERT_EQ(got[j], bias[size_t(r * 24 / tp) + j]);
        }
}

TEST(WeightsSeeded, NamesAndSeedsGiveDifferentValues)
{
    auto a = seeded(whole("model.layers.0.self_attn.q_proj.weight", 8, 8), 0);
    auto b = seeded(whole("model.layers.0.self_attn.k_proj.weight", 8, 8), 0);
    auto c = seeded(whole("model.layers.1.self_attn.q_proj.weight", 8, 8), 0);
    auto d = seeded(whole("model.layers.0.self_attn.q_proj.weight", 8, 8), 1);
    auto a2 = seeded(whole("model.layers.0.self_attn.q_proj.weight", 8, 8), 0);
    EXPECT_EQ(a, a2);
    int same_ab = 0, same_ac = 0, same_ad = 0;
    for (size_t i = 0; i < a.size(); i++) {
        same_ab += a[i] == b[i];
        same_ac += a[i] == c[i];
        same_ad += a[i] == d[i];
    }
    EXPECT_LT(same_ab, 2);
    EXPECT_LT(same_ac, 2);
    EXPECT_LT(same_ad, 2);
    // the shape does not change an element's value (flat index of the logical tensor)
    auto wide = seeded(whole("model.layers.0.self_attn.q_proj.weight", 4, 16), 0);
    EXPECT_EQ(wide, a);
}

TEST(WeightsSeeded, NormsAndBiases)
{
    for (const char *n : {"model.norm.weight", "model.layers.3.input_layernorm.weight", "transformer.ln_f.weight",
                          "transformer.h.0.ln_1.weight"}) {
        auto v = seeded(whole(n, 10, 0), 3);
        for (float x : v)
            EXPECT_EQ(x, 1.0f) << n;
    }
    for (const char *n : {"transformer.ln_f.bias", "transformer.h.0.ln_2.bias"}) {
        auto v = seeded(whole(n, 10, 0), 3);
        for (float x : v)
            EXPECT_EQ(x, 0.0f) << n;
    }
    auto b = seeded(whole("transformer.h.0.mlp.c_fc.bias", 64, 0), 3);
    float mx = 0;
    for (float x : b)
        mx = std::max(mx, std::fabs(x));
    EXPECT_GT(mx, 0.0f);
    EXPECT_LT(mx, 0.07f);
    // padded vector: padding is zero even for norm weights
    tp_weight_slice s = whole("model.norm.weight", 12, 0);
    s.logical[0] = 10;
    auto p = seeded(s, 3);
    EXPECT_EQ(p[9], 1.0f);
    EXPECT_EQ(p[10], 0.0f);
    EXPECT_EQ(p[11], 0.0f);
    // an inconsistent slice writes nothing
    tp_weight_slice bad = part("x", 4, 4, 0, 2, 4);
    float sentinel = 42.0f;
    EXPECT_EQ(tp_weight_init_seeded(&bad, 0, &sentinel), -1);
    EXPECT_EQ(sentinel, 42.0f);
}

TEST(WeightsSeeded, StatisticsAreRoughlyNormal002)
{
    auto v = seeded(whole("lm_head.weight", 256, 256), 2024);
    double sum = 0, sq = 0, mx = 0;
    size_t within1 = 0, within2 = 0;
    for (float x : v) {
        sum += x;
        sq += double(x) * x;
        mx = std::max(mx, double(std::fabs(x)));
        within1 += std::fabs(x) < 0.02f;
        within2 += std::fabs(x) < 0.04f;
    }
    double n = double(v.size());
    double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.0005);
    EXPECT_NEAR(sd, 0.02, 0.0004);
    EXPECT_NEAR(within1 / n, 0.683, 0.02);
    EXPECT_NEAR(within2 / n, 0.954, 0.02);
    EXPECT_LE(mx, 0.02 * std::sqrt(3.0) * 2 + 1e-6);  // four uniforms are bounded
}

// Pinned values: tools/make_checkpoint.py and saved checkpoints depend on them.
TEST(WeightsSeeded, GoldenValues)
{
    auto v = seeded(whole("model.embed_tokens.weight", 1, 4), 0);
    auto w = seeded(whole("lm_head.weight", 1, 2), 12345);
    std::vector<uint32_t> bits;
    for (float x : v) {
        uint32_t u;
        memcpy(&u, &x, 4);
        bits.push_back(u);
    }
    for (float x : w) {
        uint32_t u;
        memcpy(&u, &x, 4);
        bits.push_back(u);
    }
    std::vector<uint32_t> want = {0x3c1364acu, 0xbce2d255u, 0xbcc14708u, 0x3aa82da1u,  // embed_tokens, seed 0
                                  0xbbc2a0d7u, 0x3bd78f12u};                           // lm_head, seed 12345
    EXPECT_EQ(bits, want);
}

// ---- tools/make_checkpoint.py ----------------------------------------------

int run(const std::string &cmd)
{
    int rc = system((cmd + " 2>&1").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

TEST(WeightsMakeCheckpoint, LlamaFilesMatchTheSeededInit)
{
    std::string py = tpcc_test::python_with_numpy();
    ASSERT_FALSE(py.empty()) << tpcc_test::kInstallNumpy;
    TempDir dir;
    std::string tool = std::string(TPCC_SOURCE_DIR) + "/tools/make_checkpoint.py";
    const int64_t hidden = 64, heads = 4, kv = 2, layers = 2, ffn = 128, vocab = 250, hd = 16;
    for (const char *dtype : {"f32", "bf16"}) {
        SCOPED_TRACE(dtype);
        fs::path out = dir / dtype;
        std::string cmd = py + " " + tool + " --family llama --out " + out.string() +
                          " --config hidden=64 heads=4 kv_heads=2 layers=2 ffn=128 vocab=250 --seed 11 --shards 3" +
                          " --dtype " + dtype;
        ASSERT_EQ(run(cmd), 0) << cmd;
        ASSERT_TRUE(fs::exists(out / "model.safetensors.index.json"));
        ASSERT_TRUE(fs::exists(out / "model-00003-of-00003.safetensors"));
        ASSERT_TRUE(fs::exists(out / "config.json"));
        Checkpoint ck;
        ASSERT_EQ(ck.open(out), 0) << ck.err;

        struct W {
            std::string name;
            int64_t r, c;
            int dim;  // how a Megatron plan shards it
        };
        std::vector<W> ws = {{"model.embed_tokens.weight", vocab, hidden, 0}, {"model.norm.weight", hidden, 0, -1},
                             {"lm_head.weight", vocab, hidden, 0}};
        for (int l = 0; l < layers; l++) {
            std::string p = "model.layers." + std::to_string(l) + ".";
            ws.push_back({p + "input_layernorm.weight", hidden, 0, -1});
            ws.push_back({p + "post_attention_layernorm.weight", hidden, 0, -1});
            ws.push_back({p + "self_attn.q_proj.weight", heads * hd, hidden, 0});
            ws.push_back({p + "self_attn.k_proj.weight", kv * hd, hidden, 0});
            ws.push_back({p + "self_attn.v_proj.weight", kv * hd, hidden, 0});
            ws.push_back({p + "self_attn.o_proj.weight", hidden, heads * hd, 1});
            ws.push_back({p + "mlp.gate_proj.weight", ffn, hidden, 0});
            ws.push_back({p + "mlp.up_proj.weight", ffn, hidden, 0});
            ws.push_back({p + "mlp.down_proj.weight", hidden, ffn, 1});
        }
        EXPECT_EQ(tp_checkpoint_num_tensors(ck.c), ws.size());
        const int tp = 2;
        for (const W &w : ws) {
            SCOPED_TRACE(w.name);
            for (int r = 0; r < tp; r++) {
                tp_weight_slice s{};
                s.name = w.name.c_str();
                s.rank = r;
                s.logical[0] = w.r;
                s.logical[1] = w.c;
                s.shape[0] = w.name.find("embed") != std::string::npos || w.name == "lm_head.weight" ? 256 : w.r;
                s.shape[1] = w.c;
                s.dim = w.dim;
                if (w.dim >= 0) {
                    s.length = s.shape[w.dim] / tp;
                    s.offset = r * s.length;
                } else if (r > 0) {
                    continue;  // replicated: rank 0 reads it once here
                }
                auto got = read(ck.c, s);
                auto want = seeded(s, 11);
                ASSERT_EQ(got.size(), want.size());
                for (size_t k = 0; k < got.size(); k++) {
                    if (std::string(dtype) == "f32")
                        ASSERT_EQ(got[k], want[k]) << k;
                    else
                        ASSERT_NEAR(got[k], want[k], std::fabs(want[k]) / 256 + 1e-30) << k;
                }
            }
        }
        // every byte read exactly once across the ranks, each rank about half
        EXPECT_EQ(tp_checkpoint_bytes_read(ck.c), tp_checkpoint_total_bytes(ck.c));
        EXPECT_LT(tp_checkpoint_bytes_read_rank(ck.c, 1), tp_checkpoint_total_bytes(ck.c) / 2);
    }
}

TEST(WeightsMakeCheckpoint, Gpt2NamesAndShapes)
{
    std::string py = tpcc_test::python_with_numpy();
    ASSERT_FALSE(py.empty()) << tpcc_test::kInstallNumpy;
    TempDir dir;
    std::string tool = std::string(TPCC_SOURCE_DIR) + "/tools/make_checkpoint.py";
    fs::path out = dir / "gpt2.safetensors";
    std::string cmd = py + " " + tool + " --family gpt2 --out " + out.string() +
                      " --config hidden=32 heads=4 layers=2 ffn=128 vocab=100 positions=64 --dtype f16";
    ASSERT_EQ(run(cmd), 0) << cmd;
    Checkpoint ck;
    ASSERT_EQ(ck.open(out), 0) << ck.err;
    auto shape_of = [&](const std::string &n) {
        const char *dt = nullptr;
        int nd = 0;
        int64_t sh[8] = {0};
        if (tp_checkpoint_tensor_info(ck.c, n.c_str(), &dt, &nd, sh) != 0)
            return std::string("missing");
        std::string s = std::string(dt) + "[";
        for (int i = 0; i < nd; i++)
            s += (i ? "," : "") + std::to_string(sh[i]);
        return s + "]";
    };
    EXPECT_EQ(shape_of("transformer.wte.weight"), "F16[100,32]");
    EXPECT_EQ(shape_of("transformer.wpe.weight"), "F16[64,32]");
    EXPECT_EQ(shape_of("transformer.ln_f.weight"), "F16[32]");
    EXPECT_EQ(shape_of("transformer.ln_f.bias"), "F16[32]");
    EXPECT_EQ(shape_of("lm_head.weight"), "missing");
    for (int l = 0; l < 2; l++) {
        std::string p = "transformer.h." + std::to_string(l) + ".";
        for (const char *ln : {"ln_1", "ln_2"}) {
            EXPECT_EQ(shape_of(p + ln + ".weight"), "F16[32]");
            EXPECT_EQ(shape_of(p + ln + ".bias"), "F16[32]");
        }
        for (const char *proj : {"q_proj", "k_proj", "v_proj", "c_proj"}) {
            EXPECT_EQ(shape_of(p + "attn." + proj + ".weight"), "F16[32,32]");
            EXPECT_EQ(shape_of(p + "attn." + proj + ".bias"), "F16[32]");
        }
        EXPECT_EQ(shape_of(p + "mlp.c_fc.weight"), "F16[128,32]");
        EXPECT_EQ(shape_of(p + "mlp.c_fc.bias"), "F16[128]");
        EXPECT_EQ(shape_of(p + "mlp.c_proj.weight"), "F16[32,128]");
        EXPECT_EQ(shape_of(p + "mlp.c_proj.bias"), "F16[32]");
    }
    EXPECT_EQ(tp_checkpoint_num_tensors(ck.c), 4u + 2u * 16u);
    // norms are 1/0, the rest within f16 rounding of the seeded values
    EXPECT_EQ(read(ck.c, whole("transformer.h.1.ln_2.weight", 32, 0)), std::vector<float>(32, 1.0f));
    EXPECT_EQ(read(ck.c, whole("transformer.h.1.ln_2.bias", 32, 0)), std::vector<float>(32, 0.0f));
    auto got = read(ck.c, part("transformer.h.0.mlp.c_fc.weight", 128, 32, 0, 64, 64, 1));
    auto want = seeded(part("transformer.h.0.mlp.c_fc.weight", 128, 32, 0, 64, 64, 1), 0);
    for (size_t k = 0; k < got.size(); k++)
        ASSERT_NEAR(got[k], want[k], std::fabs(want[k]) / 1024 + 1e-7) << k;
}

TEST(WeightsMakeCheckpoint, RejectsBadArguments)
{
    std::string py = tpcc_test::python_with_numpy();
    ASSERT_FALSE(py.empty()) << tpcc_test::kInstallNumpy;
    TempDir dir;
    std::string tool = std::string(TPCC_SOURCE_DIR) + "/tools/make_checkpoint.py";
    std::string base = py + " " + tool + " --family llama --out " + (dir / "a.safetensors").string();
    EXPECT_NE(run(base + " --shards 2 >/dev/null"), 0);
    EXPECT_NE(run(base + " --config hidden=x >/dev/null"), 0);
    EXPECT_NE(run(base + " --config hidden=-4 >/dev/null"), 0);
    EXPECT_FALSE(fs::exists(dir / "a.safetensors"));
}

// ---- rows of a slice, and the mapping released ----------------------------

// A loader staging through a bounded buffer reads a slice a run of rows at
// a time: every run equals the same rows of the whole slice, for row and
// column slices, a slice over vocab padding, the whole tensor and a 1-D
// one, from the file and from the seeded initialisation alike.
TEST(WeightsRows, EveryRunOfRowsEqualsTheWholeSlice)
{
    TempDir dir;
    const int64_t R = 8, C = 12, PR = 10;  // rows [8, 10) are padding
    write_safetensors(dir / "m.safetensors", {{"w", "F32", {R, C}, f32_bytes(iota(size_t(R * C), -40.0f))},
                                               {"b", "F32", {C}, f32_bytes(iota(size_t(C), 3.0f))}});
    Checkpoint ck;
    ASSERT_EQ(ck.open(dir / "m.safetensors"), 0) << ck.err;
    std::vector<tp_weight_slice> slices = {part("w", PR, C, 0, 2, 7), part("w", PR, C, 1, 3, 6), whole("w", PR, C)};
    for (tp_weight_slice &s : slices)
        s.logical[0] = R, s.logical[1] = C;
    tp_weight_slice bias = part("b", C, 0, 0, 4, 5);
    bias.ndim = 1;
    slices.push_back(bias);
    for (const tp_weight_slice &s : slices) {
        int64_t rows, width;
        ASSERT_EQ(tp_weight_slice_rows(&s, &rows, &width), 0);
        ASSERT_EQ(rows * width, tp_weight_slice_numel(&s));
        std::vector<float> full = read(ck.c, s), init = seeded(s, 5);
        for (int64_t r0 = 0; r0 <= rows; r0++)
            for (int64_t n = 0; r0 + n <= rows; n++) {
                std::vector<float> got(size_t(n * width) + 1, -999.0f), got_init(got);
                char err[512] = {0};
                ASSERT_EQ(tp_checkpoint_read_rows(ck.c, &s, r0, n, got.data(), err, sizeof err), 0) << err;
                ASSERT_EQ(tp_weight_init_seeded_rows(&s, 5, r0, n, got_init.data()), n * width);
                for (int64_t i = 0; i < n * width; i++) {
                    ASSERT_TRUE(same_bits(got[size_t(i)], full[size_t(r0 * width + i)]))
                        << s.name << " dim " << s.dim << " rows [" << r0 << ", " << r0 + n << ") element " << i;
                    ASSERT_TRUE(same_bits(got_init[size_t(i)], init[size_t(r0 * width + i)]));
                }
                EXPECT_EQ(got[size_t(n * width)], -999.0f) << "wrote past the rows asked for";
            }
        std::vector<float> sink(size_t(rows * width) + 2);
        char err[512] = {0};
        EXPECT_NE(tp_checkpoint_read_rows(ck.c, &s, 1, rows, sink.data(), err, sizeof err), 0);
        EXPECT_NE(std::string(err).find("outside the slice"), std::string::npos) << err;
        EXPECT_EQ(tp_weight_init_seeded_rows(&s, 5, -1, 1, sink.data()), -1);
    }
}

// Resident kilobytes of this process's mappings of `path` (/proc/self/smaps).
long resident_kib_of(const std::string &path)
{
    std::ifstream smaps("/proc/self/smaps");
    std::string line;
    bool in = false;
    long kib = 0;
    while (std::getline(smaps, line)) {
        if (!line.empty() && std::isxdigit((unsigned char)line[0]) && line.find('-') < line.find(' '))
            in = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
        else if (in && line.rfind("Rss:", 0) == 0)
            kib += std::strtol(line.c_str() + 4, nullptr, 10);
    }
    return kib;
}

// Once read, a tensor's pages leave the process: a loaded checkpoint does
// not stay resident beside the weights it was converted into.
TEST(WeightsRows, ReadingReleasesTheFilePages)
{
    TempDir dir;
    const int64_t R = 1024, C = 1024;  // 4 MiB
    write_safetensors(dir / "big.safetensors", {{"w", "F32", {R, C}, f32_bytes(iota(size_t(R * C)))}});
    const std::string path = fs::canonical(dir / "big.safetensors").string();
    Checkpoint ck;
    ASSERT_EQ(ck.open(path), 0) << ck.err;
    std::vector<float> half = read(ck.c, part("w", R, C, 0, 0, R / 2));
    EXPECT_EQ(half[size_t(C * 3 + 5)], float(C * 3 + 5));
    EXPECT_LE(resident_kib_of(path), 64) << "the rows read stay mapped";
    std::vector<float> cols = read(ck.c, part("w", R, C, 1, 100, 200));
    EXPECT_EQ(cols[size_t(200 * 7 + 1)], float(C * 7 + 101));
    EXPECT_LE(resident_kib_of(path), 64) << "the columns read stay mapped";
}

}  // namespace
