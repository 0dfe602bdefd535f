/* dtype.c: the safetensors element types: names, sizes, and half-precision to float. */
#include <string.h>

#include "cohort/checkpoint.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[COH_ST_COUNT] = {
    [COH_ST_F32] = {"F32", 4}, [COH_ST_F16] = {"F16", 2}, [COH_ST_BF16] = {"BF16", 2},
    [COH_ST_F64] = {"F64", 8}, [COH_ST_I64] = {"I64", 8}, [COH_ST_I32] = {"I32", 4},
    [COH_ST_I16] = {"I16", 2}, [COH_ST_I8] = {"I8", 1},   [COH_ST_U8] = {"U8", 1},
    [COH_ST_BOOL] = {"BOOL", 1},
};

const char *coh_st_dtype_name(coh_st_dtype d)
{
    return (unsigned)d < COH_ST_COUNT ? dtypes[d].name : "?";
}

size_t coh_st_dtype_size(coh_st_dtype d)
{
    return (unsigned)d < COH_ST_COUNT ? dtypes[d].size : 0;
}

coh_status coh_st_dtype_parse(const char *name, coh_st_dtype *out)
{
    for (int d = 0; d < COH_ST_COUNT; d++)
        if (name && !strcmp(name, dtypes[d].name)) {
            *out = (coh_st_dtype)d;
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID, "unsupported dtype '%s': valid are F32, F16, BF16, F64, "
                    "I64, I32, I16, I8, U8, BOOL", name ? name : "");
}
