/* test_data_safetensors.c: safetensors round trip, layout, strict validation of malformed and
 * corrupt files, atomic save under injected failures and a crash, and the training-state file. */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "test_files.h"
#include "cohort/checkpoint.h"
#include "train/ckpt/atomic_file.h"

static char dir[256];

static const char *path_in(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

/* Tensors of several types: a (2,3) F32, a scalar I64, an empty F32, U8, BF16, F16, I32. */
static float f32[6] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-8f, -7.75f};
static int64_t i64 = -1234567890123ll;
static uint8_t u8[5] = {0, 1, 127, 128, 255};
static uint16_t bf16[3] = {0x3FC0, 0xC020, 0x0000};   /* 1.5, -2.5, 0 */
static uint16_t f16[4] = {0x3E00, 0xC100, 0x0001, 0x7BFF}; /* 1.5, -2.5, 2^-24, 65504 */
static int32_t i32[4] = {-1, 0, 1, 2147483647};

static size_t sample(coh_st_tensor *t)
{
    memset(t, 0, 7 * sizeof *t);
    t[0] = (coh_st_tensor){.name = "transformer.wte.weight", .dtype = COH_ST_F32, .ndim = 2,
                           .shape = {2, 3}, .data = f32};
    t[1] = (coh_st_tensor){.name = "step", .dtype = COH_ST_I64, .ndim = 0, .data = &i64};
    t[2] = (coh_st_tensor){.name = "empty", .dtype = COH_ST_F32, .ndim = 2, .shape = {0, 4}};
    t[3] = (coh_st_tensor){.name = "bytes \"quoted\"", .dtype = COH_ST_U8, .ndim = 1,
                           .shape = {5}, .data = u8};
    t[4] = (coh_st_tensor){.name = "bf", .dtype = COH_ST_BF16, .ndim = 1, .shape = {3},
                           .data = bf16};
    t[5] = (coh_st_tensor){.name = "half", .dtype = COH_ST_F16, .ndim = 2, .shape = {2, 2},
                           .data = f16};
    t[6] = (coh_st_tensor){.name = "ints", .dtype = COH_ST_I32, .ndim = 1, .shape = {4},
                           .data = i32};
    return 7;
}

static void test_round_trip(void)
{
    coh_st_tensor t[7];
    size_t n = sample(t);
    coh_st_meta meta[] = {{"format", "pt"}, {"note", "a \"quoted\"\nvalue"}};
    const char *p = path_in("rt.safetensors");
    CHECK_OK(coh_st_save(p, t, n, meta, 2));
    coh_st_file *f = NULL;
    CHECK_OK(coh_st_open(p, &f));
    if (!f)
        return;
    CHECK_INT(coh_st_count(f), 7);
    CHECK(coh_st_has_checksum(f));
    CHECK_STR(coh_st_meta_get(f, "format"), "pt");
    CHECK_STR(coh_st_meta_get(f, "note"), "a \"quoted\"\nvalue");
    for (size_t i = 0; i < n; i++) {
        const coh_st_tensor *g = coh_st_at(f, i);
        CHECK_STR(g->name, t[i].name);
        CHECK_INT(g->dtype, t[i].dtype);
        CHECK_INT(g->ndim, t[i].ndim);
        CHECK(coh_st_find(f, t[i].name) == g);
        if (g->nbytes)
            CHECK(memcmp(g->data, t[i].data, g->nbytes) == 0);
    }
    float back[6];
    CHECK_OK(coh_st_read(f, "transformer.wte.weight", COH_ST_F32, 2, (int64_t[]){2, 3}, back));
    CHECK(memcmp(back, f32, sizeof f32) == 0);
    int64_t s = 0;
    CHECK_OK(coh_st_read(f, "step", COH_ST_I64, 0, NULL, &s));
    CHECK_INT(s, i64);
    float wide[4];
    CHECK_OK(coh_st_read(f, "bf", COH_ST_F32, 1, (int64_t[]){3}, wide));
    CHECK(wide[0] == 1.5f && wide[1] == -2.5f && wide[2] == 0.0f);
    CHECK_OK(coh_st_read(f, "half", COH_ST_F32, 2, (int64_t[]){2, 2}, wide));
    CHECK(wide[0] == 1.5f && wide[1] == -2.5f && wide[2] == 0x1p-24f && wide[3] == 65504.0f);
    CHECK_FAILS(coh_st_read(f, "transformer.wte.weight", COH_ST_F32, 2, (int64_t[]){3, 2},
                            back), COH_ERR_MISMATCH, "has shape [2, 3], expected [3, 2]");
    CHECK_FAILS(coh_st_read(f, "ints", COH_ST_I64, 1, (int64_t[]){4}, back), COH_ERR_MISMATCH,
                "is I32, expected I64");
    CHECK_FAILS(coh_st_read(f, "nope", COH_ST_F32, 0, NULL, back), COH_ERR_NOT_FOUND,
                "no tensor 'nope'");
    coh_st_close(f);

    /* Layout: 8-byte length, header padded with spaces to an 8-byte boundary, no temp left. */
    size_t len;
    unsigned char *raw = (unsigned char *)test_slurp(p, &len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | raw[i];
    CHECK_INT((8 + hlen) % 8, 0);
    CHECK(raw[8] == '{');
    CHECK(raw[8 + hlen - 1] == '}' || raw[8 + hlen - 1] == ' ');
    CHECK_INT(len - 8 - hlen, 24 + 8 + 5 + 6 + 8 + 16);
    free(raw);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);
}

