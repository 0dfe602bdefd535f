/* test_files.h: temporary folders and whole-file reads for cohort's C tests. */
#ifndef COHORT_TESTS_TEST_FILES_H
#define COHORT_TESTS_TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

/* Make a fresh folder $TMPDIR/<prefix>-XXXXXX (default /tmp) into buf; 0 on success. */
static inline int test_tmpdir(char *buf, size_t cap, const char *prefix)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, cap, "%s/%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", prefix);
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* Remove a folder and everything below it; a failure is reported, not fatal. */
static inline void test_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* The whole file, NUL-terminated (n excludes the NUL); NULL when it cannot be read. */
static inline char *test_slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!buf) {
        fclose(f);
        return NULL;
    }
    *n = fread(buf, 1, (size_t)len, f);
    buf[*n] = '\0';
    fclose(f);
    return buf;
}

#endif
