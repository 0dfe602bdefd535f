/* cmd_train.c: `cohort train`: trains a GPT-2 model on token shards, with progress, metrics,
 * validation, checkpoints and exact resume. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "cli_mesh.h"
#include "cli_train.h"
#include "cohort/backend.h"
#include "cli_train_par.h"
#include "cohort/launch.h"
#include "cohort/parallel.h"
#include "cohort/pipeline.h"
#include "cohort/plan.h"
#include "cohort/json_writer.h"
#include "cohort/log.h"
#include "cohort/size.h"
#include "cohort/train_ckpt.h"
#include "cohort/train_dp.h"

const char cmd_train_summary[] = "train a GPT-2 model on token shards";

static const char *const CMD = "train";
/* --peak-gflops and COHORT_PEAK_GFLOPS: a thousandth of a GFLOP/s to an EFLOP/s */
#define PEAK_MIN 1e-3
#define PEAK_MAX 1e9

static void help(void)
{
    printf("usage: cohort train --data SHARD [--data SHARD...] [options]\n\n"
           "Trains a GPT-2 model (pre-LayerNorm blocks, tied LM head) on llm.c token shards\n"
           "(see 'cohort prepare'). Multi-process strategies run under 'cohort run'. Without\n"
           "model options: 6 layers, 6 heads, dim 384, vocab 50257, seq 256.\n\n");
    cli_config_help(stdout);
    printf("  --device KIND         the backend every rank computes on: cpu (the default),\n"
           "                        cuda (a CUDA build), cpu-guarded (a test device: the CPU\n"
           "                        with its memory closed to host code; strategy single)\n"
           "  --devices N           strategy dp: devices, each with its own thread and replica\n"
           "                        (default 2; the same as --dp N); --micro-batch is per device\n"
           "  --trace FILE.json     Chrome/Perfetto trace per rank (FILE.rankN.json for N > 1)\n"
           "  --dump-params FILE    write the final parameters as raw little-endian f32\n"
           "  --stage-layers SPLIT  blocks of each pipeline stage, e.g. 0-2,3-7; 'embeddings'\n"
           "                        first or 'head' last for a stage of those alone, e.g.\n"
           "                        0,1,2-11,head; the LM head split by vocabulary into N\n"
           "                        shards: head:K/N (shard K) or head:K-J/N, alone or after\n"
           "                        the last blocks with '+', e.g. 0-5,6-11,head:0/2,head:1/2\n"
           "                        (default: the split whose simulated step is shortest, the\n"
           "                        LM head's estimated compute included, whole or in shards)\n"
           "  --dry-run             print the configuration as the trainer would run it and exit\n"
           "                        (with --json: as JSON); refusals exit 2 as a real run would\n"
           "  --world N             with --dry-run outside a launcher: describe a job of N ranks\n"
           "                        (or --nodes N --gpus-per-node G: N x G), every rank's stage,\n"
           "                        peers, messages and memory\n"
           "model and data:\n"
           "  --init-from FILE      start from weights in a safetensors file (HF GPT-2 names)\n"
           "  --data FILE           training shard (repeat, or a glob in quotes)\n"
           "  --val-data FILE       validation shard (repeat); adds val_loss to the metrics\n"
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
           "  --tied-grad-order O   how the tied embedding's two gradients (the head's, the\n"
           "                        embedding's) are summed over a step: interleaved (one\n"
           "                        device's default: micro-batch by micro-batch) or pipeline\n"
           "                        (each over the step, then added: the order of --pp 2 or\n"
           "                        more, so that one device reproduces a pipeline run bit for\n"
           "                        bit; one wte more memory; not with data parallelism)\n"
           "  --grad-accum-order O  how one rank sums its micro-batches' gradients: interleaved\n"
           "                        (the default: all into one buffer) or apart (each from zero\n"
           "                        in a buffer of its own, then added: the order of 2\n"
           "                        data-parallel ranks' all-reduce, so that one device\n"
           "                        reproduces ddp or zero1-3 at 2 ranks of one micro-batch\n"
           "                        each bit for bit; one gradient arena more memory)\n"
           "output:\n"
           "  --metrics FILE        JSON lines: step, loss, lr, tokens_per_s, mfu, elapsed_s,\n"
           "                        val_loss (when evaluated), memory per rank (model state,\n"
           "                        peak and start RSS, predicted growth as 'cohort estimate\n"
           "                        --engine cohort' predicts it; strategy dp adds what each\n"
           "                        device holds)\n"
           "  --peak-gflops G       a rank's peak GFLOP/s in the run's precision, which MFU is\n"
           "                        taken against (default: COHORT_PEAK_GFLOPS, else measured\n"
           "                        at start by rank 0: a GEMM on its threads for 0.4 s)\n"
           "  --log-every N         plain log line interval when not on a terminal (default 10)\n"
           "  --val-every N         validate every N steps and at the end (default 100)\n"
           "  --val-batches N       validation batches (default 10)\n"
           "  --save FILE           checkpoint (FILE.state<step>, then FILE) at the end\n"
           "  --save-every K        also every K steps; a job restarted by 'cohort run\n"
           "                        --max-restarts' resumes from --save (ZeRO: one shard per\n"
           "                        rank plus an index)\n"
           "  --save-dtype D        the weights file's dtype: fp32 (default: the master weights)\n"
           "                        or bf16 (rounded to nearest even, half the size, for\n"
           "                        inference: --resume refuses it, --init-from reads it)\n"
           "  --resume FILE         continue exactly from a checkpoint\n"
           "  --stop-at N           stop after step N (the schedule still spans --steps)\n"
           "  --tokenizer byte|gpt2 tokenizer of the data, recorded for 'cohort generate'\n"
           "                        (default: inferred from the shards' largest token id)\n"
           "  --blas-info           print the BLAS kernel in use and exit\n");
}

