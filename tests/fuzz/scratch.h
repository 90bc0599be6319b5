/* scratch.h: the fuzz targets' scratch files. Every loader reads paths, so
 * a target writes its input into a directory of this process's own
 * ($TMPDIR/tpcc-fuzz-PID), which is removed, with everything named
 * through tp_fuzz_path, when the process exits. */
#ifndef TPCC_FUZZ_SCRATCH_H
#define TPCC_FUZZ_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

/* The path of `name` inside the scratch directory (created on first use;
 * aborts when it cannot be). The string lives until exit. */
const char *tp_fuzz_path(const char *name);

/* A directory inside the scratch directory, created once. */
const char *tp_fuzz_mkdir(const char *name);

/* Writes size bytes to path, replacing it. 0, or -1 (the input is then
 * skipped: a full disk is not a finding). */
int tp_fuzz_write(const char *path, const uint8_t *data, size_t size);

/* An input of several files: their bytes joined by this line (bundle.py
 * writes them so). */
#define TP_FUZZ_SEPARATOR "\n#tpcc-fuzz-file\n"

/* The input's files, at most max: parts[k] and lens[k]; the last part
 * holds the rest. Returns how many. */
int tp_fuzz_split(const uint8_t *data, size_t size, const uint8_t *parts[], size_t lens[], int max);

#endif /* TPCC_FUZZ_SCRATCH_H */
