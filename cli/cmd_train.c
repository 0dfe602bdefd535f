/* cmd_train.c: `cohort train`: trains a GPT-2 model on token shards, with progress, metrics,
 * validation, checkpoints and exact resume. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_train.h"
#include "cohort/parallel.h"
#include "cohort/json_writer.h"
#include "cohort/log.h"
#include "cohort/size.h"
#include "cohort/train_ckpt.h"
#include "cohort/train_dp.h"

const char cmd_train_summary[] = "train a GPT-2 model on token shards";

static const char *const CMD = "train";

static void help(void)
{
    printf("usage: cohort train --data SHARD [--data SHARD...] [options]\n\n"
           "Trains a GPT-2 model (pre-LayerNorm blocks, tied LM head) on llm.c token shards\n"
           "(see 'cohort prepare'). Multi-process strategies run under 'cohort run'.\n\n"
           "parallelism (docs/parallel.md):\n"
           "  --strategy S          single (default), ddp, zero1, zero2, zero3 (one process per\n"
           "                        rank: cohort run --nproc-per-node N cohort train ...), or dp\n"
           "                        (one process, a thread per device; see --devices)\n"
           "  --devices N           dp: devices, each with its own thread and replica (default 2);\n"
           "                        --batch is per device\n"
           "  --bucket-mb X         gradient bucket size in MiB (default 25)\n"
           "  --trace FILE.json     Chrome/Perfetto trace per rank (FILE.rankN.json for N > 1)\n"
           "  --dump-params FILE    write the final parameters as raw little-endian f32\n\n"
           "model:\n"
           "  --model NAME          preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl\n"
           "  --layers N --heads N --dim N --vocab N\n"
           "                        a custom model (defaults 6, 6, 384, 50257)\n"
           "  --init-from FILE      start from weights in a safetensors file (HF GPT-2 names)\n"
           "data and batch:\n"
           "  --data FILE           training shard (repeat, or a glob in quotes)\n"
           "  --val-data FILE       validation shard (repeat); adds val_loss to the metrics\n"
           "  --batch B             sequences per micro-batch (default 8)\n"
           "  --seq T               tokens per sequence, also the context size (default 256)\n"
           "  --accum K             micro-batches per step (default 1)\n"
           "  --shuffle on|off      shuffle windows each epoch (default on)\n"
           "optimisation:\n"
           "  --steps N             optimizer steps (required)\n"
           "  --lr X                peak learning rate (default 3e-4)\n"
           "  --min-lr-frac X       final lr as a fraction of the peak (default 0.1)\n"
           "  --warmup N            linear warmup steps (default 0)\n"
           "  --weight-decay X      AdamW decoupled weight decay (default 0.1)\n"
           "  --grad-clip X         clip the global gradient norm, 0 = off (default 1.0)\n"
           "  --seed N              initialisation and shuffle seed (default 1337)\n"
           "  --deterministic       pin the thread count (checked on resume): bit-identical runs\n"
           "  --threads N           threads (default: OMP_NUM_THREADS, else all cores)\n"
           "output:\n"
           "  --metrics FILE        JSON lines: step, loss, lr, tokens_per_s, mfu, elapsed_s,\n"
           "                        val_loss (when evaluated), memory per rank (model state,\n"
           "                        peak and start RSS, predicted growth as 'cohort estimate\n"
           "                        --engine cohort' predicts it; strategy dp adds what each\n"
           "                        device holds)\n"
           "  --log-every N         plain log line interval when not on a terminal (default 10)\n"
           "  --val-every N         validate every N steps and at the end (default 100)\n"
           "  --val-batches N       validation batches (default 10)\n"
           "  --save FILE           checkpoint (FILE and FILE.state) at the end\n"
           "  --save-every K        also every K steps; a job restarted by 'cohort run\n"
           "                        --max-restarts' resumes from --save (ZeRO: one shard per\n"
           "                        rank plus an index)\n"
           "  --resume FILE         continue exactly from a checkpoint\n"
           "  --stop-at N           stop after step N (the schedule still spans --steps)\n"
           "  --tokenizer NAME      tokenizer of the data, recorded for 'cohort generate'\n"
           "  --blas-info           print the BLAS kernel in use and exit\n");
}

enum {
    O_MODEL = 256, O_LAYERS, O_HEADS, O_DIM, O_VOCAB, O_INIT, O_DATA, O_VAL, O_BATCH, O_SEQ,
    O_ACCUM, O_SHUFFLE, O_STEPS, O_LR, O_MINLR, O_WARMUP, O_WD, O_CLIP, O_SEED, O_DET, O_THREADS,
    O_METRICS, O_LOGEVERY, O_VALEVERY, O_VALBATCHES, O_SAVE, O_SAVEEVERY, O_RESUME, O_STOPAT,
    O_TOKENIZER, O_BLASINFO, O_STRATEGY, O_BUCKET, O_TRACE, O_DUMP, O_DEVICES
};

static const struct option longopts[] = {
    {"model", 1, 0, O_MODEL},         {"layers", 1, 0, O_LAYERS},
    {"heads", 1, 0, O_HEADS},         {"dim", 1, 0, O_DIM},
    {"vocab", 1, 0, O_VOCAB},         {"init-from", 1, 0, O_INIT},
    {"data", 1, 0, O_DATA},           {"val-data", 1, 0, O_VAL},
    {"batch", 1, 0, O_BATCH},         {"seq", 1, 0, O_SEQ},
    {"accum", 1, 0, O_ACCUM},         {"shuffle", 1, 0, O_SHUFFLE},
    {"steps", 1, 0, O_STEPS},         {"lr", 1, 0, O_LR},
    {"min-lr-frac", 1, 0, O_MINLR},   {"warmup", 1, 0, O_WARMUP},
    {"weight-decay", 1, 0, O_WD},     {"grad-clip", 1, 0, O_CLIP},
    {"seed", 1, 0, O_SEED},           {"deterministic", 0, 0, O_DET},
    {"threads", 1, 0, O_THREADS},     {"metrics", 1, 0, O_METRICS},
    {"log-every", 1, 0, O_LOGEVERY},  {"val-every", 1, 0, O_VALEVERY},
    {"val-batches", 1, 0, O_VALBATCHES}, {"save", 1, 0, O_SAVE},
    {"save-every", 1, 0, O_SAVEEVERY}, {"resume", 1, 0, O_RESUME},
    {"stop-at", 1, 0, O_STOPAT},      {"tokenizer", 1, 0, O_TOKENIZER},
    {"blas-info", 0, 0, O_BLASINFO},  {"help", 0, 0, 'h'},
    {"strategy", 1, 0, O_STRATEGY},   {"bucket-mb", 1, 0, O_BUCKET},
    {"trace", 1, 0, O_TRACE},         {"dump-params", 1, 0, O_DUMP},
    {"devices", 1, 0, O_DEVICES},
    {0, 0, 0, 0},
};

static int parse_value(train_opts *o, int c, const char *a)
{
    const long BIG = 1L << 40;
    long v = 0;
    switch (c) {
    case O_MODEL: o->preset = a; return 1;
    case O_LAYERS: return cli_parse_long(CMD, "--layers", a, 1, 4096, &o->layers);
    case O_HEADS: return cli_parse_long(CMD, "--heads", a, 1, 4096, &o->heads);
    case O_DIM: return cli_parse_long(CMD, "--dim", a, 1, 1 << 16, &o->dim);
    case O_VOCAB: return cli_parse_long(CMD, "--vocab", a, 2, 65536, &o->vocab);
    case O_INIT: o->init_from = a; return 1;
    case O_DATA:
    case O_VAL: {
        const char **dst = c == O_DATA ? o->data : o->val;
        int *n = c == O_DATA ? &o->ndata : &o->nval;
        if (*n == MAX_SHARDS) {
            cli_usage_error(CMD, "too many shard options at '%s': at most %d", a, MAX_SHARDS);
            return 0;
        }
        dst[(*n)++] = a;
        return 1;
    }
    case O_BATCH: return cli_parse_long(CMD, "--batch", a, 1, 1 << 20, &v) && (o->tc.batch = (int)v);
    case O_SEQ: return cli_parse_long(CMD, "--seq", a, 1, 1 << 20, &o->seq);
    case O_ACCUM: return cli_parse_long(CMD, "--accum", a, 1, 1 << 20, &v) && (o->tc.accum = (int)v);
    case O_SHUFFLE:
        if (strcmp(a, "on") && strcmp(a, "off")) {
            cli_usage_error(CMD, "invalid --shuffle '%s': must be on or off", a);
            return 0;
        }
        o->shuffle = !strcmp(a, "on");
        return 1;
    case O_STEPS: return cli_parse_long(CMD, "--steps", a, 1, BIG, &o->tc.steps);
    case O_LR: return cli_parse_float(CMD, "--lr", a, 1e-12, 10, &o->tc.lr);
    case O_MINLR: return cli_parse_float(CMD, "--min-lr-frac", a, 0, 1, &o->tc.min_lr_frac);
    case O_WARMUP: return cli_parse_long(CMD, "--warmup", a, 0, BIG, &o->tc.warmup);
    case O_WD: return cli_parse_float(CMD, "--weight-decay", a, 0, 10, &o->tc.weight_decay);
    case O_CLIP: return cli_parse_float(CMD, "--grad-clip", a, 0, 1e9, &o->tc.grad_clip);
    case O_SEED:
        if (!cli_parse_long(CMD, "--seed", a, 0, BIG, &v))
            return 0;
        o->tc.seed = (uint64_t)v;
        return 1;
    case O_DET: o->deterministic = 1; return 1;
    case O_THREADS: return cli_parse_long(CMD, "--threads", a, 1, 1024, &o->threads);
    case O_METRICS: o->metrics = a; return 1;
    case O_LOGEVERY: return cli_parse_long(CMD, "--log-every", a, 1, BIG, &o->log_every);
    case O_VALEVERY: return cli_parse_long(CMD, "--val-every", a, 1, BIG, &o->val_every);
    case O_VALBATCHES: return cli_parse_long(CMD, "--val-batches", a, 1, BIG, &o->val_batches);
    case O_SAVE: o->save = a; return 1;
    case O_SAVEEVERY: return cli_parse_long(CMD, "--save-every", a, 1, BIG, &o->save_every);
    case O_RESUME: o->resume = a; return 1;
    case O_STOPAT: return cli_parse_long(CMD, "--stop-at", a, 1, BIG, &o->stop_at);
    case O_TOKENIZER: o->tokenizer = a; return 1;
    case O_BLASINFO: o->blas_info = 1; return 1;
    case O_STRATEGY:
        if (coh_strategy_parse(a, &o->strategy)) {
            cli_usage_error(CMD, "%s", coh_last_error());
            return 0;
        }
        return 1;
    case O_BUCKET: {
        float mb;
        if (!cli_parse_float(CMD, "--bucket-mb", a, 1e-3, 1 << 20, &mb))
            return 0;
        o->bucket_bytes = (size_t)((double)mb * (1 << 20));
        return 1;
    }
    case O_TRACE: o->trace = a; return 1;
    case O_DEVICES:
        return cli_parse_long(CMD, "--devices", a, 1, COH_DP_MAX_DEVICES, &o->devices);
    case O_DUMP: o->dump_params = a; return 1;
    }
    return 0;
}

/* Multi-process strategies need the launcher's environment; single must not be replicated. */
static int check_strategy(const train_opts *o)
{
    const char *ws = getenv("WORLD_SIZE");
    if (!ws)
        ws = getenv("OMPI_COMM_WORLD_SIZE");
    if (coh_strategy_is_multiprocess(o->strategy) && !ws)
        return cli_usage_error(CMD, "strategy '%s' needs one process per rank: start it with "
                               "'cohort run --nproc-per-node N cohort train ...'",
                               coh_strategy_name(o->strategy));
    if (!coh_strategy_is_multiprocess(o->strategy) && ws && atoi(ws) > 1)
        return cli_usage_error(CMD, "strategy '%s' runs one process but WORLD_SIZE is '%s': "
                               "use --strategy ddp or zero1..zero3 under 'cohort run'",
                               coh_strategy_name(o->strategy), ws);
    return 0;
}

