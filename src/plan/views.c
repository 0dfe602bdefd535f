/* views.c: the figures other tools print, for users comparing: DeepSpeed's ZeRO-2/ZeRO-3 model
 * state estimators and Hugging Face accelerate's estimate-memory; and parameter-count parsing. */
#include <ctype.h>
#include <errno.h>
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

coh_status coh_count_parse(const char *text, int64_t *out)
{
    if (!text || !*text || !(isdigit((unsigned char)*text) || *text == '.'))
        return coh_errf(COH_ERR_INVALID,
                        "invalid parameter count '%s': expected a positive number such as "
                        "124439808, 7.5e9, 7.5B or 350M",
                        text ? text : "");
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    double scale = 1;
    if (*end && !end[1]) {
        switch (toupper((unsigned char)*end)) {
        case 'K': scale = 1e3; end++; break;
        case 'M': scale = 1e6; end++; break;
        case 'B': case 'G': scale = 1e9; end++; break;
        case 'T': scale = 1e12; end++; break;
        default: break;
        }
    }
    v *= scale;
    if (*end || errno || !(v >= 1) || v > 1125899906842624.0 || v != floor(v))
        return coh_errf(COH_ERR_INVALID,
                        "invalid parameter count '%s': expected a positive whole number up to "
                        "2^50, such as 124439808, 7.5e9, 7.5B or 350M (suffixes K, M, B, T are "
                        "powers of 1000)",
                        text);
    *out = (int64_t)v;
    return COH_OK;
}
