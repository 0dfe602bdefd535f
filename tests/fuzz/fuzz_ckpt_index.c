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

/* The commit's state file: "<path>.state", "<path>.state<digits>" or "<path>.state<digits>.1",
 * nothing else (no folder). */
static void state_of(const uint8_t *data, size_t size)
{
    coh_st_file *f;
    char sp[256];
    if (coh_st_open_memory(data, size, "fuzz.ck", &f) != COH_OK)
        return;
    if (gpt_state_path_of(f, "dir/ck", sp, sizeof sp) == COH_OK) {
        size_t d = strspn(sp + 12, "0123456789");
        const char *rest = sp + 12 + d;
        if (strncmp(sp, "dir/ck.state", 12) || (*rest && (!d || strcmp(rest, ".1"))))
            abort();
    }
    coh_st_close(f);
}

/* The files of the committed save (step 12, either set of names) are never removed, the other
 * set of that step always is; whatever is removed is the checkpoint's. */
static void entry(const uint8_t *data, size_t size)
{
    char name[64], mine[64];
    if (size >= sizeof name)
        return;
    memcpy(name, data, size);
    name[size] = '\0';
    const char *kept[] = {".state%ld%s", ".zero%ld%s.index", ".zero%ld%s-0-of-2",
                          ".zero%ld%s-1-of-2", ".shard%ld%s-0-of-2", ".shard%ld%s-1-of-2"};
    int other = 0;
    for (int gen = 0; gen < 2; gen++) {
        const ckpt_tag keep = {12, gen};
        int o = ckpt_other_file(name, &keep);
        other |= o;
        for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) {
            snprintf(mine, sizeof mine, kept[i], keep.step, gen ? ".1" : "");
            if (!strcmp(name, mine) && o)
                abort(); /* the committed save's own file */
            snprintf(mine, sizeof mine, kept[i], keep.step, gen ? "" : ".1");
            if (!strcmp(name, mine) && !o && strncmp(mine, ".zero", 5))
                abort(); /* the other set of the committed step (the older ZeRO layout had one) */
        }
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
