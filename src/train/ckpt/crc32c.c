/* crc32c.c: CRC-32C (slice-by-8 tables), and the canonical items a checkpoint checksum covers. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "train/ckpt/ckpt_int.h"

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (uint32_t i = 0; i < 256; i++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&table_once, make_table);
    const unsigned char *p = data;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
              table[4][lo >> 24] ^ table[3][p[4]] ^ table[2][p[5]] ^ table[1][p[6]] ^
              table[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

static uint32_t sum_u64(uint32_t crc, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return crc32c(crc, b, 8);
}

uint32_t st_sum_tensor(uint32_t crc, const char *name, coh_st_dtype dtype, int ndim,
                       const int64_t *shape, uint64_t begin, uint64_t end)
{
    crc = crc32c(crc, name, strlen(name) + 1);
    const char *d = coh_st_dtype_name(dtype);
    crc = crc32c(crc, d, strlen(d) + 1);
    crc = sum_u64(crc, (uint64_t)ndim);
    for (int i = 0; i < ndim; i++)
        crc = sum_u64(crc, (uint64_t)shape[i]);
    crc = sum_u64(crc, begin);
    return sum_u64(crc, end);
}

uint32_t st_sum_meta(uint32_t crc, const char *key, const char *value)
{
    crc = crc32c(crc, key, strlen(key) + 1);
    return crc32c(crc, value, strlen(value) + 1);
}

void st_format_checksum(uint32_t crc, char *buf)
{
    snprintf(buf, 16, "crc32c:%08x", crc);
}
