// Did-you-mean's distance: the banded Levenshtein distance equals the full
// dynamic programme wherever it is within the limit, and says "farther"
// (k + 1) everywhere else; names past TP_SUGGEST_MAX_LENGTH get no
// suggestion (a 5 MB identifier costs one length comparison per
// candidate, not 5 MB squared).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "compiler/diag/suggest.h"
}

namespace {

int full_distance(const std::string &a, const std::string &b)
{
    std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); i++)
        d[i][0] = int(i);
    for (size_t j = 0; j <= b.size(); j++)
        d[0][j] = int(j);
    for (size_t i = 1; i <= a.size(); i++)
        for (size_t j = 1; j <= b.size(); j++)
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
    return d[a.size()][b.size()];
}

TEST(SuggestBounds, BandedDistanceIsLevenshteinWithinTheLimit)
{
    std::mt19937 rng(7);
    auto word = [&](size_t n) {
        std::string s;
        for (size_t i = 0; i < n; i++)
            s += "abc"[rng() % 3];     // a small alphabet: many near misses
        return s;
    };
    for (int trial = 0; trial < 20000; trial++) {
        std::string a = word(rng() % 12), b = word(rng() % 12);
        int k = int(rng() % 5), want = full_distance(a, b);
        int got = tp_edit_distance_within(a.c_str(), b.c_str(), k);
        ASSERT_EQ(got, want <= k ? want : k + 1) << "'" << a << "' '" << b << "' k=" << k;
    }
}

TEST(SuggestBounds, OverlongWordsGetNoSuggestion)
{
    std::string near(TP_SUGGEST_MAX_LENGTH, 'x'), longer = near + "y", huge(5 << 20, 'x');
    EXPECT_EQ(tp_edit_distance_within(near.c_str(), near.c_str(), 2), 0);
    EXPECT_EQ(tp_edit_distance_within(longer.c_str(), longer.c_str(), 2), 3);
    const char *candidates[] = {near.c_str(), "layers"};
    EXPECT_EQ(tp_suggest(huge.c_str(), candidates, 2), nullptr);
    EXPECT_EQ(tp_suggest_sure(huge.c_str(), candidates, 2), nullptr);
    EXPECT_STREQ(tp_suggest("layrs", candidates, 2), "layers");
    EXPECT_STREQ(tp_suggest_sure("layrs", candidates, 2), "layers");
}

}  // namespace