enum {
    O_INIT = 256, O_DATA, O_VAL, O_SHUFFLE, O_STEPS, O_LR, O_MINLR, O_WARMUP, O_WD, O_CLIP, O_SEED,
    O_DET, O_METRICS, O_LOGEVERY, O_VALEVERY, O_VALBATCHES, O_SAVE, O_SAVEEVERY, O_RESUME,
    O_STOPAT, O_TOKENIZER, O_BLASINFO, O_TRACE, O_DUMP, O_DEVICES, O_DRYRUN, O_JSON,
    O_STAGELAYERS, O_SAVEDTYPE, O_DEVICE, O_WORLD, O_PEAK, O_TIED, O_ACCUMORDER
};

static const struct option own_options[] = {
    {"init-from", 1, 0, O_INIT},      {"data", 1, 0, O_DATA},
    {"val-data", 1, 0, O_VAL},        {"shuffle", 1, 0, O_SHUFFLE},
    {"steps", 1, 0, O_STEPS},         {"lr", 1, 0, O_LR},
    {"min-lr-frac", 1, 0, O_MINLR},   {"warmup", 1, 0, O_WARMUP},
    {"weight-decay", 1, 0, O_WD},     {"grad-clip", 1, 0, O_CLIP},
    {"seed", 1, 0, O_SEED},           {"deterministic", 0, 0, O_DET},
    {"metrics", 1, 0, O_METRICS},     {"log-every", 1, 0, O_LOGEVERY},
    {"val-every", 1, 0, O_VALEVERY},  {"val-batches", 1, 0, O_VALBATCHES},
    {"save", 1, 0, O_SAVE},           {"save-every", 1, 0, O_SAVEEVERY},
    {"resume", 1, 0, O_RESUME},       {"stop-at", 1, 0, O_STOPAT},
    {"tokenizer", 1, 0, O_TOKENIZER}, {"blas-info", 0, 0, O_BLASINFO},
    {"help", 0, 0, 'h'},              {"trace", 1, 0, O_TRACE},
    {"dump-params", 1, 0, O_DUMP},    {"devices", 1, 0, O_DEVICES},
    {"dry-run", 0, 0, O_DRYRUN},      {"json", 0, 0, O_JSON},
    {"stage-layers", 1, 0, O_STAGELAYERS}, {"save-dtype", 1, 0, O_SAVEDTYPE},
    {"device", 1, 0, O_DEVICE},
    {"world", 1, 0, O_WORLD},         {"peak-gflops", 1, 0, O_PEAK},
    {"tied-grad-order", 1, 0, O_TIED},
    {"grad-accum-order", 1, 0, O_ACCUMORDER},
    {0, 0, 0, 0},
};

