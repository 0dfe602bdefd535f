/* cgroup.c: parsers of the Linux CPU files (cpu.max, cpu lists), shared by the inventory and the
 * trainer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/cgroup.h"

double coh_parse_cpu_max(const char *text)
{
    char quota[32];
    long long period;
    char extra;
    if (!text || sscanf(text, "%31s %lld %c", quota, &period, &extra) != 2 || period <= 0)
        return -1;
    if (!strcmp(quota, "max"))
        return 0;
    char *end;
    long long q = strtoll(quota, &end, 10);
    if (*end || q <= 0)
        return -1;
    return (double)q / (double)period;
}

int coh_parse_cpu_list(const char *text)
{
    if (!text)
        return -1;
    long count = 0;
    const char *p = text;
    while (*p && *p != '\n') {
        char *end;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p || lo < 0 || *p == '-' || *p == '+')
            return -1;
        if (*end == '-') {
            p = end + 1;
            hi = strtol(p, &end, 10);
            if (end == p || *p == '-' || *p == '+' || hi < lo)
                return -1;
        }
        if (hi - lo >= 1 << 20 || (count += hi - lo + 1) > 1 << 20)
            return -1;
        p = end;
        if (*p == ',')
            p++;
        else if (*p && *p != '\n')
            return -1;
    }
    return count > 0 ? (int)count : -1;
}