static void test_writer_refuses(void)
{
    coh_st_tensor t[2] = {{.name = "a", .dtype = COH_ST_F32, .ndim = 1, .shape = {1},
                           .data = f32},
                          {.name = "a", .dtype = COH_ST_F32, .ndim = 1, .shape = {1},
                           .data = f32}};
    const char *p = path_in("refused.safetensors");
    CHECK_FAILS(coh_st_save(p, t, 2, NULL, 0), COH_ERR_INVALID, "duplicate tensor name 'a'");
    t[1].name = "b";
    t[1].ndim = 9;
    CHECK_FAILS(coh_st_save(p, t, 2, NULL, 0), COH_ERR_INVALID, "invalid rank '9'");
    t[1].ndim = 1;
    t[1].shape[0] = -3;
    CHECK_FAILS(coh_st_save(p, t, 2, NULL, 0), COH_ERR_INVALID, "negative dimension '-3'");
    coh_st_meta m = {COH_ST_CHECKSUM_KEY, "x"};
    t[1].shape[0] = 1;
    CHECK_FAILS(coh_st_save(p, t, 2, &m, 1), COH_ERR_INVALID, "invalid metadata key");
    CHECK(access(p, F_OK) != 0);
    CHECK_FAILS(coh_st_save("/nonexistent-dir/x.safetensors", t, 2, NULL, 0), COH_ERR_NOT_FOUND,
                "/nonexistent-dir/x.safetensors");
}

/* A file from a header text and `data_len` bytes of data, checked in memory. */
static coh_status open_crafted(const char *header, size_t data_len)
{
    size_t hl = strlen(header);
    unsigned char *buf = calloc(1, 8 + hl + data_len + 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    coh_st_file *f = NULL;
    coh_status st = coh_st_open_memory(buf, 8 + hl + data_len, "crafted.safetensors", &f);
    coh_st_close(f);
    free(buf);
    return st;
}

static void test_malformed(void)
{
    CHECK_OK(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8));
    CHECK_OK(open_crafted("{}", 0));
    CHECK_OK(open_crafted("{\"z\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]}}  ", 0));
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4),
                COH_ERR_INVALID, "tensor 'a': data_offsets [0, 8] out of range");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
                COH_ERR_INVALID, "tensor 'a': its dtype F32 and shape need 12 bytes but its data_offsets span 8");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                             "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12),
                COH_ERR_INVALID, "tensors 'a' and 'b' overlap");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
                COH_ERR_INVALID, "bytes 0..4 of the data belong to no tensor");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8),
                COH_ERR_INVALID, "4 bytes of data after the last tensor");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                COH_ERR_INVALID, "unsupported dtype 'Q4'");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
                COH_ERR_INVALID, "dimension 0 of 'shape' is not a non-negative integer");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), COH_ERR_INVALID,
                "tensor 'a': missing 'data_offsets'");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],"
                             "\"extra\":1}}", 4), COH_ERR_INVALID, "unknown field 'extra'");
    CHECK_FAILS(open_crafted("{\"__metadata__\":{\"k\":1}}", 0), COH_ERR_INVALID,
                "__metadata__ value of 'k' is not a string");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",", 0), COH_ERR_INVALID,
                "crafted.safetensors': bad header");
    CHECK_FAILS(open_crafted("[1,2]", 0), COH_ERR_INVALID, "the header is not a JSON object");
    CHECK_FAILS(open_crafted("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],"
                             "\"data_offsets\":[0,4]}}", 4), COH_ERR_INVALID, "too many elements");
    CHECK_FAILS(coh_st_open_memory("abc", 3, "tiny.safetensors", &(coh_st_file *){NULL}),
                COH_ERR_INVALID, "'tiny.safetensors': truncated safetensors file: 3 bytes");
    unsigned char big[16] = {0xFF, 0xFF, 0, 0, 0, 0, 0, 0, '{', '}'};
    CHECK_FAILS(coh_st_open_memory(big, 10, "long.safetensors", &(coh_st_file *){NULL}),
                COH_ERR_INVALID, "header length 65535 goes beyond the end of the file (10 bytes)");
}

