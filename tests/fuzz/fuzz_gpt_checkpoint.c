/* fuzz_gpt_checkpoint.c: libFuzzer target for reading a GPT checkpoint: the config from its
 * metadata or tensor shapes, then every tensor into a model; bad files fail cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/ckpt/gpt_ckpt_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_st_file *f;
    if (coh_st_open_memory(data, size, "fuzz.safetensors", &f) != COH_OK)
        return 0;
    coh_gpt_config c;
    char tok[16];
    if (gpt_config_from_file(f, "fuzz.safetensors", 0, &c, tok, sizeof tok) == COH_OK) {
        if (c.layers < 1 || c.dim % c.heads || memchr(tok, 0, sizeof tok) == NULL)
            abort(); /* an accepted config must be valid and the name terminated */
        coh_gpt *g;
        if (coh_gpt_param_count(&c) < (1u << 18) && c.seq <= 64 &&
            coh_gpt_create(&c, 1, 1, &g) == COH_OK) {
            gpt_load_from_file(g, f, "fuzz.safetensors");
            coh_gpt_destroy(g);
        }
    }
    coh_st_close(f);
    return 0;
}