static int parse_value(void *ctx, int c, const char *name, const char *a)
{
    train_opts *o = ctx;
    (void)name;
    const long BIG = 1L << 40;
    long v = 0;
    int shared = cli_config_option(CMD, c, a, &o->cfg);
    if (shared >= 0)
        return shared;
    switch (c) {
    case 'h': help(); return -1;
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
    case O_SHUFFLE:
        if (strcmp(a, "on") && strcmp(a, "off")) {
            cli_usage_error(CMD, "invalid --shuffle '%s': valid are on, off", a);
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
    case O_TIED:
        if (strcmp(a, "interleaved") && strcmp(a, "pipeline")) {
            cli_usage_error(CMD, "invalid --tied-grad-order '%s': valid are interleaved, pipeline",
                            a);
            return 0;
        }
        o->tied_order = a;
        o->tc.tied_grad_apart = !strcmp(a, "pipeline");
        return 1;
    case O_ACCUMORDER:
        if (strcmp(a, "interleaved") && strcmp(a, "apart")) {
            cli_usage_error(CMD, "invalid --grad-accum-order '%s': valid are interleaved, apart",
                            a);
            return 0;
        }
        o->tc.grad_accum_apart = !strcmp(a, "apart");
        return 1;
    case O_METRICS: o->metrics = a; return 1;
    case O_LOGEVERY: return cli_parse_long(CMD, "--log-every", a, 1, BIG, &o->log_every);
    case O_VALEVERY: return cli_parse_long(CMD, "--val-every", a, 1, BIG, &o->val_every);
    case O_VALBATCHES: return cli_parse_long(CMD, "--val-batches", a, 1, BIG, &o->val_batches);
    case O_SAVE: o->save = a; o->tc.saves = 1; return 1;
    case O_SAVEEVERY: return cli_parse_long(CMD, "--save-every", a, 1, BIG, &o->save_every);
    case O_SAVEDTYPE:
        if (strcmp(a, "fp32") && strcmp(a, "bf16")) {
            cli_usage_error(CMD, "invalid --save-dtype '%s': valid are fp32, bf16", a);
            return 0;
        }
        o->tc.save_bf16 = !strcmp(a, "bf16");
        return 1;
    case O_RESUME: o->resume = a; return 1;
    case O_STOPAT: return cli_parse_long(CMD, "--stop-at", a, 1, BIG, &o->stop_at);
    case O_PEAK:
        o->peak_origin = "--peak-gflops";
        return cli_parse_double(CMD, "--peak-gflops", a, PEAK_MIN, PEAK_MAX, &o->peak_gflops);
    case O_TOKENIZER: o->tokenizer = a; return 1;
    case O_BLASINFO: o->blas_info = 1; return 1;
    case O_TRACE: o->trace = a; return 1;
    case O_DEVICES:
        return cli_parse_long(CMD, "--devices", a, 1, COH_DP_MAX_DEVICES, &o->devices);
    case O_DUMP: o->dump_params = a; return 1;
    case O_DRYRUN: o->dry_run = 1; return 1;
    case O_JSON: o->json = 1; return 1;
    case O_WORLD: return cli_parse_long(CMD, "--world", a, 1, 1L << 20, &o->dry_world);
    case O_STAGELAYERS: o->cfg.par.stage_layers = a; return 1;
    case O_DEVICE:
        if (coh_backend_select(a)) {
            cli_usage_error(CMD, "--device: %s", coh_last_error());
            return 0;
        }
        return 1;
    }
    return 0;
}

/* --tied-grad-order against the mesh: a pipeline's stages hold the two gradients apart, and a
 * data-parallel replica reduces wte's as the embedding's backward ends (par_trainer.c). */
static int check_tied_order(const train_opts *o)
{
    const coh_parallel_config *p = &o->cfg.par;
    if (o->tied_order && !o->tc.tied_grad_apart && p->pp > 1)
        return cli_usage_error(CMD, "--tied-grad-order interleaved with --pp %lld: a pipeline's "
                               "first and last stages each sum their part over the step; only "
                               "'pipeline' is its order", (long long)p->pp);
    if (o->tc.tied_grad_apart && (p->dp > 1 || p->strategy == COH_STRATEGY_DP))
        return cli_usage_error(CMD, "--tied-grad-order pipeline with --strategy %s (dp %lld): "
                               "it is for one data-parallel replica (a replica's wte gradient is "
                               "reduced before the head's part could join it)",
                               coh_strategy_name(p->strategy), (long long)p->dp);
    /* --grad-accum-order apart: one rank summing as 2 data-parallel ranks' all-reduce does */
    if (o->tc.grad_accum_apart && (p->dp > 1 || p->pp > 1 || p->tp > 1 ||
                                   p->strategy == COH_STRATEGY_DP))
        return cli_usage_error(CMD, "--grad-accum-order apart with --strategy %s on dp %lld x pp "
                               "%lld x tp %lld: it is for one rank (one device summing its "
                               "micro-batches as 2 data-parallel ranks do)",
                               coh_strategy_name(p->strategy), (long long)p->dp,
                               (long long)p->pp, (long long)p->tp);
    if (o->tc.grad_accum_apart && o->tc.tied_grad_apart)
        return cli_usage_error(CMD, "--grad-accum-order apart with --tied-grad-order pipeline: "
                               "choose one order (apart is data parallelism's, pipeline a "
                               "pipeline's)");
    return 0;
}

/* The launcher decides how many ranks there are; the strategy must fit it: one place, every
 * launcher (cohort run, torchrun, Open MPI, PMI, Slurm). */
static int check_strategy(const train_opts *o, const coh_launch_env *env)
{
    coh_strategy s = o->cfg.par.strategy;
    if (s != COH_STRATEGY_SINGLE && !strcmp(coh_backend_name(coh_backend_current()), "cpu-guarded"))
        return cli_usage_error(CMD, "--device cpu-guarded runs strategy 'single' only (its "
                               "memory is closed to the transports), not '%s'",
                               coh_strategy_name(s));
    if (coh_strategy_is_multiprocess(s) && env->launcher == COH_LAUNCHER_NONE)
        return cli_usage_error(CMD, "strategy '%s' needs one process per rank: start it with "
                               "'cohort run --nproc-per-node N cohort train ...' (or srun, "
                               "mpirun)", coh_strategy_name(s));
    if (!coh_strategy_is_multiprocess(s) && env->world_size > 1 && o->cfg.par.dp != 1)
        return cli_usage_error(CMD, "strategy '%s' runs one process but %s started %d ranks "
                               "(%s=%d): use --strategy ddp or zero1..zero3",
                               coh_strategy_name(s), coh_launcher_name(env->launcher),
                               env->world_size, coh_launcher_world_var(env->launcher),
                               env->world_size);
    return 0;
}

/* --dry-run outside a launcher describes the job --world or --nodes x --gpus-per-node give, as
 * its ranks would run it (one process shows any mesh). */
static int described_world(train_opts *o, const coh_launch_env *env, int *described)
{
    const coh_parallel_config *p = &o->cfg.par;
    long nodes_world = p->nodes && p->gpus_per_node ? (long)p->nodes * p->gpus_per_node : 0;
    if (o->dry_world && !o->dry_run)
        return cli_usage_error(CMD, "--world '%ld' describes a job for --dry-run; a real run "
                               "takes its ranks from the launcher", o->dry_world);
    if (!o->dry_run || env->launcher != COH_LAUNCHER_NONE || (!o->dry_world && !nodes_world))
        return 0;
    if (o->dry_world && nodes_world && o->dry_world != nodes_world)
        return cli_usage_error(CMD, "invalid --world '%ld': --nodes %d x --gpus-per-node %d is "
                               "%ld", o->dry_world, p->nodes, p->gpus_per_node, nodes_world);
    o->world = (int)(o->dry_world ? o->dry_world : nodes_world);
    *described = 1;
    return 0;
}

/* strategy dp: --devices and --dp both name its device count. */
static int settle_devices(train_opts *o)
{
    coh_parallel_config *p = &o->cfg.par;
    if (p->strategy != COH_STRATEGY_DP) {
        if (o->devices)
            return cli_usage_error(CMD, "--devices '%ld' is for --strategy dp; other strategies "
                                   "run one process per rank (cohort run --nproc-per-node N)",
                                   o->devices);
        return 0;
    }
    if (o->devices && o->cfg.dp_given && o->devices != p->dp)
        return cli_usage_error(CMD, "--devices %ld and --dp %d disagree (both are strategy dp's "
                               "device count)", o->devices, p->dp);
    if (!o->devices)
        o->devices = o->cfg.dp_given ? p->dp : 2;
    p->dp = (int)o->devices;
    return 0;
}

/* 1 when shard file `shard` is the output `out` (the same device and inode, or the same resolved
 * folder and name while `out` does not exist yet), or, with `companions`, one of the files that
 * a save of checkpoint `out` writes or removes next to it (FILE.state<step>, FILE.shard...). */
static int output_is(const char *out, const struct stat *made, int companions, const char *shard)
{
    struct stat s;
    char real[PATH_MAX], dir[4200], out_dir[PATH_MAX];
    if (stat(shard, &s))
        return 0; /* the loader says why it cannot read it */
    if (made && s.st_dev == made->st_dev && s.st_ino == made->st_ino)
        return 1;
    cli_folder_of(out, dir, sizeof dir);
    if (!realpath(shard, real) || !realpath(dir, out_dir))
        return 0;
    const char *name = strrchr(real, '/') + 1, *out_name = strrchr(out, '/');
    out_name = out_name ? out_name + 1 : out;
    size_t n = (size_t)(name - real) - (name - real > 1); /* its folder, "/" kept */
    if (strlen(out_dir) != n || strncmp(real, out_dir, n))
        return 0;
    return companions ? coh_ckpt_file_of(out, name) : !strcmp(name, out_name);
}

/* One output against the shards' files (coh_shard_files): the first it would overwrite. */
typedef struct output_check {
    const char *out;
    const struct stat *made; /* the output as it exists, NULL when it does not yet */
    int companions;
    char hit[4096];
} output_check;

static coh_status output_hits(void *ctx, const char *file)
{
    output_check *c = ctx;
    if (!output_is(c->out, c->made, c->companions, file))
        return COH_OK;
    snprintf(c->hit, sizeof c->hit, "%s", file);
    return COH_ERR_INVALID; /* found: stop here */
}

/* An output (--save and its companions, --metrics, --dump-params) that would overwrite a
 * training or validation shard is refused before anything runs: a checkpoint written over its
 * own data loses the data. Globs are expanded as the loader expands them (a glob matching
 * nothing is the loader's error to report). */
static int check_not_data(const train_opts *o, const char *opt, const char *out, int companions)
{
    struct stat made;
    output_check c = {out, stat(out, &made) ? NULL : &made, companions, ""};
    for (int v = 0; v < 2; v++) {
        const char *const *paths = v ? o->val : o->data;
        for (int i = 0; i < (v ? o->nval : o->ndata); i++)
            if (coh_shard_files(paths[i], output_hits, &c) && c.hit[0])
                return cli_usage_error(CMD, "%s '%s' would overwrite %s '%s'%s: give the output "
                                       "another name", opt, out, v ? "--val-data" : "--data",
                                       c.hit,
                                       companions && !output_is(out, c.made, 0, c.hit)
                                           ? " (one of the files its saves write or remove)"
                                           : "");
    }
    return 0;
}

/* The files the run writes, checked before it starts: a bad path found at the end of a run
 * loses the run (every rank checks: under a launcher each writes its own pieces). */
static int check_outputs(const train_opts *o)
{
    const struct { const char *opt, *path; int companions; } out[] = {
        {"--save", o->save, 1}, {"--metrics", o->metrics, 0}, {"--dump-params", o->dump_params, 0},
    };
    for (size_t i = 0; i < sizeof out / sizeof *out; i++) {
        int rc = out[i].path ? cli_check_output(CMD, out[i].opt, out[i].path) : 0;
        if (!rc && out[i].path)
            rc = check_not_data(o, out[i].opt, out[i].path, out[i].companions);
        if (rc)
            return rc;
    }
    return 0;
}

/* 0 ok, else the exit code. */
static int parse(train_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    coh_trainer_config_defaults(&o->tc);
    cli_config_init(&o->cfg);
    o->cfg.par.micro_batch = 8;
    o->shuffle = 1;
    o->log_every = 10;
    o->val_every = 100;
    o->val_batches = 10;
    int rc = cli_config_parse(CMD, argc, argv, own_options, parse_value, o);
    if (rc != CLI_OK)
        return rc;
    if (o->blas_info)
        return 0;
    const char *peak = getenv("COHORT_PEAK_GFLOPS");
    if (!o->peak_gflops && peak && *peak) {
        o->peak_origin = "COHORT_PEAK_GFLOPS";
        if (!cli_parse_double(CMD, "COHORT_PEAK_GFLOPS", peak, PEAK_MIN, PEAK_MAX,
                              &o->peak_gflops))
            return CLI_USAGE;
    }
    if (!o->ndata && !o->dry_run)
        return cli_usage_error(CMD, "missing --data: give at least one training shard");
    if (!o->tc.steps && !o->dry_run)
        return cli_usage_error(CMD, "missing --steps: give the number of optimizer steps");
    if (o->save_every && !o->save)
        return cli_usage_error(CMD, "--save-every needs --save FILE");
    if (o->tc.save_bf16 && !o->save)
        return cli_usage_error(CMD, "--save-dtype bf16 needs --save FILE");
    if (o->tc.save_bf16 && o->save_every)
        return cli_usage_error(CMD, "--save-dtype bf16 with --save-every: a restarted job "
                               "resumes from --save, which needs fp32 weights; save bf16 at the "
                               "end only");
    if (o->resume && o->init_from)
        return cli_usage_error(CMD, "--resume and --init-from exclude each other");
    if ((rc = check_outputs(o)))
        return rc;
    if (o->cfg.schedule_given && o->cfg.par.pp < 2) /* before the ranks: it is the flag at fault */
        return cli_usage_error(CMD, "--schedule %s is a pipeline schedule: it needs --pp 2 or "
                               "more", coh_schedule_name(o->cfg.par.schedule));
    coh_launch_env env;
    if (coh_launch_env_read(&env))
        return cli_fail(CMD, COH_ERR_INVALID);
    o->world = env.world_size;
    int described = 0;
    if ((rc = described_world(o, &env, &described)))
        return rc;
    rc = cli_config_finish(CMD, &o->cfg, o->world);
    if (!rc)
        rc = settle_devices(o);
    if (!rc)
        rc = check_tied_order(o);
    if (!rc && described && !coh_strategy_is_multiprocess(o->cfg.par.strategy) &&
        o->cfg.par.dp != 1) /* as check_strategy refuses it under a launcher */
        rc = cli_usage_error(CMD, "strategy '%s' runs one process but the job described has %d "
                             "ranks: use --strategy ddp or zero1..zero3",
                             coh_strategy_name(o->cfg.par.strategy), o->world);
    return rc ? rc : described ? 0 : check_strategy(o, &env);
}

/* A model flag given with --resume or --init-from must say what the checkpoint holds: the
 * weights decide the shape, and a flag silently ignored would train another model than asked. */
static int check_against_checkpoint(const train_opts *o, const char *from, const coh_gpt_config *m)
{
    const cli_config *cfg = &o->cfg;
    coh_gpt_config want = *m;
    if (cfg->preset && coh_gpt_preset(cfg->preset, &want))
        return cli_fail(CMD, COH_ERR_INVALID);
    const struct { const char *flag; long given; int have; } f[] = {
        {"--layers", cfg->layers ? cfg->layers : want.layers, m->layers},
        {"--heads", cfg->heads ? cfg->heads : want.heads, m->heads},
        {"--dim", cfg->dim ? cfg->dim : want.dim, m->dim},
        {"--vocab", cfg->vocab ? cfg->vocab : want.vocab, m->vocab},
    };
    const char *how = o->resume ? "--resume" : "--init-from";
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        if (f[i].given == f[i].have)
            continue;
        char said[96], more[64];
        if (cfg->preset)
            snprintf(said, sizeof said, "--model %s (%s %ld)", cfg->preset, f[i].flag + 2,
                     f[i].given);
        else
            snprintf(said, sizeof said, "%s %ld", f[i].flag, f[i].given);
        snprintf(more, sizeof more, ", or start a new run without %s", how);
        return cli_model_disagrees(CMD, said, f[i].flag, f[i].have, how, from,
                                   cfg->preset ? "--model" : f[i].flag, more);
    }
    return 0;
}