static void test_corrupt_files(void)
{
    coh_st_tensor t[7];
    size_t n = sample(t);
    const char *p = path_in("good.safetensors"), *q = path_in("bad.safetensors");
    CHECK_OK(coh_st_save(p, t, n, NULL, 0));
    size_t len;
    unsigned char *raw = (unsigned char *)test_slurp(p, &len);
    /* Truncated by one byte, by half, to the header only. */
    spit(q, raw, len - 1);
    CHECK_FAILS(coh_st_open(q, &(coh_st_file *){NULL}), COH_ERR_INVALID, q);
    spit(q, raw, len / 2);
    CHECK_FAILS(coh_st_open(q, &(coh_st_file *){NULL}), COH_ERR_INVALID, "goes beyond the end");
    spit(q, raw, 4);
    CHECK_FAILS(coh_st_open(q, &(coh_st_file *){NULL}), COH_ERR_INVALID, "truncated");
    /* One flipped bit in the last data byte: only the checksum can tell. */
    raw[len - 1] ^= 0x10;
    spit(q, raw, len);
    CHECK_FAILS(coh_st_open(q, &(coh_st_file *){NULL}), COH_ERR_INVALID, "checksum mismatch");
    raw[len - 1] ^= 0x10;
    /* A changed shape digit that keeps the sizes consistent: 2x3 -> 3x2. */
    char *h = strstr((char *)raw + 8, "[2,3]");
    CHECK(h != NULL);
    if (h) {
        memcpy(h, "[3,2]", 5);
        spit(q, raw, len);
        CHECK_FAILS(coh_st_open(q, &(coh_st_file *){NULL}), COH_ERR_INVALID, "checksum mismatch");
    }
    free(raw);
    CHECK_FAILS(coh_st_open(path_in("missing.safetensors"), &(coh_st_file *){NULL}),
                COH_ERR_NOT_FOUND, "missing.safetensors");
}

static coh_status fail_hook(const char *tmp, const char *path)
{
    return coh_errf(COH_ERR_IO, "injected failure before renaming '%s'", tmp);
}

static coh_status crash_hook(const char *tmp, const char *path)
{
    raise(SIGKILL);
    return COH_OK;
}

static int holds_old_content(const char *p)
{
    coh_st_file *f = NULL;
    if (coh_st_open(p, &f) != COH_OK)
        return 0;
    float v[6];
    int ok = coh_st_read(f, "transformer.wte.weight", COH_ST_F32, 2, (int64_t[]){2, 3}, v) ==
                 COH_OK && memcmp(v, f32, sizeof v) == 0 && coh_st_count(f) == 7;
    coh_st_close(f);
    return ok;
}

static void test_atomic_save(void)
{
    coh_st_tensor t[7];
    size_t n = sample(t);
    const char *p = path_in("atomic.safetensors");
    CHECK_OK(coh_st_save(p, t, n, NULL, 0));
    float other[6] = {9, 9, 9, 9, 9, 9};
    coh_st_tensor u = {.name = "transformer.wte.weight", .dtype = COH_ST_F32, .ndim = 2,
                       .shape = {2, 3}, .data = other};

    /* An injected write failure: the save fails, the old file stays, no temporary is left. */
    atomic_file_before_rename = fail_hook;
    CHECK_FAILS(coh_st_save(p, &u, 1, NULL, 0), COH_ERR_IO, "injected failure");
    atomic_file_before_rename = NULL;
    CHECK(holds_old_content(p));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    CHECK(access(tmp, F_OK) != 0);

    /* A process killed after writing everything but before the rename. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        atomic_file_before_rename = crash_hook;
        coh_st_save(p, &u, 1, NULL, 0);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK(holds_old_content(p));
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)pid);
    CHECK(access(tmp, F_OK) == 0); /* the crash left its complete temporary behind */
    unlink(tmp);

    /* And a save that completes replaces the content. */
    CHECK_OK(coh_st_save(p, &u, 1, NULL, 0));
    CHECK(!holds_old_content(p));
}

