/* cli_train.h: option parsing and model setup shared by `cohort train`, `eval` and `generate`. */
#ifndef COHORT_CLI_TRAIN_H
#define COHORT_CLI_TRAIN_H

#include <stdint.h>

#include "cli.h"
#include "cli_config.h"
#include "cohort/parallel.h"
#include "cohort/train.h"

#define MAX_SHARDS 64

/* Everything `cohort train` was asked to do. */
typedef struct train_opts {
    coh_trainer_config tc;     /* batch, seq and accum resolved from cfg.par */
    cli_config cfg;            /* the model shape and parallel options shared with estimate */
    const char *data[MAX_SHARDS], *val[MAX_SHARDS];
    int ndata, nval;
    long val_every, val_batches, log_every, save_every, stop_at;
    const char *save, *resume, *init_from, *metrics, *tokenizer;
    int shuffle, deterministic, blas_info, dry_run, json;
    const char *tied_order;    /* --tied-grad-order as given, NULL when not */
    const char *trace;         /* --trace FILE.json (per rank: FILE.rankN.json when N > 1) */
    const char *dump_params;   /* --dump-params FILE: final parameters as raw f32 (rank 0) */
    long devices;              /* strategy dp: its devices in this process (cfg.par.dp), else 0 */
    int world;                 /* ranks of the job, from the launcher's environment (a dry run:
                                  or from --world, --nodes x --gpus-per-node) */
    long dry_world;            /* --world N (--dry-run only) */
    double peak_gflops;        /* --peak-gflops, else COHORT_PEAK_GFLOPS: the peak MFU is taken
                                  against; 0: measured at start */
    const char *peak_origin;   /* which of the two gave it */
} train_opts;

/* The options of the commands that run a checkpoint (`cohort eval`, `cohort generate`). */
typedef struct cli_checkpoint_opts {
    const char *path; /* --checkpoint FILE */
    long heads;       /* --heads N, for checkpoints without cohort's metadata (0: from it) */
    long threads;     /* --threads N (0: OMP_NUM_THREADS, else all cores) */
} cli_checkpoint_opts;

/* Their getopt_long entries (codes 'c', 'H', 't') and --help ('h'), for a command's table. */
#define CLI_CHECKPOINT_OPTIONS                                                                    \
    {"checkpoint", 1, 0, 'c'}, {"heads", 1, 0, 'H'}, {"threads", 1, 0, 't'}, {"help", 0, 0, 'h'}

/* cli_parse_options for such a command: the options above go into o, the others to take;
 * then --checkpoint is required. */
int cli_checkpoint_parse(const char *cmd, int argc, char **argv, const struct option *options,
                         cli_option_fn take, void *ctx, cli_checkpoint_opts *o);

/* An output file a run writes (--save, --metrics, --dump-params), checked before the run
 * starts rather than when it writes: its folder exists and is writable, and it is not a
 * folder itself. 0 when usable, else a usage error naming the option and path (exit 2). */
int cli_check_output(const char *cmd, const char *opt, const char *path);

/* A model flag that contradicts the checkpoint the model comes from (train's --resume and
 * --init-from, eval's and generate's --checkpoint) is refused, not ignored: "SAID disagrees
 * with HOW 'FROM', whose model has FLAG HAVE: drop DROP (the checkpoint decides the model)"
 * and `more`. Returns the exit code (CLI_USAGE). */
int cli_model_disagrees(const char *cmd, const char *said, const char *flag, long have,
                        const char *how, const char *from, const char *drop, const char *more);

/* The model of --checkpoint (coh_gpt_checkpoint_config, --heads as the hint for a file without
 * cohort's metadata), with a --heads that contradicts its metadata refused. 0, or the exit
 * code after printing why. */
int cli_checkpoint_config(const char *cmd, const cli_checkpoint_opts *o, coh_gpt_config *m,
                          char *tokenizer, size_t cap);

/* Run the training described by o (model config already resolved); returns the exit code. */
int cli_train_run(const train_opts *o);

/* Called first by commands that run the engine: BLAS kernel check (may re-exec) and threads. */
void cli_engine_setup(int threads);

/* Peak resident set size of this process in bytes (since the last cli_rss_reset). */
uint64_t cli_peak_rss(void);
/* Reset the peak resident size to the current one, where the system allows it; returns the
 * current resident size in bytes (0 when unknown). */
uint64_t cli_rss_reset(void);

#endif
