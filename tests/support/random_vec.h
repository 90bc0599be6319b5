// random_vec.h: seeded uniform floats, the inputs of the kernel and
// backend tests.
#ifndef TPCC_TEST_RANDOM_VEC_H
#define TPCC_TEST_RANDOM_VEC_H

#include <cstddef>
#include <random>
#include <vector>

namespace tpcc_test {

inline std::vector<float> random_vec(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f)
{
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float &x : v)
        x = dist(gen);
    return v;
}

} // namespace tpcc_test

#endif // TPCC_TEST_RANDOM_VEC_H
