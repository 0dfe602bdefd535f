/* views.c: the figures other tools print, for users comparing: DeepSpeed's ZeRO-2/ZeRO-3 model
 * state estimators and Hugging Face accelerate's estimate-memory; and parameter-count parsing. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

/* Python's int() of a non-negative float. */
static uint64_t py_int(double v)
{
    return v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX : (uint64_t)v;
}

void coh_ds_zero2_mem(double total_params, int gpus_per_node, int nodes, int cpu_offload,
                      double buffer_factor, uint64_t *cpu_bytes, uint64_t *gpu_bytes)
{
    double total_gpus = (double)nodes * gpus_per_node;
    if (cpu_offload) {
        *gpu_bytes = py_int(2 * total_params);
        *cpu_bytes = py_int(total_params * fmax(4 * total_gpus, 16) * buffer_factor);
    } else {
        /* 2 bytes of 16-bit parameters, and 18 partitioned: 16-bit and fp32 gradients, fp32
         * master parameters, Adam m and v. */
        *gpu_bytes = py_int(2 * total_params) + py_int(18 * total_params / total_gpus);
        *cpu_bytes = py_int(total_params * 4 * gpus_per_node * buffer_factor);
    }
}

void coh_ds_zero3_mem(double total_params, double largest_layer_params, int gpus_per_node,
                      int nodes, int offload_optimizer, int offload_params, int zero_init,
                      double buffer_factor, uint64_t *cpu_bytes, uint64_t *gpu_bytes)
{
    double total_gpus = (double)nodes * gpus_per_node, gpus_factor = 1.0 / nodes;
    double largest_layer_memory = 4 * largest_layer_params;
    double cpu;
    if (offload_optimizer && offload_params) {
        *gpu_bytes = py_int(largest_layer_memory);
        cpu = zero_init ? total_params * 18 * gpus_factor * buffer_factor
                        : total_params * fmax(4 * gpus_per_node, 18 * gpus_factor) * buffer_factor;
    } else if (offload_optimizer) {
        *gpu_bytes = py_int(largest_layer_memory + (double)py_int(2 * total_params / total_gpus));
        cpu = zero_init ? total_params * 16 * gpus_factor * buffer_factor
                        : total_params * fmax(4 * gpus_per_node, 16 * gpus_factor) * buffer_factor;
    } else {
        *gpu_bytes = py_int(largest_layer_memory + (double)py_int(18 * total_params / total_gpus));
        cpu = zero_init ? largest_layer_params * 4 * gpus_per_node * buffer_factor
                        : total_params * 4 * gpus_per_node * buffer_factor;
    }
    *cpu_bytes = py_int(cpu);
}

void coh_accel_rows(int64_t params, int64_t largest_layer, coh_accel_row rows[4])
{
    /* accelerate sizes the model in fp32 and scales: total 4P, /2, /4, /8. Training with Adam
     * is the peak of its stages: fp32 4x the fp32 size (model, gradients, 2 states, step);
     * 16-bit mixed 2x the fp32 size (the optimizer states). int8/int4 do not train. */
    static const char *names[4] = {"float32", "float16", "int8", "int4"};
    static const int div[4] = {1, 2, 4, 8};
    uint64_t fp32 = (uint64_t)params * 4, largest = (uint64_t)largest_layer * 4;
    for (int i = 0; i < 4; i++) {
        rows[i].dtype = names[i];
        rows[i].total_bytes = fp32 / (uint64_t)div[i];
        rows[i].largest_layer_bytes = largest / (uint64_t)div[i];
        rows[i].training_bytes = i == 0 ? 4 * fp32 : i == 1 ? 2 * fp32 : 0;
    }
}

static coh_status count_syntax_error(const char *text)
{
    return coh_errf(COH_ERR_INVALID,
                    "invalid parameter count '%s': expected a positive number such as "
                    "124439808, 7.5e9, 7.5B or 350M",
                    text ? text : "");
}

/* Read in decimal, not through a double: 8.2 has no exact double, and 8.2 x 1e9 came out
 * 8199999999.999999, which was refused as not a whole number. The count is the digits of
 * "<digits>[.<digits>][e[+-]<digits>][K|M|B|G|T]" times a power of ten, computed exactly. */
coh_status coh_count_parse(const char *text, int64_t *out)
{
    if (!text || !*text || !(isdigit((unsigned char)*text) || *text == '.'))
        return count_syntax_error(text);
    const char *p = text, *first = NULL, *last = NULL; /* the first and last nonzero digits */
    long frac = 0, exp10 = 0, trailing = 0;           /* digits after the point; after `last` */
    int any = 0, point = 0;
    for (;; p++) {
        if (*p == '.' && !point) {
            point = 1;
            continue;
        }
        if (!isdigit((unsigned char)*p))
            break;
        any = 1;
        frac += point;
        if (*p != '0') {
            first = first ? first : p;
            last = p;
            trailing = 0;
        } else {
            trailing++;
        }
    }
    if (!any)
        return count_syntax_error(text);
    if (*p == 'e' || *p == 'E') {
        int neg = p[1] == '-';
        p += 1 + (p[1] == '-' || p[1] == '+');
        if (!isdigit((unsigned char)*p))
            return count_syntax_error(text);
        for (; isdigit((unsigned char)*p); p++)
            exp10 = exp10 < 100000 ? exp10 * 10 + (*p - '0') : exp10; /* far past 2^50 */
        exp10 = neg ? -exp10 : exp10;
    }
    static const char suffixes[] = "KMBGT";
    static const int thousands[] = {1, 2, 3, 3, 4};
    const char *sfx = *p ? strchr(suffixes, toupper((unsigned char)*p)) : NULL;
    if (sfx) {
        exp10 += 3L * thousands[sfx - suffixes];
        p++;
    }
    if (*p)
        return count_syntax_error(text);
    /* the significant digits times 10^shift; a zero has none */
    long shift = exp10 - frac + trailing, ndigits = 0;
    uint64_t v = 0;
    for (const char *d = first; first && d <= last; d++)
        if (*d != '.') {
            ndigits++;
            v = ndigits <= 17 ? v * 10 + (uint64_t)(*d - '0') : v;
        }
    int whole = first && shift >= 0, small = ndigits + shift <= 16; /* 2^50 < 10^16 */
    for (long i = 0; whole && small && i < shift; i++)
        v *= 10;
    if (!whole || !small || v > 1125899906842624ull)
        return coh_errf(COH_ERR_INVALID,
                        "invalid parameter count '%s': expected a positive whole number up to "
                        "2^50, such as 124439808, 7.5e9, 7.5B or 350M (suffixes K, M, B, T are "
                        "powers of 1000)",
                        text);
    *out = (int64_t)v;
    return COH_OK;
}
