/* file_map.h: a whole file mapped read-only (empty files need no mapping). Internal. */
#ifndef COHORT_DATA_FILE_MAP_H
#define COHORT_DATA_FILE_MAP_H

#include <stddef.h>

#include "cohort/status.h"

typedef struct file_map {
    const char *data; /* NULL for an empty file */
    size_t size;
} file_map;

/* Errors name the path: COH_ERR_NOT_FOUND, COH_ERR_IO (also for a folder). */
coh_status file_map_open(file_map *m, const char *path);
void file_map_close(file_map *m);

#endif
