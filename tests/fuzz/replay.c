/* replay.c: a fuzz target without libFuzzer, for the test suite: main
 * feeds every file named on the command line, or held in a directory
 * named there, to LLVMFuzzerTestOneInput, so the committed corpus and
 * every input that once crashed run through the same code in the normal
 * build and under the sanitizers. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* libFuzzer fails an input whose allocation exceeds its memory limit (a
 * loader trusting a size the file cannot hold); so does the replay, with
 * the heap capped. Not under AddressSanitizer, whose shadow memory the cap
 * would count: there the release build's replay is the one that fails. */
#define HEAP_LIMIT ((rlim_t)1 << 31)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 1 << 16, size = 0, n;
    uint8_t *data = malloc(cap);
    while (data && (n = fread(data + size, 1, cap - size, f)) > 0)
        if ((size += n) == cap && !(data = realloc(data, cap *= 2)))
            break;
    int rc = !data || ferror(f) ? -1 : 0;
    fclose(f);
    if (rc) {
        fprintf(stderr, "%s: cannot read\n", path);
    } else {
        printf("%s (%zu bytes)\n", path, size);
        fflush(stdout);
        LLVMFuzzerTestOneInput(data, size);
    }
    free(data);
    return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static int replay(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st)) {
        perror(path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        ++*count;
        return replay_file(path);
    }
    struct dirent **entries;
    int n = scandir(path, &entries, NULL, by_name), rc = n < 0 ? -1 : 0;
    if (n < 0)
        perror(path);
    for (int i = 0; i < n; i++) {
        if (entries[i]->d_name[0] != '.' && !rc) {
            char child[4096];
            snprintf(child, sizeof child, "%s/%s", path, entries[i]->d_name);
            rc = replay(child, count);
        }
        free(entries[i]);
    }
    if (n >= 0)
        free(entries);
    return rc;
}

int main(int argc, char **argv)
{
    int count = 0;
#ifndef UNDER_ASAN
    struct rlimit heap = {HEAP_LIMIT, HEAP_LIMIT};
    if (setrlimit(RLIMIT_DATA, &heap))
        perror("setrlimit");
#endif
    for (int i = 1; i < argc; i++)
        if (replay(argv[i], &count))
            return 1;
    printf("%d inputs replayed\n", count);
    return 0;
}
