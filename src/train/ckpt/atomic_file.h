/* atomic_file.h: write a file so that readers see the old or the new content, never a part:
 * temporary file in the same folder, fsync, rename, fsync of the folder. Internal. */
#ifndef COHORT_CKPT_ATOMIC_FILE_H
#define COHORT_CKPT_ATOMIC_FILE_H

#include <stddef.h>

#include "cohort/status.h"

typedef struct atomic_file {
    int fd;
    char *path;  /* final name */
    char *tmp;   /* temporary name, in the same folder */
    char *buf;   /* write buffer */
    size_t used;
} atomic_file;

/* Create the temporary file. Errors name `path`. */
coh_status atomic_file_open(atomic_file *a, const char *path);
coh_status atomic_file_write(atomic_file *a, const void *data, size_t n);
/* Flush, fsync, rename over the final name, fsync the folder. On error the temporary file is
 * removed and the final name keeps its old content. Always releases a. */
coh_status atomic_file_commit(atomic_file *a);
/* Give up: remove the temporary file and release a. NULL-safe on a released struct. */
void atomic_file_abort(atomic_file *a);

/* Test hook: when set, called after the data is synced and before the rename; a non-OK return
 * aborts the save as a failed write would. Tests use it to inject failures and crashes. */
extern coh_status (*atomic_file_before_rename)(const char *tmp, const char *path);

#endif
