/* test_api_null_text.c: the public parsers of a name or spec (dtypes, devices, strategies,
 * presets, ...) refuse a NULL text as they refuse a bad one, with COH_ERR_INVALID and a message,
 * instead of crashing the program. Each call runs in a child process: a crash fails the case
 * naming the function. */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cohort/checkpoint.h"
#include "cohort/comm.h"
#include "cohort/device.h"
#include "cohort/launch.h"
#include "cohort/parallel_config.h"
#include "cohort/plan.h"
#include "cohort/planner.h"

/* Runs call() in a child, which exits with the status it returned (255: a message was missing);
 * the status, or -1 when the child crashed. */
static int status_in_child(coh_status (*call)(void))
{
    pid_t pid = fork();
    if (pid == 0) {
        coh_err_clear();
        coh_status s = call();
        _exit(coh_last_error()[0] ? (int)s : 255);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Output structs of every parser fit here. */
static _Alignas(64) unsigned char out[1 << 16];

#define REFUSES_NULL(fn)                                                                       \
    static coh_status call_##fn(void) { return fn(NULL, (void *)out); }                         \
    static void test_##fn(void)                                                                \
    {                                                                                          \
        int got = status_in_child(call_##fn);                                                  \
        if (got != COH_ERR_INVALID) {                                                          \
            fprintf(stderr, "%s(NULL, out): %s\n", #fn,                                        \
                    got < 0 ? "crashed" : got == 255 ? "no message" : coh_status_name(got));   \
            check_failures++;                                                                  \
        }                                                                                      \
    }

REFUSES_NULL(coh_st_dtype_parse)
REFUSES_NULL(coh_dtype_parse)
REFUSES_NULL(coh_redop_parse)
REFUSES_NULL(coh_accel_parse)
REFUSES_NULL(coh_device_spec_parse)
REFUSES_NULL(coh_cpu_bind_parse)
REFUSES_NULL(coh_strategy_parse)
REFUSES_NULL(coh_precision_parse)
REFUSES_NULL(coh_recompute_parse)
REFUSES_NULL(coh_schedule_parse)
REFUSES_NULL(coh_offload_parse)
REFUSES_NULL(coh_model_preset)
REFUSES_NULL(coh_count_parse)
REFUSES_NULL(coh_hw_preset)

int main(void)
{
    RUN(test_coh_st_dtype_parse);
    RUN(test_coh_dtype_parse);
    RUN(test_coh_redop_parse);
    RUN(test_coh_accel_parse);
    RUN(test_coh_device_spec_parse);
    RUN(test_coh_cpu_bind_parse);
    RUN(test_coh_strategy_parse);
    RUN(test_coh_precision_parse);
    RUN(test_coh_recompute_parse);
    RUN(test_coh_schedule_parse);
    RUN(test_coh_offload_parse);
    RUN(test_coh_model_preset);
    RUN(test_coh_count_parse);
    RUN(test_coh_hw_preset);
    return CHECK_REPORT();
}
