/* shard.c: llm.c token shards: header validation and atomic writing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/data.h"
#include "train/ckpt/atomic_file.h"

static int32_t le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

coh_status coh_shard_check(const void *data, size_t size, const char *name, uint64_t *ntokens)
{
    const unsigned char *p = data;
    *ntokens = 0;
    if (size < COH_SHARD_HEADER_BYTES)
        return coh_errf(COH_ERR_INVALID,
                        "'%s': truncated token shard: %zu bytes, shorter than the %d-byte header",
                        name, size, COH_SHARD_HEADER_BYTES);
    int32_t magic = le32(p), version = le32(p + 4), count = le32(p + 8);
    if (magic != COH_SHARD_MAGIC)
        return coh_errf(COH_ERR_INVALID,
                        "'%s': bad magic %ld: not a token shard (expected %d, llm.c's .bin format)",
                        name, (long)magic, COH_SHARD_MAGIC);
    if (version != COH_SHARD_VERSION)
        return coh_errf(COH_ERR_INVALID,
                        "'%s': unsupported shard version %ld (supported: %d, uint16 tokens)", name,
                        (long)version, COH_SHARD_VERSION);
    if (count < 0)
        return coh_errf(COH_ERR_INVALID, "'%s': negative token count %ld in the header", name,
                        (long)count);
    uint64_t want = COH_SHARD_HEADER_BYTES + 2 * (uint64_t)count;
    if (size < want)
        return coh_errf(COH_ERR_INVALID,
                        "'%s': truncated token shard: the header says %ld tokens (%llu bytes) but "
                        "the file has %zu bytes", name, (long)count, (unsigned long long)want, size);
    if (size > want)
        return coh_errf(COH_ERR_INVALID,
                        "'%s': %llu trailing bytes after the %ld tokens the header announces",
                        name, (unsigned long long)(size - want), (long)count);
    *ntokens = (uint64_t)count;
    return COH_OK;
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

coh_status coh_shard_write(const char *path, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] > 65535)
            return coh_errf(COH_ERR_INVALID,
                            "token id '%ld' at position %zu does not fit the shard format's "
                            "uint16 (valid: 0..65535)", (long)ids[i], i);
    if (n > INT32_MAX)
        return coh_errf(COH_ERR_INVALID,
                        "a shard holds at most %d tokens (the header count is int32), not %zu",
                        INT32_MAX, n);
    unsigned char header[COH_SHARD_HEADER_BYTES] = {0};
    put32(header, COH_SHARD_MAGIC);
    put32(header + 4, COH_SHARD_VERSION);
    put32(header + 8, (uint32_t)n);
    atomic_file f;
    coh_status st = atomic_file_open(&f, path);
    if (st != COH_OK)
        return st;
    st = atomic_file_write(&f, header, sizeof header);
    unsigned char buf[8192];
    for (size_t i = 0; st == COH_OK && i < n;) {
        size_t k = 0;
        for (; k < sizeof buf / 2 && i < n; k++, i++) {
            buf[2 * k] = (unsigned char)ids[i];
            buf[2 * k + 1] = (unsigned char)(ids[i] >> 8);
        }
        st = atomic_file_write(&f, buf, 2 * k);
    }
    if (st != COH_OK) {
        atomic_file_abort(&f);
        return st;
    }
    return atomic_file_commit(&f);
}
