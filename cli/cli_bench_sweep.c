/* cli_bench_sweep.c: the options of a sweep over message sizes that `cohort bench comm` and
 * `cohort bench link` share (sizes, step factor, timed and untimed iterations, transport). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_bench.h"

int bench_sweep_option(const char *cmd, int ch, const char *arg, bench_sweep *s)
{
    switch (ch) {
    case BENCH_MIN_BYTES: return cli_parse_size(cmd, "--min-bytes", arg, 1, &s->min_bytes);
    case BENCH_MAX_BYTES: return cli_parse_size(cmd, "--max-bytes", arg, 1, &s->max_bytes);
    case BENCH_STEP_FACTOR: {
        /* not cli_parse_double: its "from 1 to 1024" would admit 1, which never grows sizes */
        char *end;
        double v = strtod(arg, &end);
        if (end == arg || *end || isspace((unsigned char)*arg) || !(v > 1 && v <= 1024))
            return cli_usage_error(cmd, "invalid --step-factor '%s': must be a number above 1 "
                                   "and at most 1024", arg), 0;
        s->factor = v;
        return 1;
    }
    case BENCH_ITERS: return cli_parse_int(cmd, "--iters", arg, 1, 1000000, &s->iters);
    case BENCH_WARMUP: return cli_parse_int(cmd, "--warmup", arg, 0, 1000000, &s->warmup);
    case BENCH_COMM:
        if (strcmp(arg, "auto") && strcmp(arg, "shm") && strcmp(arg, "mpi") && strcmp(arg, "tcp"))
            return cli_usage_error(cmd, "invalid --comm '%s': expected auto, shm, mpi or tcp",
                                   arg), 0;
        s->kind = !strcmp(arg, "mpi") ? COH_COMM_MPI
                  : !strcmp(arg, "shm") ? COH_COMM_SHM
                  : !strcmp(arg, "tcp") ? COH_COMM_TCP : COH_COMM_AUTO;
        return 1;
    default: return -1;
    }
}

int bench_sweep_check(const char *cmd, const bench_sweep *s)
{
    if (s->min_bytes > s->max_bytes)
        return cli_usage_error(cmd, "invalid sizes: --min-bytes %llu above --max-bytes %llu",
                               (unsigned long long)s->min_bytes,
                               (unsigned long long)s->max_bytes);
    return CLI_OK;
}
