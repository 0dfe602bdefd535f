/* cli_bench.h: the benchmarks behind `cohort bench <name>`; each is one cli_bench_<name>.c
 * with a row in cmd_bench.c's table. */
#ifndef COHORT_CLI_BENCH_H
#define COHORT_CLI_BENCH_H

#include <stdint.h>

#include "cohort/comm.h"

/* argv[0] is the benchmark's name; returns a CLI exit code. */
int bench_comm(int argc, char **argv);
extern const char bench_comm_summary[];
int bench_gemm(int argc, char **argv);
extern const char bench_gemm_summary[];
/* `cohort bench gemm --device NAME` (cli_bench_gemm_device.c): out NULL or a calibration
 * file to write (a GPU only) */
int bench_gemm_device(const char *device, const char *out, int quick);
int bench_link(int argc, char **argv);
extern const char bench_link_summary[];

/* A sweep over message sizes (cli_bench_sweep.c): min_bytes, then x factor up to max_bytes,
 * warmup untimed and iters timed runs of each, over the transport `kind`. */
typedef struct bench_sweep {
    uint64_t min_bytes, max_bytes;
    double factor;
    int iters, warmup;
    coh_comm_kind kind;
} bench_sweep;

/* Its options, for a getopt_long table: */
enum { BENCH_MIN_BYTES = 0x200, BENCH_MAX_BYTES, BENCH_STEP_FACTOR, BENCH_ITERS, BENCH_WARMUP,
       BENCH_COMM };
#define BENCH_SWEEP_OPTIONS                                                                    \
    {"min-bytes", 1, 0, BENCH_MIN_BYTES}, {"max-bytes", 1, 0, BENCH_MAX_BYTES},                \
        {"step-factor", 1, 0, BENCH_STEP_FACTOR}, {"iters", 1, 0, BENCH_ITERS},                \
        {"warmup", 1, 0, BENCH_WARMUP}, {"comm", 1, 0, BENCH_COMM}

/* getopt_long's `ch` with its `arg`: 1 when it is one of the sweep's options and its value is
 * good, 0 when the value is bad (the error printed, naming it), -1 when it is none of them. */
int bench_sweep_option(const char *cmd, int ch, const char *arg, bench_sweep *s);
/* After the options: CLI_OK, or CLI_USAGE when --min-bytes is above --max-bytes. */
int bench_sweep_check(const char *cmd, const bench_sweep *s);

#endif
