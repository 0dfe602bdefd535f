/* fuzz_hpu_modules.c: libFuzzer target for HABANA_VISIBLE_MODULES values: the first input byte
 * picks which module ids exist (bit i: id i, as on a VM given some of a server's modules),
 * the rest is the value. A value parses to distinct ids of this machine, in the order
 * written, and writing them back with commas gives the value again; otherwise the error
 * names the variable and the value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/device.h"

/* text without leading zeros in its entries ("01,007" -> "1,7"): the one spelling of an id
 * that does not round-trip. */
static const char *canonical(const char *text, char *buf, size_t cap)
{
    size_t k = 0;
    for (const char *p = text; *p && k + 1 < cap; p++) {
        int entry_start = p == text || p[-1] == ',';
        while (entry_start && *p == '0' && p[1] >= '0' && p[1] <= '9')
            p++;
        buf[k++] = *p;
    }
    buf[k] = '\0';
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512], prefix[600], back[600];
    if (size < 1 || size > sizeof text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    int ids[8], nids = 0;
    for (int i = 0; i < 8; i++)
        if (data[0] >> i & 1)
            ids[nids++] = i;
    int out[8], n = -1;
    if (coh_hpu_modules_parse(text, ids, nids, out, 8, &n) != COH_OK) {
        snprintf(prefix, sizeof prefix, "invalid HABANA_VISIBLE_MODULES='%s'", text);
        if (strncmp(coh_last_error(), prefix, strlen(prefix)) != 0)
            abort();
        return 0;
    }
    if (n < 1 || n > nids)
        abort();
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        int known = 0;
        for (int k = 0; k < nids; k++)
            known |= ids[k] == out[i];
        for (int j = 0; j < i; j++)
            if (out[j] == out[i])
                abort();
        if (!known)
            abort();
        len += (size_t)snprintf(back + len, sizeof back - len, "%s%d", i ? "," : "", out[i]);
    }
    if (strcmp(back, canonical(text, prefix, sizeof prefix)) != 0)
        abort();
    return 0;
}
