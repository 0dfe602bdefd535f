/* fuzz_stage_layers.c: libFuzzer target for the --stage-layers parser: any text either fails
 * cleanly or yields contiguous stages covering every block and then every head shard once, in
 * order, each holding a block or a shard but the first ("embeddings"); the block bounds of
 * coh_pipe_parse_layers are the same capped at the blocks. */
#include <stdlib.h>
#include <string.h>

#include "cohort/pipeline.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 2 || size > 512)
        return 0;
    int layers = 1 + data[0] % 64, parts = 1 + data[1] % 16, bounds[17], blocks[17], shards = 0;
    char text[512];
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    if (coh_pipe_parse_split(text, layers, parts, bounds, &shards) != COH_OK) {
        coh_err_clear();
        if (coh_pipe_parse_layers(text, layers, parts, blocks) == COH_OK)
            abort(); /* the two parsers agree on what is valid */
        coh_err_clear();
        return 0;
    }
    if (shards < 1 || shards > COH_PIPE_MAX_HEAD_SHARDS || bounds[0] != 0 ||
        bounds[parts] != layers + shards)
        abort();
    for (int i = 0; i < parts; i++)
        if (bounds[i + 1] < bounds[i] || (bounds[i + 1] == bounds[i] && i > 0))
            abort(); /* in order, every stage after the first holding a block or a shard */
    if (coh_pipe_parse_layers(text, layers, parts, blocks) != COH_OK)
        abort();
    for (int i = 0; i <= parts; i++)
        if (blocks[i] != (bounds[i] < layers ? bounds[i] : layers))
            abort();
    return 0;
}
