/* file.c: reading a whole file into memory (util/file.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/file.h"

coh_status util_read_file(const char *path, size_t max, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return coh_errf(COH_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    coh_status st = COH_OK;
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (max && cap > max) {
            st = coh_errf(COH_ERR_INVALID, "'%s' is over %zu bytes", path, max);
            break;
        }
        char *nb = realloc(buf, cap *= 2);
        if (!nb)
            free(buf);
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (!st && !buf)
        st = coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", path);
    else if (!st && err)
        st = coh_errf(COH_ERR_IO, "cannot read '%s'", path);
    else if (!st && max && n > max)
        st = coh_errf(COH_ERR_INVALID, "'%s' is over %zu bytes", path, max);
    if (st) {
        free(buf);
        return st;
    }
    *text = buf;
    *len = n;
    return COH_OK;
}