/* The tokenizer that made the shards: the given one checked against their largest id, else
 * inferred from it (bytes stay below 256; GPT-2 shards hold ids up to its end-of-text 50256). */
static int settle_tokenizer(train_opts *o, int32_t max_id)
{
    if (o->tokenizer && strcmp(o->tokenizer, "byte") && strcmp(o->tokenizer, "gpt2"))
        return cli_usage_error(CMD, "invalid --tokenizer '%s': valid are byte, gpt2",
                               o->tokenizer);
    if (o->tokenizer && !strcmp(o->tokenizer, "byte") && max_id > 255)
        return cli_usage_error(CMD, "--tokenizer byte, but the shards hold token id %d (bytes "
                               "are 0..255): they were prepared with another tokenizer (gpt2?)",
                               (int)max_id);
    if (o->tokenizer || max_id < 0)
        return 0;
    o->tokenizer = max_id < 256 ? "byte" : max_id <= 50256 ? "gpt2" : NULL;
    if (o->tokenizer)
        coh_info("tokenizer %s (from the shards' largest token id, %d), recorded for 'cohort "
                 "generate'; --tokenizer NAME says it", o->tokenizer, (int)max_id);
    return 0;
}

/* The shards against the model's vocabulary: an id beyond it is refused here with the fix, a
 * default-sized vocabulary over byte data is warned about. */
