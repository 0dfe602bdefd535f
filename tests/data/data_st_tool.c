/* data_st_tool.c: test helper: `write PATH` saves known tensors with cohort's safetensors writer;
 * `read PATH` loads a file with cohort's reader and prints each tensor as a JSON line (name,
 * dtype, shape, values as numbers) for test_data_st_python.py to compare; `state-rows CKPT ROWS`
 * saves the training state of checkpoint CKPT again, checksummed, with its loader's global_rows
 * set to ROWS (a state no trainer writes, for the tests of resume's checks). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/checkpoint.h"
#include "cohort/train_ckpt.h"

static int write_known(const char *path)
{
    static float w[3][4], b[5];
    static int64_t idx[2][2] = {{-1, 1}, {INT64_MAX, INT64_MIN}};
    static uint16_t bf[2] = {0x3F80, 0xBF00}; /* 1.0, -0.5 */
    static uint8_t mask[3] = {1, 0, 255};
    static int32_t one = 42;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            w[i][j] = (float)(i * 4 + j) * 0.25f - 1.0f;
    for (int i = 0; i < 5; i++)
        b[i] = 1.0f / (float)(i + 1);
    coh_st_tensor t[] = {
        {.name = "transformer.h.0.attn.c_attn.weight", .dtype = COH_ST_F32, .ndim = 2,
         .shape = {3, 4}, .data = w},
        {.name = "transformer.h.0.attn.c_attn.bias", .dtype = COH_ST_F32, .ndim = 1,
         .shape = {5}, .data = b},
        {.name = "indices", .dtype = COH_ST_I64, .ndim = 2, .shape = {2, 2}, .data = idx},
        {.name = "half", .dtype = COH_ST_BF16, .ndim = 1, .shape = {2}, .data = bf},
        {.name = "mask", .dtype = COH_ST_U8, .ndim = 1, .shape = {3}, .data = mask},
        {.name = "scalar", .dtype = COH_ST_I32, .ndim = 0, .data = &one},
        {.name = "empty", .dtype = COH_ST_F32, .ndim = 2, .shape = {0, 3}},
    };
    coh_st_meta meta[] = {{"format", "pt"}};
    coh_status st = coh_st_save(path, t, sizeof t / sizeof t[0], meta, 1);
    if (st != COH_OK) {
        fprintf(stderr, "data_st_tool: %s\n", coh_last_error());
        return 1;
    }
    return 0;
}

static void print_values(const coh_st_tensor *t)
{
    size_t n = t->nbytes / coh_st_dtype_size(t->dtype);
    float *f = malloc((n ? n : 1) * sizeof *f);
    const unsigned char *p = t->data;
    for (size_t i = 0; i < n; i++) {
        if (i)
            printf(", ");
        switch (t->dtype) {
        case COH_ST_F32: {
            float v;
            memcpy(&v, p + 4 * i, 4);
            printf("%.9g", v);
            break;
        }
        case COH_ST_F64: {
            double v;
            memcpy(&v, p + 8 * i, 8);
            printf("%.17g", v);
            break;
        }
        case COH_ST_I64: {
            int64_t v;
            memcpy(&v, p + 8 * i, 8);
            printf("%" PRId64, v);
            break;
        }
        case COH_ST_I32: {
            int32_t v;
            memcpy(&v, p + 4 * i, 4);
            printf("%" PRId32, v);
            break;
        }
        case COH_ST_U8:
            printf("%u", p[i]);
            break;
        default: /* F16 / BF16: through the reader's conversion */
            printf("null");
        }
    }
    free(f);
}

static int read_file(const char *path)
{
    coh_st_file *f;
    if (coh_st_open(path, &f) != COH_OK) {
        fprintf(stderr, "data_st_tool: %s\n", coh_last_error());
        return 1;
    }
    for (size_t i = 0; i < coh_st_count(f); i++) {
        const coh_st_tensor *t = coh_st_at(f, i);
        printf("{\"name\": \"%s\", \"dtype\": \"%s\", \"shape\": [", t->name,
               coh_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
        printf("], \"values\": [");
        if (t->dtype == COH_ST_F16 || t->dtype == COH_ST_BF16) {
            size_t n = t->nbytes / 2;
            float *v = malloc((n ? n : 1) * sizeof *v);
            coh_st_read(f, t->name, COH_ST_F32, t->ndim, t->shape, v);
            for (size_t k = 0; k < n; k++)
                printf("%s%.9g", k ? ", " : "", v[k]);
            free(v);
        } else
            print_values(t);
        printf("]}\n");
    }
    coh_st_close(f);
    return 0;
}

static int state_rows(const char *ckpt, const char *rows)
{
    static const char *const keys[] = {"threads", "micro_batch", "grad_accum", "seq",
                                       "zero_index"};
    char path[4200], *end;
    coh_train_state s;
    coh_st_file *f = NULL;
    coh_st_tensor ten[16];
    coh_st_meta meta[sizeof keys / sizeof *keys];
    size_t nmeta = 0, nten = 0;
    coh_status st = coh_ckpt_state_path(ckpt, path, sizeof path);
    if (!st)
        st = coh_state_open(path, &s, &f);
    for (size_t i = 0; !st && i < coh_st_count(f) && nten < 16; i++)
        ten[nten++] = *coh_st_at(f, i);
    for (size_t i = 0; !st && i < sizeof keys / sizeof *keys; i++)
        if (coh_st_meta_get(f, keys[i]))
            meta[nmeta++] = (coh_st_meta){keys[i], coh_st_meta_get(f, keys[i])};
    if (!st) {
        s.data.global_rows = strtoull(rows, &end, 10);
        st = coh_state_save(path, &s, ten, nten, meta, nmeta);
    }
    coh_st_close(f);
    if (st != COH_OK) {
        fprintf(stderr, "data_st_tool: %s\n", coh_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "state-rows"))
        return state_rows(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "write"))
        return write_known(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "read"))
        return read_file(argv[2]);
    fprintf(stderr, "usage: data_st_tool write|read PATH | state-rows CKPT ROWS\n");
    return 2;
}
