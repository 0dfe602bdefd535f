/* cli_config.h: the options that every command describing a training run shares (`cohort
 * train`, `cohort estimate`, `cohort plan`): the model's shape and the parallel configuration,
 * with one spelling, one limit and one message each, parsed into one coh_parallel_config. */
#ifndef COHORT_CLI_CONFIG_H
#define COHORT_CLI_CONFIG_H

#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "cohort/parallel_config.h"
#include "cohort/plan.h"

/* getopt_long codes of the shared options start here; a command's own codes stay below. */
#define CLI_CONFIG_FIRST 1000

/* What the shared options said. The model's dimensions are 0 when not given. */
typedef struct cli_config {
    coh_parallel_config par;
    const char *preset;                          /* --model */
    long layers, heads, dim, vocab, seq, ffn;    /* --layers ... --ffn */
    long threads;                                /* --threads */
    int dp_given, precision_given;
    int strategy_given;                          /* --strategy */
    int schedule_given;                          /* --schedule */
    int zero;                                    /* --zero, -1 = not given */
    const char *accum_flag;                      /* the spelling that set microbatches */
} cli_config;

void cli_config_init(cli_config *c);

/* own (terminated by a zero entry) followed by the shared options into out (cap entries, the
 * last one the terminator). Returns 0 when cap is too small. */
int cli_config_options(const struct option *own, struct option *out, size_t cap);

/* cli_parse_options over own followed by the shared options (a command's handler passes the
 * shared ones to cli_config_option). */
int cli_config_parse(const char *cmd, int argc, char **argv, const struct option *own,
                     cli_option_fn take, void *ctx);

/* Handle getopt code `code`: -1 when it is not a shared option, 1 when taken, 0 after a usage
 * error naming the option and the value. */
int cli_config_option(const char *cmd, int code, const char *arg, cli_config *c);

/* After the options: settle dp and the strategy. world is the number of ranks of the running
 * job (`cohort train`: dp = world / (tp x pp), checked by cli_config_place) or 0 when none runs
 * (`cohort estimate`: dp comes from --dp, or the devices of --nodes x --gpus-per-node over
 * tp x pp). Returns CLI_OK or CLI_USAGE after a message. */
int cli_config_finish(const char *cmd, cli_config *c, int world);

/* A running job (`cohort train`): its `world` ranks must be dp x tp x pp (with --dp, exactly
 * that dp). Call after the configuration itself was checked, so a refusal names the first
 * thing wrong. Returns CLI_OK or CLI_USAGE after a message. */
int cli_config_place(const char *cmd, const cli_config *c, int world);

/* Whether any of --layers, --dim, --heads, --vocab, --ffn was given: a custom shape, or a
 * preset (--model) with some dimensions changed. */
int cli_config_shape_given(const cli_config *c);

/* The model of such a shape, as `cohort train` reads it: the preset's dimensions where none
 * was given (its MLP size only while --dim is the preset's). Returns CLI_OK, or the exit code
 * after a message naming what a custom model misses. */
int cli_config_model(const char *cmd, const cli_config *c, coh_model_desc *m);

/* The help lines of the shared options. */
void cli_config_help(FILE *f);

/* The "strategy" object of --json outputs: the configuration as run or priced. */
struct coh_jw;
void cli_config_json(struct coh_jw *w, const coh_parallel_config *p, int64_t seq,
                     int64_t microbatches);

#endif
