/* scratch.c: see scratch.h. */
#define _GNU_SOURCE   /* memmem */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/fuzz/scratch.h"

#define MAX_PATHS 64

static char dir[512];
static char *paths[MAX_PATHS];   /* in creation order; removed in reverse */
static int npaths;

static void remove_all(void)
{
    while (npaths > 0)
        remove(paths[--npaths]);
    rmdir(dir);
}

static const char *scratch_dir(void)
{
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/tpcc-fuzz-%d", tmp && *tmp ? tmp : "/tmp", (int)getpid());
        if (mkdir(dir, 0700) && errno != EEXIST) {
            perror("fuzz: scratch directory");
            abort();
        }
        atexit(remove_all);
    }
    return dir;
}

const char *tp_fuzz_path(const char *name)
{
    for (int i = 0; i < npaths; i++)
        if (!strcmp(paths[i] + strlen(scratch_dir()) + 1, name))
            return paths[i];
    if (npaths == MAX_PATHS) {
        fprintf(stderr, "fuzz: more than %d scratch paths\n", MAX_PATHS);
        abort();
    }
    size_t n = strlen(scratch_dir()) + strlen(name) + 2;
    char *p = malloc(n);
    if (!p)
        abort();
    snprintf(p, n, "%s/%s", dir, name);
    return paths[npaths++] = p;
}

const char *tp_fuzz_mkdir(const char *name)
{
    const char *p = tp_fuzz_path(name);
    if (mkdir(p, 0700) && errno != EEXIST) {
        perror("fuzz: scratch directory");
        abort();
    }
    return p;
}

int tp_fuzz_write(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t wrote = size ? fwrite(data, 1, size, f) : 0;
    return fclose(f) != 0 || wrote != size ? -1 : 0;
}

int tp_fuzz_split(const uint8_t *data, size_t size, const uint8_t *parts[], size_t lens[], int max)
{
    const uint8_t *p = data, *end = data + size;
    size_t seplen = strlen(TP_FUZZ_SEPARATOR);
    int n = 0;
    while (n < max) {
        const uint8_t *next = n + 1 < max ? memmem(p, (size_t)(end - p), TP_FUZZ_SEPARATOR, seplen) : NULL;
        parts[n] = p;
        lens[n++] = (size_t)((next ? next : end) - p);
        if (!next)
            break;
        p = next + seplen;
    }
    return n;
}
