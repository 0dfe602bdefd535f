/* fuzz_ckpt_state.c: libFuzzer target for a checkpoint's state file (coh_state_open's reading:
 * step, RNG words, loader position, and the trainer's threads, micro_batch, grad_accum and seq
 * that resume checks). First byte 0: the rest is a whole file, as read from disk (its checksum
 * mostly refuses it). Else the rest is one metadata value per line, in the order of KEYS (a
 * line "-" leaves the key out), which the target writes into a file with a valid checksum, so
 * that every value reaches the state's parser. Parse or fail with a message naming the file;
 * what parses holds the values written, and the trainer's keys are whole numbers in range. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/checkpoint.h"
#include "train/ckpt/ckpt_int.h"

static const char *const KEYS[] = {"cohort.format", "cohort.version", "cohort.step",
                                   "cohort.rng", "cohort.data.epoch", "cohort.data.step",
                                   "cohort.data.seed", "cohort.data.windows",
                                   "cohort.data.global_rows", "threads", "micro_batch",
                                   "grad_accum", "seq"};
enum { NKEYS = sizeof KEYS / sizeof *KEYS, FIRST_TRAINER_KEY = 9 };

static void parse(const void *file, size_t size)
{
    coh_st_file *f;
    coh_train_state s;
    if (coh_st_open_memory(file, size, "fuzz.state", &f) != COH_OK)
        return;
    coh_err_clear();
    if (ckpt_state_parse(f, "fuzz.state", &s) != COH_OK) {
        if (!strstr(coh_last_error(), "fuzz.state"))
            abort(); /* every refusal names the file */
    } else {
        for (int i = FIRST_TRAINER_KEY; i < NKEYS; i++) {
            const char *v = coh_st_meta_get(f, KEYS[i]);
            if (!v)
                continue;
            /* resume reads it with atol: digits only, 1..INT_MAX (threads from 0) */
            long x = atol(v);
            if (!*v || strspn(v, "0123456789") != strlen(v) ||
                x < (i == FIRST_TRAINER_KEY ? 0 : 1) || x > INT_MAX)
                abort();
        }
    }
    coh_st_close(f);
}

/* `text` as a JSON string body into out (cap bytes); 0 when it does not fit. */
static size_t json_escape(const char *text, char *out, size_t cap)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        char tmp[8];
        if (*p == '"' || *p == '\\')
            snprintf(tmp, sizeof tmp, "\\%c", *p);
        else if (*p < 0x20)
            snprintf(tmp, sizeof tmp, "\\u%04x", *p);
        else
            snprintf(tmp, sizeof tmp, "%c", *p);
        size_t k = strlen(tmp);
        if (n + k >= cap)
            return 0;
        memcpy(out + n, tmp, k);
        n += k;
    }
    out[n] = '\0';
    return 1;
}

/* A file whose metadata is the lines of `text`, with the checksum the reader verifies. */
static void from_values(char *text)
{
    static char header[16384], value[4096];
    const char *vals[NKEYS];
    char *line = text;
    for (int i = 0; i < NKEYS; i++) {
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        vals[i] = line && strcmp(line, "-") ? line : NULL;
        line = nl ? nl + 1 : NULL;
    }
    uint32_t crc = 0;
    size_t n = 8 + (size_t)snprintf(header + 8, sizeof header - 8, "{\"__metadata__\":{");
    for (int i = 0; i < NKEYS; i++) {
        if (!vals[i])
            continue;
        if (!json_escape(vals[i], value, sizeof value) || n + strlen(value) + 64 >= sizeof header)
            return;
        n += (size_t)snprintf(header + n, sizeof header - n, "\"%s\":\"%s\",", KEYS[i], value);
        crc = st_sum_meta(crc, KEYS[i], vals[i]);
    }
    char sum[16];
    st_format_checksum(crc32c(crc, "", 0), sum);
    n += (size_t)snprintf(header + n, sizeof header - n, "\"%s\":\"%s\"}}", COH_ST_CHECKSUM_KEY,
                          sum);
    uint64_t hlen = n - 8;
    for (int i = 0; i < 8; i++)
        header[i] = (char)(hlen >> (8 * i));
    parse(header, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 8192)
        return 0;
    if (data[0] == 0) {
        parse(data + 1, size - 1);
        return 0;
    }
    if (memchr(data + 1, 0, size - 1))
        return 0;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    from_values(text);
    free(text);
    return 0;
}