static int check_data(train_opts *o, const coh_gpt_config *m, const char *from)
{
    if (!o->ndata)
        return 0;
    int32_t max_id;
    coh_status st = coh_shards_max_id(o->data, (size_t)o->ndata, &max_id);
    if (st)
        return cli_fail(CMD, st);
    if (max_id >= m->vocab)
        return cli_usage_error(CMD, "the shards hold token id %d, outside the model's vocabulary "
                               "of %d ids%s%s%s: %s", (int)max_id, m->vocab,
                               from ? " (checkpoint '" : "", from ? from : "", from ? "')" : "",
                               from ? "train on shards of its tokenizer"
                               : max_id <= 50256 && m->vocab == 256
                                   ? "these are GPT-2 shards: drop --vocab (default 50257) or "
                                     "prepare the text with --tokenizer byte"
                                   : "give --vocab at least the largest id + 1");
    if (!from && !o->cfg.vocab && !o->cfg.preset && max_id >= 0 && max_id < 256)
        coh_warn("the shards hold byte ids only (largest %d) but the model has the default "
                 "vocabulary of %d ids: give --vocab 256 for byte data (a smaller model that "
                 "learns the same)", (int)max_id, m->vocab);
    return settle_tokenizer(o, max_id);
}

/* What the state file of --resume says of the run that saved it; zero where it does not say
 * (a state that does not open, or of the layout before sharded saves, is left to the resume
 * itself to refuse). */
typedef struct resume_facts {
    int known;             /* the state file was read */
    unsigned long long step;
    coh_loader_pos data;
    long micro_batch, accum, seq; /* 0: not recorded (checkpoints before they were) */
} resume_facts;

static long meta_long(const coh_st_file *f, const char *key)
{
    const char *v = coh_st_meta_get(f, key);
    return v ? atol(v) : 0;
}

static void read_resume(const train_opts *o, resume_facts *r)
{
    char sp[4200];
    coh_train_state s;
    coh_st_file *f;
    memset(r, 0, sizeof *r);
    if (!o->resume || coh_ckpt_state_path(o->resume, sp, sizeof sp) ||
        coh_state_open(sp, &s, &f)) {
        coh_err_clear();
        return;
    }
    *r = (resume_facts){!coh_st_meta_get(f, "zero_index"), (unsigned long long)s.step, s.data,
                        meta_long(f, "micro_batch"), meta_long(f, "grad_accum"),
                        meta_long(f, "seq")};
    coh_st_close(f);
    /* before the state recorded it: every step took accum batches of the loader, so the
     * batches taken so far over the steps (when that divides) */
    unsigned long long rows = s.data.global_rows, epoch_batches = rows ? s.data.windows / rows : 0,
                       taken;
    /* an absurd state's product wraps around: then it tells nothing (the loader refuses it) */
    int wraps = __builtin_mul_overflow(s.data.epoch, epoch_batches, &taken) ||
                __builtin_add_overflow(taken, s.data.step, &taken);
    if (!r->accum && !wraps && s.step && taken % s.step == 0 && taken / s.step <= INT_MAX)
        r->accum = (long)(taken / s.step);
}

