// util/map.c: the hash map behind the name lookups that keep large
// inputs linear.
#include <gtest/gtest.h>

#include <string>

extern "C" {
#include "util/map.h"
}

namespace {

TEST(Map, FirstValueWinsAndMissingKeysAreMinusOne)
{
    tp_map m;
    tp_map_init(&m);
    EXPECT_EQ(tp_map_gets(&m, "a"), -1);
    EXPECT_EQ(tp_map_puts(&m, "a", 1), 1);
    EXPECT_EQ(tp_map_puts(&m, "a", 2), 1);      // a repeat: the first value stays
    EXPECT_EQ(tp_map_gets(&m, "a"), 1);
    EXPECT_EQ(tp_map_puts(&m, "", 7), 7);       // the empty key is a key
    EXPECT_EQ(tp_map_gets(&m, ""), 7);
    EXPECT_EQ(tp_map_gets(&m, "b"), -1);
    tp_map_free(&m);
    EXPECT_EQ(tp_map_gets(&m, "a"), -1);        // freed is empty again
}

TEST(Map, KeysAreBytesNotStrings)
{
    tp_map m;
    tp_map_init(&m);
    const char with_nul[] = {'a', '\0', 'b'};
    EXPECT_EQ(tp_map_put(&m, with_nul, sizeof with_nul, 3), 3);
    EXPECT_EQ(tp_map_gets(&m, "a"), -1);
    EXPECT_EQ(tp_map_get(&m, with_nul, sizeof with_nul), 3);
    EXPECT_EQ(tp_map_get(&m, "ab", 2), -1);
    tp_map_free(&m);
}

TEST(Map, HoldsEveryKeyAsItGrows)
{
    tp_map m;
    tp_map_init(&m);
    for (int i = 0; i < 100000; i++)
        ASSERT_EQ(tp_map_puts(&m, ("key" + std::to_string(i)).c_str(), i), i);
    EXPECT_EQ(m.count, 100000u);
    for (int i = 0; i < 100000; i++)
        ASSERT_EQ(tp_map_gets(&m, ("key" + std::to_string(i)).c_str()), i);
    EXPECT_EQ(tp_map_gets(&m, "key100000"), -1);
    tp_map_free(&m);
}

}  // namespace
