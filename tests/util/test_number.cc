// util/number.c and util/bytes.c: numbers as a command line, -D and the
// environment give them, decimal and range-checked. Each row is a text
// and what it reads as, or that it is refused: strtol, strtoull and strtod
// alone take blanks, a '+', hex, infinities, and wrap past a type's range.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "util/bytes.h"
#include "util/number.h"
}

namespace {

// Texts every parser below refuses, whatever its type.
const std::vector<std::string> kNeverNumbers = {"", " 2", "2 ", "+2", "0x10", "0X10", "2x", "inf", "nan", "-",
                                                "--2", "1_000", "\t2"};

TEST(Number, IntegersAreDecimalAndInRange)
{
    int64_t v = 7;
    for (const std::string &bad : kNeverNumbers) {
        EXPECT_EQ(tp_parse_int(bad.c_str(), INT64_MIN, INT64_MAX, &v), -1) << "'" << bad << "'";
        EXPECT_EQ(v, 7) << "a refused text leaves the value alone";
    }
    for (const char *bad : {"2.0", "1e3", "9223372036854775808", "-9223372036854775809"})
        EXPECT_EQ(tp_parse_int(bad, INT64_MIN, INT64_MAX, &v), -1) << bad;
    EXPECT_EQ(tp_parse_int("4294967297", 1, 4096, &v), -1) << "no wrap into a smaller range";
    EXPECT_EQ(tp_parse_int("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
    EXPECT_EQ(v, INT64_MIN);
    EXPECT_EQ(tp_parse_int("-3", -5, 5, &v), 0);
    EXPECT_EQ(v, -3);
}

TEST(Number, UnsignedIntegersAreDigitsOnly)
{
    uint64_t v = 7;
    for (const std::string &bad : kNeverNumbers)
        EXPECT_EQ(tp_parse_uint(bad.c_str(), &v), -1) << "'" << bad << "'";
    for (const char *bad : {"-1", "-0", "18446744073709551616", "1e3"})
        EXPECT_EQ(tp_parse_uint(bad, &v), -1) << bad << ": strtoull wraps '-1' to 2^64 - 1";
    EXPECT_EQ(v, 7u);
    EXPECT_EQ(tp_parse_uint("18446744073709551615", &v), 0);
    EXPECT_EQ(v, UINT64_MAX);
}

TEST(Number, RealsAreDecimalFiniteAndAboveTheirFloor)
{
    double v = 7;
    for (const std::string &bad : kNeverNumbers)
        EXPECT_EQ(tp_parse_real(bad.c_str(), -1e300, &v), -1) << "'" << bad << "'";
    for (const char *bad : {"0x1p3", "1e999", "-1e999", "1e-999", "1e", "e5", ".", "1.5.2", "1e+", "infinity"})
        EXPECT_EQ(tp_parse_real(bad, -1e300, &v), -1) << bad;
    EXPECT_EQ(tp_parse_real("-0.5", 0, &v), -1) << "below the floor";
    EXPECT_EQ(v, 7);
    const std::vector<std::pair<const char *, double>> good = {
        {"3e-4", 3e-4}, {"1E+06", 1e6}, {".5", 0.5}, {"5.", 5.0}, {"-2.5", -2.5}, {"10", 10.0}};
    for (auto [text, want] : good) {
        EXPECT_EQ(tp_parse_real(text, -1e300, &v), 0) << text;
        EXPECT_EQ(v, want) << text;
    }
}

TEST(Number, ByteSizesReadTheirNumberAsARealIs)
{
    for (const std::string &bad : kNeverNumbers)
        EXPECT_EQ(tp_parse_bytes((bad + "GB").c_str()), -1) << "'" << bad << "GB'";
    for (const char *bad : {"GB", "0x10", "0x10GB", "+2GiB", " 2GB", "infGB", "1e999B", "2 GB", "2gb", "2GBs", "-1MB",
                            "10EB", "9.3e18"})
        EXPECT_EQ(tp_parse_bytes(bad), -1) << bad;
    const std::vector<std::pair<const char *, int64_t>> good = {
        {"2GiB", int64_t(2) << 30}, {"5GB", 5000000000}, {"500MB", 500000000}, {"1e9", 1000000000},
        {"0.5KiB", 512}, {"20KB", 20000}, {"7", 7}, {"7B", 7}, {"1TiB", int64_t(1) << 40}};
    for (auto [text, want] : good)
        EXPECT_EQ(tp_parse_bytes(text), want) << text;
}

}  // namespace
