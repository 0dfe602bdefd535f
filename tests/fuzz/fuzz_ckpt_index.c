/* fuzz_ckpt_index.c: libFuzzer target for what names a checkpoint's committed files: the weights
 * file's "state_suffix" (which state file the commit names) and the cleanup's reading of
 * directory entries. First byte 0: a file name (after the checkpoint's base name); else a
 * safetensors header of a weights file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/checkpoint.h"
#include "train/ckpt/commit.h"
#include "train/ckpt/gpt_ckpt_int.h"

/* The commit's state file: "<path>.state" or "<path>.state<digits>", nothing else (no folder). */
static void state_of(const uint8_t *data, size_t size)
{
    coh_st_file *f;
    char sp[256];
    if (coh_st_open_memory(data, size, "fuzz.ck", &f) != COH_OK)
        return;
    if (gpt_state_path_of(f, "dir/ck", sp, sizeof sp) == COH_OK &&
        (strncmp(sp, "dir/ck.state", 12) || strspn(sp + 12, "0123456789") != strlen(sp + 12)))
        abort();
    coh_st_close(f);
}

/* The files of the committed step are never removed; whatever is removed is the checkpoint's. */
static void entry(const uint8_t *data, size_t size)
{
    char name[64], mine[64];
    if (size >= sizeof name)
        return;
    memcpy(name, data, size);
    name[size] = '\0';
    const long keep = 12;
    int other = ckpt_other_file(name, keep);
    const char *kept[] = {".state%ld", ".zero%ld.index", ".zero%ld-0-of-2", ".zero%ld-1-of-2",
                          ".shard%ld-0-of-2", ".shard%ld-1-of-2"};
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
        snprintf(mine, sizeof mine, kept[i], keep);
        if (!strcmp(name, mine) && other)
            abort();
    }
    if (other && strncmp(name, ".state", 6) && strncmp(name, ".zero", 5) &&
        strncmp(name, ".shard", 6) && strncmp(name, ".tmp.", 5))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] == 0)
        entry(data + 1, size - 1);
    else
        state_of(data + 1, size - 1);
    return 0;
}
