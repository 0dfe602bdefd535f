/* fuzz_safetensors.c: libFuzzer target for the safetensors reader: any bytes are accepted or
 * refused cleanly; an accepted file's tensors lie inside it and read back by name. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_st_file *f;
    if (coh_st_open_memory(data, size, "fuzz.safetensors", &f) != COH_OK)
        return 0;
    for (size_t i = 0; i < coh_st_count(f); i++) {
        const coh_st_tensor *t = coh_st_at(f, i);
        const uint8_t *p = t->data;
        if (p < data || p + t->nbytes > data + size || coh_st_find(f, t->name) == NULL)
            abort();
        int wide = t->dtype == COH_ST_F16 || t->dtype == COH_ST_BF16;
        size_t n = t->nbytes * (wide ? 2 : 1);
        void *buf = malloc(n ? n : 1);
        if (coh_st_read(f, t->name, wide ? COH_ST_F32 : t->dtype, t->ndim, t->shape, buf) !=
            COH_OK)
            abort();
        if (!wide && n && memcmp(buf, p, n) != 0)
            abort();
        free(buf);
    }
    coh_st_close(f);
    return 0;
}
