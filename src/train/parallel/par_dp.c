/* par_dp.c: strategy dp inside the parallel trainer: the device threads of dp.c, with device 0's
 * trainer as the base, so evaluation, checkpoints and resume work as they do for single. */
#include <stdlib.h>

#include "train/parallel/par_trainer_int.h"

coh_status par_dp_build(coh_par_trainer *t)
{
    int n = t->cfg.par.dp > 0 ? t->cfg.par.dp : 1;
    coh_status st = coh_dp_create(&t->cfg.train, n, &t->threads);
    if (st)
        return st;
    t->base = coh_dp_trainer(t->threads);
    t->model = coh_trainer_model(t->base);
    t->params = coh_gpt_params(t->model, &t->n);
    t->grads = coh_gpt_grads(t->model, NULL);
    /* device 0's optimizer covers the whole arena, as single's does */
    t->own_rb = malloc(sizeof *t->own_rb);
    t->own_re = malloc(sizeof *t->own_re);
    if (!t->own_rb || !t->own_re)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the dp trainer");
    t->nown = 1;
    t->own_rb[0] = 0;
    t->own_re[0] = t->n;
    return COH_OK;
}
