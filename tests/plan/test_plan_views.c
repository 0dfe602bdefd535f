/* test_plan_views.c: the compatibility views reproduce the figures the other tools publish:
 * DeepSpeed's documented estimator tables for a t5-3b-sized model (2851M parameters, 32M largest
 * layer, 1 node x 8 GPUs) and Hugging Face's Model Memory Utility figures for a ViT-L model. */
#include <stdio.h>

#include "check.h"
#include "cohort/plan.h"

/* DeepSpeed prints bytes / 2^30 with two decimals (labelled "GB"). */
static void check_gib(uint64_t bytes, const char *documented)
{
    char printed[32];
    snprintf(printed, sizeof printed, "%.2f", (double)bytes / 1073741824.0);
    CHECK_STR(printed, documented);
}

/* docs/code-docs/source/memory.rst, estimate_zero3_model_states_mem_needs_all_cold(
 * total_params=2851e6, largest_layer_params=32e6, num_gpus_per_node=8, num_nodes=1). */
static void test_deepspeed_zero3_table(void)
{
    static const struct {
        int opt, param, init;
        const char *cpu, *gpu;
    } rows[] = {
        {1, 1, 1, "71.69", "0.12"}, {1, 1, 0, "127.45", "0.12"}, {1, 0, 1, "63.72", "0.78"},
        {1, 0, 0, "127.45", "0.78"}, {0, 0, 1, "1.43", "6.09"},   {0, 0, 0, "127.45", "6.09"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t cpu, gpu;
        coh_ds_zero3_mem(2851e6, 32e6, 8, 1, rows[i].opt, rows[i].param, rows[i].init, 1.5, &cpu,
                         &gpu);
        check_gib(cpu, rows[i].cpu);
        check_gib(gpu, rows[i].gpu);
    }
    /* exact bytes of the no-offload row: 4 x 32e6 + int(18 x 2851e6 / 8) */
    uint64_t cpu, gpu;
    coh_ds_zero3_mem(2851e6, 32e6, 8, 1, 0, 0, 1, 1.5, &cpu, &gpu);
    CHECK_INT(gpu, 128000000LL + 6414750000LL);
    CHECK_INT(cpu, 1536000000LL); /* 32e6 x 4 x 8 x 1.5 */
}

/* The same page's ZeRO-2 table (total_params=2851e6, 8 GPUs): 127.45 / 5.31 with the optimizer
 * offloaded, 127.45 on the host without. Its per-GPU 15.93 without offload came from the older
 * 4 Psi + 16 Psi / N; the current source computes 2 Psi + 18 Psi / N (16-bit parameters, then
 * 16-bit and fp32 gradients, fp32 master weights and Adam states partitioned) = 11.28. */
static void test_deepspeed_zero2_table(void)
{
    uint64_t cpu, gpu;
    coh_ds_zero2_mem(2851e6, 8, 1, 1, 1.5, &cpu, &gpu);
    check_gib(cpu, "127.45");
    check_gib(gpu, "5.31");
    coh_ds_zero2_mem(2851e6, 8, 1, 0, 1.5, &cpu, &gpu);
    check_gib(cpu, "127.45");
    CHECK_INT(gpu, 5702000000LL + 6414750000LL);
    check_gib(gpu, "11.28");
    /* two nodes: the host formula uses the GPUs of one node, the GPU formula all of them */
    coh_ds_zero2_mem(2851e6, 8, 2, 0, 1.5, &cpu, &gpu);
    CHECK_INT(gpu, 5702000000LL + 3207375000LL);
    check_gib(cpu, "127.45");
}

/* The Model Memory Utility's published result for timm/vit_large_patch16_384 (304,715,752
 * parameters; largest layer an MLP fc1 of 1024 x 4096 + 4096): float32 total 1,218,863,008 B
 * ("1.14 GB" = GiB), largest "16.02 MB" (MiB), training peak 4,875,452,032 B (the "step");
 * float16 largest "8.01 MB", training peak 2,437,726,016 B (the optimizer states). */
static void test_accelerate_rows(void)
{
    coh_accel_row rows[4];
    coh_accel_rows(304715752, 1024 * 4096 + 4096, rows);
    CHECK_STR(rows[0].dtype, "float32");
    CHECK_INT(rows[0].total_bytes, 1218863008LL);
    CHECK_INT(rows[0].training_bytes, 4875452032LL);
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f", (double)rows[0].largest_layer_bytes / 1048576.0);
    CHECK_STR(buf, "16.02");
    snprintf(buf, sizeof buf, "%.2f", (double)rows[0].total_bytes / 1073741824.0);
    CHECK_STR(buf, "1.14");
    CHECK_STR(rows[1].dtype, "float16");
    CHECK_INT(rows[1].training_bytes, 2437726016LL);
    snprintf(buf, sizeof buf, "%.2f", (double)rows[1].largest_layer_bytes / 1048576.0);
    CHECK_STR(buf, "8.01");
    CHECK_INT(rows[2].total_bytes, 304715752LL); /* int8 */
    CHECK_INT(rows[2].training_bytes, 0);        /* "N/A" */
    CHECK_INT(rows[3].total_bytes, 304715752LL / 2);
}

int main(void)
{
    RUN(test_deepspeed_zero3_table);
    RUN(test_deepspeed_zero2_table);
    RUN(test_accelerate_rows);
    return CHECK_REPORT();
}
