/* cmd_bench.c: `cohort bench <name> [options]`: runs one of the built-in benchmarks. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_bench.h"

const char cmd_bench_summary[] = "measure cohort against its anchors (comm, ...)";

/* One row per benchmark; a new benchmark adds its cli_bench_<name>.c and a row here. */
static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} benches[] = {
    {"comm", bench_comm, bench_comm_summary},
    {"gemm", bench_gemm, bench_gemm_summary},
    {"link", bench_link, bench_link_summary},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: cohort bench <name> [options]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof benches / sizeof *benches; i++)
        fprintf(f, "  %-8s %s\n", benches[i].name, benches[i].summary);
    fprintf(f, "\n'cohort bench <name> --help' lists a benchmark's options.\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof benches / sizeof *benches; i++)
        if (!strcmp(argv[1], benches[i].name))
            return benches[i].run(argc - 1, argv + 1);
    return cli_usage_error("bench", "unknown benchmark '%s': expected comm, gemm or link", argv[1]);
}
