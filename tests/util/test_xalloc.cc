// util/xalloc.c: running out of memory ends the process with a message
// that names the program (tpcc by default, tprun once tprun's main set it).
#include <gtest/gtest.h>

extern "C" {
#include "util/xalloc.h"
}

namespace {

TEST(XallocDeath, OutOfMemoryNamesTpccByDefault)
{
    EXPECT_DEATH(tp_out_of_memory(), "^tpcc: out of memory\n");
}

TEST(XallocDeath, OutOfMemoryNamesTheProgramSet)
{
    EXPECT_DEATH(
        {
            tp_set_program_name("tprun");
            tp_out_of_memory();
        },
        "^tprun: out of memory\n");
}

TEST(XallocDeath, OverflowingArraySizeIsOutOfMemory)
{
    EXPECT_DEATH(tp_xreallocarray(nullptr, SIZE_MAX / 2, 4), "^tpcc: out of memory\n");
}

}  // namespace