/* 0 ok, else the exit code. */
static int parse(train_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    coh_trainer_config_defaults(&o->tc);
    o->tc.batch = 8;
    o->shuffle = 1;
    o->log_every = 10;
    o->val_every = 100;
    o->val_batches = 10;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            help();
            return -1;
        }
        if (c == '?' || c == ':')
            return cli_bad_option(CMD, argv);
        if (!parse_value(o, c, optarg))
            return CLI_USAGE;
    }
    if (cli_no_operands(CMD, argc, argv))
        return CLI_USAGE;
    if (o->blas_info)
        return 0;
    if (!o->ndata)
        return cli_usage_error(CMD, "missing --data: give at least one training shard");
    if (!o->tc.steps)
        return cli_usage_error(CMD, "missing --steps: give the number of optimizer steps");
    if (o->save_every && !o->save)
        return cli_usage_error(CMD, "--save-every needs --save FILE");
    if (o->resume && o->init_from)
        return cli_usage_error(CMD, "--resume and --init-from exclude each other");
    if (o->devices && o->strategy != COH_STRATEGY_DP)
        return cli_usage_error(CMD, "--devices '%ld' is for --strategy dp; other strategies run "
                               "one process per rank (cohort run --nproc-per-node N)",
                               o->devices);
    if (o->strategy == COH_STRATEGY_DP && !o->devices)
        o->devices = 2;
    return check_strategy(o);
}

