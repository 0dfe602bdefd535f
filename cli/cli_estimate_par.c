/* cli_estimate_par.c: `cohort estimate --engine cohort` for single, ddp and ZeRO 1-3: the
 * prediction the parallel trainer itself uses (coh_par_memory_estimate), for the rank holding
 * the most. */
#include "cli_estimate_par.h"
#include "cohort/parallel.h"

static void copy(int rank, const coh_par_memory *m, est_par_bytes *out)
{
    *out = (est_par_bytes){rank, m->state.params, m->state.grads, m->state.optim, m->engine,
                           m->gathered, m->grad_buckets, m->comm, m->total};
}

coh_status est_par_predict(const est_par_in *in, est_par_bytes *out, const char **strategy)
{
    static const coh_strategy by_zero[4] = {COH_STRATEGY_DDP, COH_STRATEGY_ZERO1,
                                            COH_STRATEGY_ZERO2, COH_STRATEGY_ZERO3};
    if (in->zero < 0 || in->zero > 3)
        return coh_errf(COH_ERR_INVALID, "invalid zero stage '%d': expected 0..3", in->zero);
    coh_par_config pc = {
        .train = {.model = {in->layers, in->heads, in->dim, in->vocab, in->seq},
                  .batch = in->batch, .seq = in->T, .accum = in->accum},
        .strategy = in->dp == 1 && in->zero == 0 ? COH_STRATEGY_SINGLE : by_zero[in->zero],
        .bucket_bytes = in->bucket_bytes};
    *strategy = coh_strategy_name(pc.strategy);
    coh_par_memory first, last;
    coh_status st = coh_par_memory_estimate(&pc, in->dp, 0, &first);
    if (!st)
        st = coh_par_memory_estimate(&pc, in->dp, in->dp - 1, &last);
    if (st)
        return st;
    if (last.total > first.total)
        copy(in->dp - 1, &last, out);
    else
        copy(0, &first, out);
    return COH_OK;
}