static void test_state_file(void)
{
    coh_train_state s = {.step = 1234,
                         .rng = {1, 0xFFFFFFFFFFFFFFFFull, 0x0123456789ABCDEFull, 42},
                         .data = {.epoch = 3, .step = 17, .seed = 99, .windows = 5000,
                                  .global_rows = 16}};
    float m[6] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, v[6] = {1, 2, 3, 4, 5, 6};
    coh_st_tensor t[2] = {{.name = "adamw.m", .dtype = COH_ST_F32, .ndim = 1, .shape = {6},
                           .data = m},
                          {.name = "adamw.v", .dtype = COH_ST_F32, .ndim = 1, .shape = {6},
                           .data = v}};
    coh_st_meta extra = {"trainer.lr", "0.0006"};
    const char *p = path_in("state.safetensors");
    CHECK_OK(coh_state_save(p, &s, t, 2, &extra, 1));
    coh_train_state r;
    coh_st_file *f = NULL;
    CHECK_OK(coh_state_open(p, &r, &f));
    CHECK(memcmp(&r, &s, sizeof s) == 0);
    float back[6];
    if (f) {
        CHECK_OK(coh_st_read(f, "adamw.v", COH_ST_F32, 1, (int64_t[]){6}, back));
        CHECK(memcmp(back, v, sizeof v) == 0);
        CHECK_STR(coh_st_meta_get(f, "trainer.lr"), "0.0006");
    }
    coh_st_close(f);
    coh_st_meta reserved = {"cohort.step", "1"};
    CHECK_FAILS(coh_state_save(p, &s, t, 2, &reserved, 1), COH_ERR_INVALID, "is reserved");

    /* Corrupt metadata (step 1234 -> 1235) is caught by the checksum. */
    size_t len;
    unsigned char *raw = (unsigned char *)test_slurp(p, &len);
    char *d = strstr((char *)raw + 8, "\"1234\"");
    CHECK(d != NULL);
    if (d)
        d[4] = '5';
    const char *q = path_in("state-bad.safetensors");
    spit(q, raw, len);
    free(raw);
    CHECK_FAILS(coh_state_open(q, &r, &f), COH_ERR_INVALID, "checksum mismatch");

    /* A plain safetensors file is not a state file. */
    CHECK_OK(coh_st_save(q, t, 2, NULL, 0));
    CHECK_FAILS(coh_state_open(q, &r, &f), COH_ERR_INVALID, "not a cohort state file");
}

/* The trainer's own keys, which resume divides and multiplies by, are whole numbers in range:
 * a state saying micro_batch -1 or seq 99999999999999999999 is refused naming key and value. */
static void test_state_trainer_keys(void)
{
    coh_train_state s = {.step = 1, .data = {.windows = 64, .global_rows = 4}};
    float m[1] = {0};
    coh_st_tensor t = {.name = "adamw.m", .dtype = COH_ST_F32, .ndim = 1, .shape = {1}, .data = m};
    const char *p = path_in("state-keys.safetensors");
    coh_train_state r;
    coh_st_file *f = NULL;
    coh_st_meta good[4] = {{"threads", "0"}, {"micro_batch", "2"}, {"grad_accum", "2"},
                           {"seq", "64"}};
    CHECK_OK(coh_state_save(p, &s, &t, 1, good, 4));
    CHECK_OK(coh_state_open(p, &r, &f));
    coh_st_close(f);
    static const struct {
        const char *key, *value;
    } bad[] = {{"micro_batch", "-1"}, {"micro_batch", "0"}, {"grad_accum", "x"},
               {"seq", "99999999999999999999"}, {"seq", "2147483648"}, {"threads", "-4"},
               {"micro_batch", " 2"}, {"grad_accum", "+2"}, {"seq", ""}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        coh_st_meta one = {bad[i].key, bad[i].value};
        char want[96];
        snprintf(want, sizeof want, "invalid '%s' value '%s'", bad[i].key, bad[i].value);
        CHECK_OK(coh_state_save(p, &s, &t, 1, &one, 1));
        f = NULL;
        CHECK_FAILS(coh_state_open(p, &r, &f), COH_ERR_INVALID, want);
        CHECK(f == NULL);
        coh_st_close(f);
    }
}

int main(void)
{
    if (test_tmpdir(dir, sizeof dir, "st-test") != 0)
        return 1;
    RUN(test_round_trip);
    RUN(test_writer_refuses);
    RUN(test_malformed);
    RUN(test_corrupt_files);
    RUN(test_atomic_save);
    RUN(test_state_file);
    RUN(test_state_trainer_keys);
    test_rmtree(dir);
    return CHECK_REPORT();
}
