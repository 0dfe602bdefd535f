/* parallel_config.c: defaults and the name tables of a parallel configuration's choices (the one
 * parser of --strategy, --precision, --recompute, --schedule and --offload), and what cohort's
 * own trainer can run of it. */
#include <stdio.h>
#include <string.h>

#include "cohort/parallel_config.h"

void coh_parallel_config_init(coh_parallel_config *c)
{
    memset(c, 0, sizeof *c);
    c->dp = c->tp = c->pp = 1;
    c->strategy = COH_STRATEGY_SINGLE;
    c->micro_batch = 1;
    c->schedule = COH_SCHED_1F1B;
    c->virtual_stages = 1;
    c->precision = COH_PREC_FP32;
    c->recompute = COH_RECOMPUTE_NONE;
    c->offload = COH_OFFLOAD_NONE;
}

size_t coh_parallel_bucket_bytes(const coh_parallel_config *c)
{
    return c->bucket_bytes ? c->bucket_bytes : (size_t)25 << 20;
}

static const char *const STRATEGY[COH_STRATEGY_COUNT] = {"single", "dp",    "ddp",
                                                         "zero1",  "zero2", "zero3"};
static const char *const PRECISION[COH_PREC_COUNT] = {"fp32", "bf16-mixed", "fp16-mixed"};
static const char *const RECOMPUTE[COH_RECOMPUTE_COUNT] = {"none", "selective", "full"};
static const char *const SCHEDULE[COH_SCHED_COUNT] = {"1f1b", "gpipe", "interleaved", "naive"};
static const char *const OFFLOAD[COH_OFFLOAD_COUNT] = {"none", "optimizer", "optimizer+params"};

static int find(const char *const *names, int n, const char *text)
{
    for (int i = 0; text && i < n; i++)
        if (!strcmp(text, names[i]))
            return i;
    return -1;
}

/* "invalid <what> 'x': valid are a, b, c" */
static coh_status invalid(const char *what, const char *text, const char *const *names, int n)
{
    char valid[160] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof valid; i++)
        len += (size_t)snprintf(valid + len, sizeof valid - len, "%s%s", i ? ", " : "", names[i]);
    return coh_errf(COH_ERR_INVALID, "invalid %s '%s': valid are %s", what, text ? text : "",
                    valid);
}

#define NAME_TABLE(type, fn, table, count, what)                                                 \
    const char *coh_##fn##_name(type v)                                                          \
    {                                                                                            \
        return (unsigned)v < (unsigned)(count) ? table[v] : "unknown";                           \
    }                                                                                            \
    coh_status coh_##fn##_parse(const char *text, type *out)                                     \
    {                                                                                            \
        int i = find(table, count, text);                                                        \
        if (i < 0)                                                                               \
            return invalid(what, text, table, count);                                            \
        *out = (type)i;                                                                          \
        return COH_OK;                                                                           \
    }

NAME_TABLE(coh_strategy, strategy, STRATEGY, COH_STRATEGY_COUNT, "strategy")
NAME_TABLE(coh_precision, precision, PRECISION, COH_PREC_COUNT, "precision")
NAME_TABLE(coh_recompute, recompute, RECOMPUTE, COH_RECOMPUTE_COUNT, "recompute")
NAME_TABLE(coh_schedule, schedule, SCHEDULE, COH_SCHED_COUNT, "schedule")
NAME_TABLE(coh_offload, offload, OFFLOAD, COH_OFFLOAD_COUNT, "offload")

int coh_strategy_is_multiprocess(coh_strategy s)
{
    return s >= COH_STRATEGY_DDP && s < COH_STRATEGY_COUNT;
}

int coh_strategy_zero_stage(coh_strategy s)
{
    return s >= COH_STRATEGY_ZERO1 && s <= COH_STRATEGY_ZERO3 ? (int)(s - COH_STRATEGY_ZERO1) + 1
                                                              : 0;
}

coh_strategy coh_strategy_of_zero(int stage)
{
    return stage == 0 ? COH_STRATEGY_DDP
         : stage >= 1 && stage <= 3 ? (coh_strategy)(COH_STRATEGY_ZERO1 + stage - 1)
                                    : COH_STRATEGY_COUNT;
}

int coh_parallel_config_runnable(const coh_parallel_config *c, char *why, size_t cap)
{
    char buf[160];
    buf[0] = '\0';
    if (c->tp > 1 && c->strategy == COH_STRATEGY_DP)
        snprintf(buf, sizeof buf, "--tp %d with --strategy dp: DataParallel runs whole replicas "
                 "in one process; use ddp or zero1..3", c->tp);
    else if (c->pp > 1 && coh_strategy_zero_stage(c->strategy) > 1)
        snprintf(buf, sizeof buf, "--strategy %s with --pp %d: ZeRO-2 and -3 shard gradients that "
                 "a pipeline accumulates over its microbatches (DeepSpeed refuses them too); use "
                 "ddp or zero1", coh_strategy_name(c->strategy), c->pp);
    else if (c->precision == COH_PREC_FP16_MIXED)
        snprintf(buf, sizeof buf, "--precision %s: cohort's trainer runs fp32 or bf16-mixed "
                 "(fp16 would need loss scaling)", coh_precision_name(c->precision));
    else if (c->precision == COH_PREC_BF16_MIXED && c->strategy == COH_STRATEGY_DP)
        snprintf(buf, sizeof buf, "--precision bf16-mixed with --strategy dp: the threaded "
                 "strategy runs fp32; use ddp");
    else if (c->grad_reduce_bf16 && (c->strategy == COH_STRATEGY_DP || c->pp > 1))
        snprintf(buf, sizeof buf, "--grad-reduce-dtype bf16 with %s: only ddp and zero1..3 "
                 "without a pipeline reduce in bf16", c->pp > 1 ? "--pp" : "--strategy dp");
    else if (c->recompute == COH_RECOMPUTE_SELECTIVE)
        snprintf(buf, sizeof buf, "--recompute selective: cohort's trainer recomputes whole "
                 "blocks (--recompute full)");
    else if (c->recompute == COH_RECOMPUTE_FULL && c->strategy == COH_STRATEGY_DP)
        snprintf(buf, sizeof buf, "--recompute full with --strategy dp: the threaded strategy "
                 "keeps every activation");
    else if (c->offload != COH_OFFLOAD_NONE)
        snprintf(buf, sizeof buf, "--offload %s: cohort's trainer does not offload",
                 coh_offload_name(c->offload));
    else if (c->sequence_parallel && c->tp < 2)
        snprintf(buf, sizeof buf, "--sequence-parallel: needs tensor parallelism (--tp 2 or "
                 "more)");
    else if (c->dropout)
        snprintf(buf, sizeof buf, "--dropout: cohort's GPT has no dropout");
    else if (c->grad_sync_after_backward)
        snprintf(buf, sizeof buf, "--grad-sync after-backward: cohort's trainer reduces each "
                 "gradient bucket as backward finishes it (--grad-sync overlap)");
    if (why && cap)
        snprintf(why, cap, "%s", buf);
    return buf[0] == '\0';
}
