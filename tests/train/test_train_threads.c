/* test_train_threads.c: the default thread count from a cpu budget (affinity mask, node cpus,
 * cgroup quota, launcher's local ranks), the cgroup files' parsers, and how MFU is shown. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "cohort/train.h"
#include "train/threads.h"

static int threads(int mask, int node, double quota, int local, char *why, size_t cap)
{
    coh_cpu_budget b = {.mask_cpus = mask, .node_cpus = node, .quota_cpus = quota,
                        .local_ranks = local, .launcher = "openmpi"};
    return coh_threads_for_budget(&b, why, cap);
}

static void test_budget(void)
{
    char why[256];
    CHECK_INT(threads(2, 2, 0, 0, why, sizeof why), 2); /* plain: every cpu */
    CHECK(strstr(why, "2 cpus in the affinity mask") != NULL);
    CHECK_INT(threads(1, 2, 0, 0, why, sizeof why), 1); /* taskset -c 0 */
    CHECK(strstr(why, "1 cpu in the affinity mask") != NULL);
    /* 2 local ranks on the same 2 cpus: one each */
    CHECK_INT(threads(2, 2, 0, 2, why, sizeof why), 1);
    CHECK(strstr(why, "shared by 2 local ranks (openmpi)") != NULL);
    CHECK_INT(threads(16, 16, 0, 4, NULL, 0), 4);
    CHECK_INT(threads(16, 16, 0, 3, NULL, 0), 5);
    /* more local ranks than cpus: never below 1 */
    CHECK_INT(threads(2, 2, 0, 8, NULL, 0), 1);
    /* bound by the launcher (a mask narrower than the node): the rank's own cpus */
    CHECK_INT(threads(4, 16, 0, 4, why, sizeof why), 4);
    CHECK(strstr(why, "each bound to its own cpus") != NULL);
    CHECK_INT(threads(1, 2, 0, 2, NULL, 0), 1);
    /* a cgroup quota caps at its whole cpus, at least 1 */
    CHECK_INT(threads(8, 8, 2.5, 0, why, sizeof why), 2);
    CHECK(strstr(why, "cgroup cpu.max quota 2.50 cpus") != NULL);
    CHECK_INT(threads(8, 8, 0.5, 0, NULL, 0), 1);
    CHECK_INT(threads(2, 2, 4, 0, NULL, 0), 2); /* a quota above the mask changes nothing */
    CHECK_INT(threads(8, 8, 4, 2, NULL, 0), 2); /* quota, then shared */
    /* nothing known: 1 */
    CHECK_INT(threads(0, 0, 0, 0, NULL, 0), 1);
    CHECK_INT(threads(0, 6, 0, 0, NULL, 0), 6);
    /* a small buffer is cut, not overrun */
    char tiny[8];
    CHECK_INT(threads(2, 2, 1, 2, tiny, sizeof tiny), 1);
    CHECK_INT((int)strlen(tiny), 7);
}

static void test_parsers(void)
{
    CHECK_NEAR(coh_parse_cpu_max("150000 100000\n"), 1.5, 1e-12);
    CHECK_NEAR(coh_parse_cpu_max("200000 100000"), 2.0, 1e-12);
    CHECK(coh_parse_cpu_max("max 100000\n") == 0);
    CHECK(coh_parse_cpu_max("") < 0);
    CHECK(coh_parse_cpu_max("max") < 0);
    CHECK(coh_parse_cpu_max("100 0") < 0);
    CHECK(coh_parse_cpu_max("-5 100000") < 0);
    CHECK(coh_parse_cpu_max("12x 100000") < 0);
    CHECK(coh_parse_cpu_max("1 2 3") < 0);
    CHECK_INT(coh_parse_cpu_list("0-3,8,10-11\n"), 7);
    CHECK_INT(coh_parse_cpu_list("0"), 1);
    CHECK_INT(coh_parse_cpu_list("0-1"), 2);
    CHECK_INT(coh_parse_cpu_list(""), -1);
    CHECK_INT(coh_parse_cpu_list("3-1"), -1);
    CHECK_INT(coh_parse_cpu_list("a"), -1);
    CHECK_INT(coh_parse_cpu_list("1,,2"), -1);
    CHECK_INT(coh_parse_cpu_list("-1"), -1);
    CHECK_INT(coh_parse_cpu_list("0-99999999"), -1);
}

static void test_mfu_text(void)
{
    char b[16];
    CHECK_INT(coh_mfu_text(0.613, b, sizeof b), 1);
    CHECK_STR(b, "61.3%");
    CHECK_INT(coh_mfu_text(1.0, b, sizeof b), 1);
    CHECK_STR(b, "100.0%");
    /* achieved above the peak probe (1.73 = 173%): not shown as if true */
    CHECK_INT(coh_mfu_text(1.73, b, sizeof b), 0);
    CHECK_STR(b, "n/a");
    CHECK_INT(coh_mfu_text(NAN, b, sizeof b), 0);
    CHECK_INT(coh_mfu_text(INFINITY, b, sizeof b), 0);
    CHECK_INT(coh_mfu_text(-0.1, b, sizeof b), 0);
}

int main(void)
{
    RUN(test_budget);
    RUN(test_parsers);
    RUN(test_mfu_text);
    return CHECK_REPORT();
}
