/* cmd_eval.c: `cohort eval`: mean loss of a checkpoint over the first N batches of token shards
 * in file order. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "cohort/json_writer.h"
#include "cohort/train_ckpt.h"

const char cmd_eval_summary[] = "mean loss of a checkpoint over token shards";

static const char *const CMD = "eval";

static void help(void)
{
    printf("usage: cohort eval --checkpoint FILE --data SHARD [options]\n\n"
           "Prints the mean cross-entropy of the model over the first N batches of the shards\n"
           "in file order (windows of T+1 tokens, no shuffling).\n\n"
           "  --checkpoint FILE   safetensors weights (HF GPT-2 names)\n"
           "  --data FILE         shard (repeat)\n"
           "  --batch B           sequences per batch (default 8)\n"
           "  --seq T             tokens per sequence (default: min(256, context))\n"
           "  --batches N         batches to evaluate; the data must hold N (default: 10, or\n"
           "                      all the data holds when that is fewer)\n"
           "  --heads N           heads, for checkpoints without cohort's metadata\n"
           "  --threads N         threads (default: OMP_NUM_THREADS, else all cores)\n"
           "  --json              print one JSON object\n");
}

typedef struct eval_opts {
    cli_checkpoint_opts ck;
    const char *data[MAX_SHARDS];
    int ndata, json;
    long batch, seq, batches;
    int batches_given; /* else batches is a default, cut to what the data holds */
} eval_opts;

static int take_option(void *ctx, int c, const char *name, const char *arg)
{
    eval_opts *o = ctx;
    (void)name;
    switch (c) {
    case 'd':
        if (o->ndata == MAX_SHARDS)
            return cli_usage_error(CMD, "too many --data at '%s': at most %d", arg, MAX_SHARDS),
                   0;
        o->data[o->ndata++] = arg;
        return 1;
    case 'b': return cli_parse_long(CMD, "--batch", arg, 1, 1 << 20, &o->batch);
    case 's': return cli_parse_long(CMD, "--seq", arg, 1, 1 << 24, &o->seq);
    case 'n':
        o->batches_given = 1;
        return cli_parse_long(CMD, "--batches", arg, 1, 1L << 40, &o->batches);
    case 'j': o->json = 1; return 1;
    case 'h': help(); return -1;
    }
    return 1;
}

static int parse(eval_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        CLI_CHECKPOINT_OPTIONS, {"data", 1, 0, 'd'}, {"batch", 1, 0, 'b'}, {"seq", 1, 0, 's'},
        {"batches", 1, 0, 'n'}, {"json", 0, 0, 'j'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->batch = 8;
    o->batches = 10;
    int rc = cli_checkpoint_parse(CMD, argc, argv, lo, take_option, o, &o->ck);
    if (rc == CLI_OK && !o->ndata)
        return cli_usage_error(CMD, "missing --data: give at least one shard");
    return rc;
}

static coh_status eval_next(void *ctx, int32_t *in, int32_t *tg)
{
    return coh_loader_next(ctx, in, tg);
}

/* The mean loss over the batches evaluated, *batches of them: --batches N exactly (too few in
 * the data is an error), or the default cut to the data's (a small validation shard is still a
 * valid one, as in `cohort train --val-data`). */
static coh_status evaluate(const eval_opts *o, double *loss, long *batches,
                           const coh_gpt_config *m)
{
    coh_status st = COH_OK;
    int T = o->seq ? (int)o->seq : (m->seq < 256 ? m->seq : 256);
    if (T > m->seq)
        return coh_errf(COH_ERR_INVALID, "invalid --seq '%d': the model's context is %d", T,
                        m->seq);
    coh_gpt *g = NULL;
    coh_loader *l = NULL;
    coh_loader_config lc = {.paths = o->data, .npaths = (size_t)o->ndata, .batch = (int)o->batch,
                            .seq = T, .rank = 0, .world = 1, .mode = COH_LOADER_EVAL,
                            .vocab = m->vocab};
    int32_t *in = NULL, *tg = NULL;
    if (!(st = coh_gpt_create(m, (int)o->batch, T, &g)) && !(st = coh_gpt_load(g, o->ck.path)) &&
        !(st = coh_loader_create(&lc, &l))) {
        in = malloc(sizeof *in * (size_t)o->batch * T);
        tg = malloc(sizeof *tg * (size_t)o->batch * T);
        if (!in || !tg)
            st = coh_errf(COH_ERR_NOMEM, "out of memory for the batch");
    }
    long n = o->batches;
    if (!st && !o->batches_given && coh_loader_steps_per_epoch(l) < (uint64_t)n)
        n = (long)coh_loader_steps_per_epoch(l); /* at least 1: the loader refuses less */
    double sum = 0;
    for (long k = 0; !st && k < n; k++) {
        float lk;
        if (!(st = eval_next(l, in, tg)) &&
            !(st = coh_gpt_step(g, in, tg, (int)o->batch, T, 0.0f, &lk)))
            sum += lk;
    }
    *loss = sum / (double)n;
    *batches = n;
    free(in);
    free(tg);
    coh_loader_destroy(l);
    coh_gpt_destroy(g);
    return st;
}

int cmd_eval(int argc, char **argv)
{
    eval_opts o;
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    cli_engine_setup((int)o.ck.threads);
    double loss = 0;
    long batches = 0;
    coh_gpt_config m;
    if ((rc = cli_checkpoint_config(CMD, &o.ck, &m, NULL, 0)))
        return rc;
    coh_status st = evaluate(&o, &loss, &batches, &m);
    if (st)
        return cli_fail(CMD, st);
    if (o.json) {
        coh_jw w;
        coh_jw_init(&w, stdout, 0);
        coh_jw_object_begin(&w);
        coh_jw_field_double(&w, "loss", loss);
        coh_jw_field_int(&w, "batches", batches);
        coh_jw_field_int(&w, "tokens", batches * o.batch * (o.seq ? o.seq : (m.seq < 256 ? m.seq : 256)));
        coh_jw_object_end(&w);
        coh_jw_finish(&w);
    } else {
        printf("loss %.6f over %ld batches\n", loss, batches);
    }
    return CLI_OK;
}
