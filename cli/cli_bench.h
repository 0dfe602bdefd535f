/* cli_bench.h: the benchmarks behind `cohort bench <name>`; each is one cli_bench_<name>.c
 * with a row in cmd_bench.c's table. */
#ifndef COHORT_CLI_BENCH_H
#define COHORT_CLI_BENCH_H

/* argv[0] is the benchmark's name; returns a CLI exit code. */
int bench_comm(int argc, char **argv);
extern const char bench_comm_summary[];
int bench_gemm(int argc, char **argv);
extern const char bench_gemm_summary[];
int bench_link(int argc, char **argv);
extern const char bench_link_summary[];

#endif
