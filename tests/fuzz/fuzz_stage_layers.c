/* fuzz_stage_layers.c: libFuzzer target for the --stage-layers parser: any text either fails
 * cleanly or yields contiguous stages covering every block once, each holding a block but the
 * first ("embeddings") and the last ("head"). */
#include <stdlib.h>
#include <string.h>

#include "cohort/pipeline.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 2 || size > 512)
        return 0;
    int layers = 1 + data[0] % 64, parts = 1 + data[1] % 16, bounds[17];
    char text[512];
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    if (coh_pipe_parse_layers(text, layers, parts, bounds) != COH_OK) {
        coh_err_clear();
        return 0;
    }
    if (bounds[0] != 0 || bounds[parts] != layers)
        abort();
    for (int i = 0; i < parts; i++)
        if (bounds[i + 1] < bounds[i] || (bounds[i + 1] == bounds[i] && i > 0 && i < parts - 1))
            abort(); /* in order, every stage in between holding at least one block */
    return 0;
}
