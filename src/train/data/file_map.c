/* file_map.c: maps a whole file read-only, with errors that name it. */
#include "train/data/file_map.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

coh_status file_map_open(file_map *m, const char *path)
{
    m->data = NULL;
    m->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return coh_errf(errno == ENOENT ? COH_ERR_NOT_FOUND : COH_ERR_IO, "cannot open '%s': %s",
                        path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return coh_errf(COH_ERR_IO, "cannot read '%s': not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return coh_errf(COH_ERR_IO, "cannot map '%s': %s", path, strerror(e));
        }
        m->data = p;
        m->size = (size_t)st.st_size;
    }
    close(fd);
    return COH_OK;
}

void file_map_close(file_map *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}
