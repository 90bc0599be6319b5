// Token files as the training loop reads them, made in memory: NumPy's
// .npy (version 1.0, the header padded as NumPy pads it) and llm.c's .bin
// (dev/data/data_common.py's write_datafile: 256 int32 of header, then the
// tokens).
#ifndef TPCC_TEST_TOKEN_FILES_H
#define TPCC_TEST_TOKEN_FILES_H

#include <cstdint>
#include <string>
#include <vector>

namespace tpcc_test {

template <typename T> std::string raw(const std::vector<T> &v)
{
    return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

// descr: '<i4', '<i8', '<u2', ...; shape: "(160,)".
inline std::string npy(const std::string &descr, const std::string &data, const std::string &shape)
{
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    while ((10 + h.size() + 1) % 64)
        h += ' ';
    h += '\n';
    std::string out = "\x93NUMPY";
    out += '\x01';
    out += '\x00';
    out += char(h.size() & 0xff);
    out += char(h.size() >> 8);
    return out + h + data;
}

// magic 20240520 version 1: uint16 tokens; 20240801 version 7: uint32.
// count < 0: the header says how many there are.
template <typename T> std::string llmc(int32_t magic, int32_t version, const std::vector<T> &toks, int32_t count = -1)
{
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count < 0 ? int32_t(toks.size()) : count;
    return raw(header) + raw(toks);
}

}  // namespace tpcc_test

#endif  // TPCC_TEST_TOKEN_FILES_H