/* The model config from a preset, a checkpoint, or the custom options. */
static int model_config(train_opts *o, coh_gpt_config *m, const resume_facts *rf)
{
    coh_status st;
    const cli_config *cfg = &o->cfg;
    const char *from = o->resume ? o->resume : o->init_from;
    if (from) {
        if ((st = coh_gpt_checkpoint_config(from, (int)cfg->heads, m, NULL, 0)))
            return cli_fail(CMD, st);
        int rc = check_against_checkpoint(o, from, m);
        if (rc)
            return rc;
    } else if (cfg->preset) {
        if ((st = coh_gpt_preset(cfg->preset, m)))
            return cli_fail(CMD, st);
    } else {
        *m = (coh_gpt_config){6, 6, 384, 50257, 256, 0, 0};
        if (cfg->seq)
            m->seq = (int)cfg->seq;
    }
    if (!from) {
        if (cfg->layers) m->layers = (int)cfg->layers;
        if (cfg->heads) m->heads = (int)cfg->heads;
        if (cfg->dim) m->dim = (int)cfg->dim;
        if (cfg->vocab) m->vocab = (int)cfg->vocab;
    }
    if (m->vocab > 65536)
        return cli_usage_error(CMD, "invalid --vocab '%d': token shards hold 16-bit token ids, "
                               "so at most 65536", m->vocab);
    if (cfg->ffn && cfg->ffn != 4L * m->dim)
        return cli_usage_error(CMD, "invalid --ffn '%ld': cohort's GPT has an MLP of 4 x dim = "
                               "%d", cfg->ffn, 4 * m->dim);
    long T = cfg->seq ? cfg->seq : rf->seq ? rf->seq : (m->seq < 256 ? m->seq : 256);
    if (T > m->seq)
        return cli_usage_error(CMD, "invalid --seq '%ld': the model's context is %d", T, m->seq);
    o->cfg.par.seq = T;
    if ((st = coh_gpt_config_check(m)))
        return cli_fail(CMD, st);
    return check_data(o, m, from);
}

/* The configuration checked as the estimator checks it, then against what the trainer runs;
 * the trainer config's batch shape resolved from it. */
static int check_config(train_opts *o)
{
    const coh_gpt_config *m = &o->tc.model;
    coh_model_desc desc;
    coh_status st = coh_model_gpt(m->layers, m->dim, m->heads, m->vocab, m->seq, 0, &desc);
    const coh_parallel_config *p = &o->cfg.par;
    if (!st && p->stage_layers && p->pp > 1) {
        /* An explicit split is checked below as the trainer runs it: chunks of the embeddings
         * or the head alone make more chunks than blocks valid (docs/pipeline.md). The
         * estimator's rule, a block in every chunk, is for the splits it chooses, so it sees a
         * count that meets it. */
        int64_t u = (int64_t)p->pp * (p->schedule == COH_SCHED_INTERLEAVED ? p->virtual_stages : 1);
        if (desc.layers < u)
            desc.layers = u;
    }
    if (!st)
        st = coh_parallel_config_check(&desc, p);
    if (st)
        return cli_fail(CMD, st);
    char why[160];
    if (!coh_parallel_config_runnable(&o->cfg.par, why, sizeof why))
        return cli_usage_error(CMD, "%s (see 'cohort estimate' for its memory)", why);
    int rc = cli_config_place(CMD, &o->cfg, o->world);
    if (rc)
        return rc;
    if (p->stage_layers) {
        int v = p->schedule == COH_SCHED_INTERLEAVED ? p->virtual_stages : 1;
        if (p->pp < 2)
            return cli_usage_error(CMD, "--stage-layers '%s' needs a pipeline (--pp 2 or more)",
                                   p->stage_layers);
        int *bounds = malloc(sizeof *bounds * ((size_t)p->pp * v + 1));
        st = bounds ? coh_pipe_parse_layers(p->stage_layers, m->layers, p->pp * v, bounds)
                    : coh_errf(COH_ERR_NOMEM, "out of memory");
        free(bounds);
        if (st)
            return cli_fail(CMD, st);
    }

    if (p->precision == COH_PREC_BF16_MIXED) { /* before training measures its memory */
        char isa[200];
        coh_bf16_level lv = coh_bf16_support(isa, sizeof isa);
        if (lv == COH_BF16_UNAVAILABLE)
            return cli_usage_error(CMD, "--precision %s", isa); /* "bf16-mixed: ..." */
        if (lv == COH_BF16_EMULATED)
            coh_warn("--precision bf16-mixed: this CPU has no bf16 instructions (avx512_bf16); "
                     "its products are emulated (%s), no faster than --precision fp32", isa);
        else
            coh_info("bf16-mixed: products on %s through oneDNN", isa);
    }

    coh_par_config pc = {.train = o->tc, .par = o->cfg.par};
    coh_par_config_apply(&pc);
    o->tc = pc.train;
    o->tc.model.tp = 0; /* the command speaks of the whole model; the trainer holds its shard */
    o->tc.model.sp = 0;
    if (p->precision == COH_PREC_BF16_MIXED && !o->dry_run &&
        (st = coh_bf16_prepare(&o->tc.model, o->tc.batch, o->tc.seq)))
        return cli_fail(CMD, st);
    return 0;
}

