/* fuzz_cgroup_cpu.c: libFuzzer target for the cgroup files the default thread count reads
 * (cpu.max, cpuset.cpus.effective): parse or fail cleanly, and what parses is in range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/threads.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[256];
    if (size >= sizeof text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    double q = coh_parse_cpu_max(text);
    if (!(q == -1 || q >= 0))
        abort();
    int n = coh_parse_cpu_list(text);
    if (n == 0 || n < -1 || n > 1 << 20)
        abort();
    coh_cpu_budget b = {.mask_cpus = n, .node_cpus = n + (int)(size % 3), .quota_cpus = q,
                        .local_ranks = (int)(size % 5), .launcher = "fuzz"};
    char why[64];
    if (coh_threads_for_budget(&b, why, sizeof why) < 1)
        abort();
    return 0;
}
