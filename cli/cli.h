/* cli.h: helpers shared by the cohort subcommands (error reporting and exit codes). */
#ifndef COHORT_CLI_H
#define COHORT_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

/* Exit codes of every subcommand. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

/* Print "cohort CMD: error: <message>" and return CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* For the default branch of a getopt_long loop (opterr = 0): "unknown or incomplete option
 * '--x' (see --help)" for the option getopt just rejected; returns CLI_USAGE. */
int cli_bad_option(const char *cmd, char *const *argv);

/* After the getopt_long loop: CLI_USAGE with "unexpected argument 'x'" when operands remain,
 * CLI_OK otherwise. */
int cli_no_operands(const char *cmd, int argc, char *const *argv);

/* The folder of a file's path ("." for a bare name), into buf. */
void cli_folder_of(const char *path, char *buf, size_t cap);

/* The folder a file named by option opt goes into exists and is writable: CLI_OK, else a usage
 * error naming the option, the path and the folder (checked before the work that writes it). */
int cli_check_folder_of(const char *cmd, const char *opt, const char *path);

/* The file named by option opt can be opened and is no folder: CLI_OK, else a usage error
 * naming the option, the path and why (checked before reading it, so that a missing input is
 * exit 2 whichever reader takes it). */
int cli_check_input(const char *cmd, const char *opt, const char *path);

/* What a command does with one option: code and arg as getopt_long gives them, name the long
 * option as its table spells it (NULL for -h). Returns 1 to go on, 0 after a usage error, -1 to
 * stop (after printing the help). */
typedef int (*cli_option_fn)(void *ctx, int code, const char *name, const char *arg);

/* The options loop of every subcommand: getopt_long over argv with the table options (and -h),
 * each option handed to take; an unknown or incomplete option and any operand are usage errors.
 * Returns CLI_OK, CLI_USAGE, or -1 when take stopped. */
struct option;
int cli_parse_options(const char *cmd, int argc, char **argv, const struct option *options,
                      cli_option_fn take, void *ctx);

/* Report a failed library call with its thread-local message; returns CLI_USAGE for
 * COH_ERR_INVALID (bad input) and CLI_FAILED otherwise. */
int cli_fail(const char *cmd, coh_status s);

/* The one parser of option values (cli_args.c). Each takes the option as typed ("--steps") and
 * on bad text prints "cohort CMD: error: invalid --steps 'x': must be an integer from 1 to N"
 * (a number, a size) and returns 0; 1 with *out set otherwise. */
int cli_parse_long(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
int cli_parse_int(const char *cmd, const char *opt, const char *s, int lo, int hi, int *out);
int cli_parse_double(const char *cmd, const char *opt, const char *s, double lo, double hi,
                     double *out);
int cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
                    float *out);
/* A byte size as coh_size_parse reads it ("16GiB", "512M"), at least lo bytes. */
int cli_parse_size(const char *cmd, const char *opt, const char *s, uint64_t lo, uint64_t *out);

/* A device's memory: a size with its unit; a bare number ("16") is refused, naming the units,
 * rather than read as bytes. */
int cli_parse_memory(const char *cmd, const char *opt, const char *s, uint64_t *out);

/* A link as GB/S[:LATENCY_US] ("25:5"; latency 5 us when left out): bandwidth above 0 and at
 * most 1e6 GB/s, latency from 0 to 1e7 us, into the planner's coh_link (bytes/s, seconds). */
struct coh_link;
int cli_parse_link(const char *cmd, const char *opt, const char *s, struct coh_link *out);

/* Name of the program as invoked, for usage lines ("cohort"). */
extern const char *cli_progname;

#endif