/* --resume against this run's schedule and batch: --steps (and --stop-at) beyond the saved
 * step, the sequence length it trained on, and the global batch, micro-batch x grad-accum x
 * data-parallel, which must be the checkpoint's (another split of it continues the same run:
 * half the ranks and twice the accumulation). -1: nothing to train (--steps reached). */
static int check_resume(const train_opts *o, const resume_facts *r)
{
    if (!r->known)
        return 0;
    if (o->tc.steps < (long)r->step)
        return cli_usage_error(CMD, "--steps %ld is below the step of --resume '%s', %llu: "
                               "--steps counts every step of the run, the saved ones included",
                               o->tc.steps, o->resume, r->step);
    if (o->stop_at && o->stop_at <= (long)r->step && o->stop_at < o->tc.steps)
        return cli_usage_error(CMD, "--stop-at %ld is not after the step of --resume '%s', "
                               "%llu", o->stop_at, o->resume, r->step);
    if (r->seq && r->seq != o->tc.seq)
        return cli_usage_error(CMD, "--seq %d disagrees with --resume '%s', which trained on "
                               "--seq %ld: drop --seq (the checkpoint's is taken), or start a "
                               "new run without --resume", o->tc.seq, o->resume, r->seq);
    const coh_parallel_config *p = &o->cfg.par;
    long mb = o->tc.batch, rows = mb * p->dp, accum = o->tc.accum;
    /* the state's rows are any 64-bit number and its accumulation up to INT_MAX: their product
     * is taken without wrapping around (a wrapped one could equal this run's batch) */
    unsigned long long was_rows = r->data.global_rows, was_global;
    int was_huge = __builtin_mul_overflow(was_rows, (unsigned long long)r->accum, &was_global);
    char was_total[48];
    if (was_huge)
        snprintf(was_total, sizeof was_total, "more than %llu", ULLONG_MAX);
    else
        snprintf(was_total, sizeof was_total, "%llu", was_global);
    if (!r->accum && was_rows != (unsigned long long)rows) /* a state that tells no accumulation */
        return cli_usage_error(CMD, "the batch changed: --resume '%s' was trained on "
                               "micro-batches of %llu sequences (micro-batch x data-parallel), "
                               "this run on %ld (%ld x %d); start a new run to change it",
                               o->resume, was_rows, rows, mb, p->dp);
    if (r->accum && (was_huge || was_global != (unsigned long long)(rows * accum))) {
        char was[96], now[96], what[160] = "";
        if (r->micro_batch)
            snprintf(was, sizeof was, "micro-batch %ld x grad-accum %ld x data-parallel %llu",
                     r->micro_batch, r->accum, was_rows / (unsigned long long)r->micro_batch);
        else /* a state from before the split was recorded */
            snprintf(was, sizeof was, "micro-batch x data-parallel %llu x grad-accum %ld",
                     was_rows, r->accum);
        snprintf(now, sizeof now, "%ld x %ld x %d", mb, accum, p->dp);
        size_t n = 0;
        if (r->micro_batch && r->micro_batch != mb)
            n += (size_t)snprintf(what + n, sizeof what - n, "--micro-batch %ld (saved %ld), ",
                                  mb, r->micro_batch);
        if (r->micro_batch && was_rows / (unsigned long long)r->micro_batch !=
                                  (unsigned long long)p->dp)
            n += (size_t)snprintf(what + n, sizeof what - n, "the data-parallel size %d (saved "
                                  "%llu), ", p->dp, was_rows / (unsigned long long)r->micro_batch);
        if (!r->micro_batch && was_rows != (unsigned long long)rows)
            n += (size_t)snprintf(what + n, sizeof what - n, "micro-batch x data-parallel %ld "
                                  "(saved %llu), ", rows, was_rows);
        if (r->accum && r->accum != accum)
            n += (size_t)snprintf(what + n, sizeof what - n, "--grad-accum %ld (saved %ld), ",
                                  accum, r->accum);
        if (n >= 2)
            what[n - 2] = 0;
        return cli_usage_error(CMD, "the global batch changed: --resume '%s' was trained on %s "
                               "sequences a step (%s), this run on %ld (%s): %s; keep the global "
                               "batch (another split of it resumes: e.g. half the ranks and twice "
                               "--grad-accum) or start a new run", o->resume,
                               was_total, was, rows * accum, now, what);
    }
    if (o->tc.steps == (long)r->step && !o->dry_run) {
        coh_info("--resume '%s' is at step %llu, which --steps %ld asks for: nothing to train",
                 o->resume, r->step, o->tc.steps);
        return -1;
    }
    return 0;
}

/* 1 when ranks a and b of the job sit on different nodes of per_node ranks. */
static int other_node(long a, long b, int per_node)
{
    return a / per_node != b / per_node;
}

/* Stage s as the trainer runs it: its layout's messages (fp32 values, coh_par_stage_traffic),
 * the memory it predicts for its rank, and where its peers sit in the job. */
