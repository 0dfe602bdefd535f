/* test_api_release_null.c: every destroy/release/close function of the public headers takes
 * NULL and does nothing, as free() does, so that a user's cleanup path may call them on what was
 * never created. Each call runs in a child process: a crash fails the case naming the function. */
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cohort/checkpoint.h"
#include "cohort/comm.h"
#include "cohort/data.h"
#include "cohort/device.h"
#include "cohort/parallel.h"
#include "cohort/report.h"
#include "cohort/train.h"
#include "cohort/train_dp.h"

/* Runs call() in a child; true when the child returned normally. */
static int survives(void (*call)(void))
{
    pid_t pid = fork();
    if (pid == 0) {
        call();
        _exit(0);
    }
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

#define NULL_SAFE(fn, ...)                                                                     \
    static void call_##fn(void) { fn(__VA_ARGS__); }                                           \
    static void test_##fn(void)                                                                \
    {                                                                                          \
        if (!survives(call_##fn)) {                                                            \
            fprintf(stderr, "%s(NULL) crashed\n", #fn);                                        \
            check_failures++;                                                                  \
        }                                                                                      \
    }

NULL_SAFE(coh_st_close, NULL)
NULL_SAFE(coh_comm_destroy, NULL)
NULL_SAFE(coh_comm_free, NULL, NULL)
NULL_SAFE(coh_tokens_release, NULL)
NULL_SAFE(coh_tokenizer_destroy, NULL)
NULL_SAFE(coh_loader_destroy, NULL)
NULL_SAFE(coh_inventory_destroy, NULL)
NULL_SAFE(coh_visible_release, NULL)
NULL_SAFE(coh_selection_release, NULL)
NULL_SAFE(coh_pick_result_release, NULL)
NULL_SAFE(coh_reservation_destroy, NULL)
NULL_SAFE(coh_mesh_destroy, NULL)
NULL_SAFE(coh_par_trainer_destroy, NULL)
NULL_SAFE(coh_metrics_release, NULL)
NULL_SAFE(coh_trace_release, NULL)
NULL_SAFE(coh_gpt_destroy, NULL)
NULL_SAFE(coh_adamw_destroy, NULL)
NULL_SAFE(coh_trainer_destroy, NULL)
NULL_SAFE(coh_dp_destroy, NULL)

int main(void)
{
    RUN(test_coh_st_close);
    RUN(test_coh_comm_destroy);
    RUN(test_coh_comm_free);
    RUN(test_coh_tokens_release);
    RUN(test_coh_tokenizer_destroy);
    RUN(test_coh_loader_destroy);
    RUN(test_coh_inventory_destroy);
    RUN(test_coh_visible_release);
    RUN(test_coh_selection_release);
    RUN(test_coh_pick_result_release);
    RUN(test_coh_reservation_destroy);
    RUN(test_coh_mesh_destroy);
    RUN(test_coh_par_trainer_destroy);
    RUN(test_coh_metrics_release);
    RUN(test_coh_trace_release);
    RUN(test_coh_gpt_destroy);
    RUN(test_coh_adamw_destroy);
    RUN(test_coh_trainer_destroy);
    RUN(test_coh_dp_destroy);
    return CHECK_REPORT();
}
