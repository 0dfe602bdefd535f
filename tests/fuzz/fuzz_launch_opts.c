/* fuzz_launch_opts.c: libFuzzer target for what users and launchers hand to cohort run: ranks
 * filters, prefix templates, cpulists, and worker environments (coh_launch_env_read_from).
 * The first byte picks the parser; the rest is its input. Accepted input must be consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/launch.h"
#include "launch/launch_int.h"

static void env_case(char *text)
{
    const char *vars[64];
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < 63; line = strtok(NULL, "\n"))
        vars[n++] = line;
    vars[n] = NULL;
    coh_launch_env e;
    if (coh_launch_env_read_from(vars, &e) != COH_OK)
        return;
    if (e.rank < 0 || e.rank >= e.world_size || e.local_rank < 0 ||
        e.local_rank >= e.local_world_size || e.local_world_size > e.world_size ||
        (e.nnodes >= 1 && (e.node_rank < 0 || e.node_rank >= e.nnodes)))
        abort();
    if (!memchr(e.job_id, '\0', sizeof e.job_id))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    switch (data[0] % 4) {
    case 0: {
        unsigned char mask[8];
        if (coh_launch_parse_ranks(text, 8, mask) == COH_OK) {
            int any = 0;
            for (int i = 0; i < 8; i++)
                any |= mask[i];
            if (!any)
                abort(); /* an accepted filter names at least one rank */
        }
        break;
    }
    case 1:
        if (coh_launch_check_prefix(text) == COH_OK) {
            char buf[64];
            launch_render_prefix(text, buf, sizeof buf, 12, 3, 1, "role", "host", 4242, 2, "stderr");
            if (strlen(buf) >= sizeof buf)
                abort();
        }
        break;
    case 2: {
        int cpus[64];
        int n = launch_parse_cpulist(text, cpus, 64);
        for (int i = 0; i < n; i++)
            if (cpus[i] < 0 || cpus[i] > 65535)
                abort();
        break;
    }
    default:
        env_case(text);
    }
    free(text);
    return 0;
}