/* The model config from a preset, a checkpoint, or the custom options. */
static int model_config(train_opts *o, coh_gpt_config *m)
{
    coh_status st;
    const char *from = o->resume ? o->resume : o->init_from;
    if (from) {
        if ((st = coh_gpt_checkpoint_config(from, (int)o->heads, m, NULL, 0)))
            return cli_fail(CMD, st);
    } else if (o->preset) {
        if ((st = coh_gpt_preset(o->preset, m)))
            return cli_fail(CMD, st);
    } else {
        *m = (coh_gpt_config){6, 6, 384, 50257, 256};
        if (o->seq)
            m->seq = (int)o->seq;
    }
    if (!from) {
        if (o->layers) m->layers = (int)o->layers;
        if (o->heads) m->heads = (int)o->heads;
        if (o->dim) m->dim = (int)o->dim;
        if (o->vocab) m->vocab = (int)o->vocab;
    }
    o->tc.seq = o->seq ? (int)o->seq : (m->seq < 256 ? m->seq : 256);
    if (o->tc.seq > m->seq)
        return cli_usage_error(CMD, "invalid --seq '%d': the model's context is %d", o->tc.seq,
                               m->seq);
    if ((st = coh_gpt_config_check(m)))
        return cli_fail(CMD, st);
    return 0;
}

int cmd_train(int argc, char **argv)
{
    train_opts o;
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    cli_engine_setup(o.threads ? (int)o.threads : 0);
    if (o.blas_info) {
        printf("%s\n", coh_blas_kernel());
        return CLI_OK;
    }
    if ((rc = model_config(&o, &o.tc.model)))
        return rc;
    return cli_train_run(&o);
}