static coh_status stage_facts(const train_opts *o, int s, int per_node, coh_plan_stage_view *v)
{
    const coh_parallel_config *p = &o->cfg.par;
    coh_par_config pc = {.train = o->tc, .par = *p};
    coh_par_config_apply(&pc);
    coh_par_traffic t;
    coh_par_memory mem;
    coh_status st = coh_par_stage_traffic(&pc, s, &t);
    if (!st)
        st = p->pp > 1 ? coh_par_memory_estimate_stage(&pc, s, &mem)
                       : coh_par_memory_estimate(&pc, p->dp, 0, &mem);
    if (st)
        return st;
    int g = p->grad_reduce_bf16 ? 2 : 4; /* grad_sync.c: bf16 or fp32 buckets */
    *v = (coh_plan_stage_view){
        .blocks = t.blocks, .params = (int64_t)t.params, .memory_bytes = mem.total,
        .pipe_send_bytes = 4.0 * t.pipe_send, .tp_allreduce_bytes = 4.0 * t.tp_allreduce,
        .dp_reduce_bytes = (double)g * t.dp_reduce, .zero_gather_bytes = 4.0 * t.zero_gather,
        .embed_allreduce_bytes = 4.0 * t.embed_allreduce, .next_stage_inter = -1,
        .dp_inter = -1, .tp_inter = -1};
    v->dp_buckets = t.dp_buckets;
    for (int i = 0; i < t.dp_buckets && i < COH_BUCKETS_LISTED; i++)
        v->dp_bucket_values[i] = (double)t.dp_bucket[i];
    long r0 = coh_mesh_rank(p->dp, p->pp, p->tp, 0, s, 0);
    if (s + 1 < p->pp)
        v->next_stage_inter = other_node(r0, coh_mesh_rank(p->dp, p->pp, p->tp, 0, s + 1, 0),
                                         per_node);
    if (p->dp > 1)
        v->dp_inter = other_node(r0, coh_mesh_rank(p->dp, p->pp, p->tp, p->dp - 1, s, 0),
                                 per_node);
    if (p->tp > 1)
        v->tp_inter = other_node(r0, coh_mesh_rank(p->dp, p->pp, p->tp, 0, s, p->tp - 1),
                                 per_node);
    return COH_OK;
}

/* The job's mesh: every rank and every stage, as the trainer would run them. */
static int mesh_json(coh_jw *w, const train_opts *o)
{
    const coh_parallel_config *p = &o->cfg.par;
    int world = p->dp * p->pp * p->tp;
    int per_node = p->gpus_per_node > 0 ? p->gpus_per_node : world;
    coh_plan_stage_view *v = calloc((size_t)p->pp, sizeof *v);
    coh_status st = v ? COH_OK : coh_errf(COH_ERR_NOMEM, "out of memory");
    for (int s = 0; !st && s < p->pp; s++)
        st = stage_facts(o, s, per_node, &v[s]);
    if (!st)
        cli_mesh_json(w, p->dp, p->pp, p->tp, per_node, v);
    free(v);
    return st != COH_OK;
}

/* --dry-run: the configuration the trainer would run, as text or JSON. */
static int dry_run(const train_opts *o)
{
    const coh_parallel_config *p = &o->cfg.par;
    const coh_gpt_config *m = &o->tc.model;
    if (o->json) {
        coh_jw w;
        coh_jw_init(&w, stdout, 1);
        coh_jw_object_begin(&w);
        coh_jw_key(&w, "model");
        coh_jw_object_begin(&w);
        coh_jw_field_int(&w, "layers", m->layers);
        coh_jw_field_int(&w, "heads", m->heads);
        coh_jw_field_int(&w, "dim", m->dim);
        coh_jw_field_int(&w, "vocab", m->vocab);
        coh_jw_field_int(&w, "positions", m->seq);
        coh_jw_object_end(&w);
        cli_config_json(&w, p, o->tc.seq, o->tc.accum);
        coh_jw_field_int(&w, "threads", o->cfg.threads);
        coh_jw_key(&w, "tied_grad_order");
        coh_jw_string(&w, o->tc.tied_grad_apart || p->pp > 1 ? "pipeline" : "interleaved");
        coh_jw_key(&w, "grad_accum_order");
        coh_jw_string(&w, o->tc.grad_accum_apart ? "apart" : "interleaved");
        if (p->strategy != COH_STRATEGY_DP && mesh_json(&w, o)) {
            coh_jw_object_end(&w);
            coh_jw_finish(&w);
            return cli_fail(CMD, COH_ERR_INVALID);
        }
        coh_jw_object_end(&w);
        coh_jw_finish(&w);
        return CLI_OK;
    }
    printf("model     %d layers, %d heads, dim %d, vocab %d, context %d\n", m->layers, m->heads,
           m->dim, m->vocab, m->seq);
    printf("strategy  %s on dp %d x pp %d x tp %d, %s\n", coh_strategy_name(p->strategy), p->dp,
           p->pp, p->tp, coh_precision_name(p->precision));
    printf("batch     micro-batch %d x seq %d x accumulation %d x data-parallel %d\n",
           o->tc.batch, o->tc.seq, o->tc.accum, p->dp);
    if (o->tc.tied_grad_apart && p->pp == 1)
        printf("tied wte  its two gradients summed in a pipeline's order (one wte more)\n");
    if (o->tc.grad_accum_apart)
        printf("gradients each micro-batch's summed apart, then added: 2 data-parallel ranks' "
               "order (one gradient arena more)\n");
    int world = p->dp * p->pp * p->tp, per = p->gpus_per_node > 0 ? p->gpus_per_node : world;
    if (world > 1)
        printf("mesh      %d ranks, %d a node: tp fastest, then dp, then pp (--json: every "
               "rank)\n", world, per);
    coh_par_config pc = {.train = o->tc, .par = *p};
    for (int s = 0; p->pp > 1 && s < p->pp; s++) {
        coh_pipe_stage st;
        if (coh_par_pipe_stage(&pc, s, &st))
            return cli_fail(CMD, COH_ERR_INVALID);
        char parts[512];
        printf("stage %d   %s, %zu parameters\n", s, cli_stage_parts(&st, parts, sizeof parts),
               st.params);
    }
    return CLI_OK;
}

int cmd_train(int argc, char **argv)
{
    train_opts o;
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    cli_engine_setup((int)o.cfg.threads);
    if (o.blas_info) {
        printf("%s\n", coh_blas_kernel());
        return CLI_OK;
    }
    resume_facts rf;
    read_resume(&o, &rf);
    if ((rc = model_config(&o, &o.tc.model, &rf)) || (rc = check_config(&o)) ||
        (rc = check_resume(&o, &rf)))
        return rc < 0 ? CLI_OK : rc;
    return o.dry_run ? dry_run(&o) : cli_train_run(&o);
}
