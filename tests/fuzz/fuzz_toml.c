/* fuzz_toml.c: libFuzzer entry point for the settings files. The input is
 * written to a scratch pyproject.toml and a .tpcc.toml and read as each
 * (settings.c over toml.c): a [tool.tpcc] table, or the whole file. */
#include <stdint.h>
#include <stdlib.h>
#include "compiler/driver/settings.h"
#include "tests/fuzz/scratch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const files[] = {"pyproject.toml", ".tpcc.toml"};
    for (int i = 0; i < 2; i++) {
        const char *path = tp_fuzz_path(files[i]);
        if (tp_fuzz_write(path, data, size))
            return 0;
        tp_settings s;
        char err[1024];
        if (tp_settings_read(&s, path, i == 0, err, sizeof err) == 1)
            tp_settings_free(&s);
    }
    return 0;
}
