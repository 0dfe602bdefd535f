/* fuzz_device_spec.c: libFuzzer target for --devices and --accelerator values: parse or fail
 * with a message naming the text; what resolves selects valid, distinct indices. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[256];
    if (size >= sizeof text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    coh_accel a;
    if (coh_accel_parse(text, &a) != COH_OK && !strstr(coh_last_error(), "invalid accelerator"))
        abort();
    coh_device_spec ds;
    if (coh_device_spec_parse(text, &ds) != COH_OK) {
        if (!strstr(coh_last_error(), "invalid device spec '"))
            abort();
        return 0;
    }
    for (int avail = 0; avail <= 8; avail++) {
        int out[64], n;
        if (coh_device_spec_resolve(&ds, text, COH_ACCEL_CUDA, avail, out, 64, &n) == COH_OK) {
            if (n < 1 || n > avail)
                abort();
            for (int i = 0; i < n; i++) {
                if (out[i] < 0 || out[i] >= avail)
                    abort();
                for (int j = 0; j < i; j++)
                    if (out[i] == out[j])
                        abort();
            }
        } else if (!strstr(coh_last_error(), avail ? "invalid device spec '"
                                                     : "no cuda device is visible")) {
            abort();
        }
        if (coh_device_spec_resolve(&ds, text, COH_ACCEL_CPU, avail, NULL, 0, &n) == COH_OK &&
            n < 1)
            abort();
    }
    return 0;
}
