/* file.h: reading a whole file into memory, the one way the library does it. */
#ifndef COHORT_UTIL_FILE_H
#define COHORT_UTIL_FILE_H

#include <stddef.h>

#include "cohort/status.h"

/* The bytes of `path` into *text (malloc'd, the caller frees; not NUL-terminated) and *len.
 * COH_ERR_IO "cannot open 'path': reason" or "cannot read 'path'", COH_ERR_NOMEM, and with
 * max > 0 COH_ERR_INVALID when the file holds more than max bytes. */
coh_status util_read_file(const char *path, size_t max, char **text, size_t *len);

#endif
