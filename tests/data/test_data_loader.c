/* test_data_loader.c: token shards and the batch loader: shard validation, window layout, the
 * seeded permutation, rank split (disjoint, and R ranks = one rank with batch R*B), exact resume,
 * eval mode, and a `cohort prepare` -> loader round trip. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "test_files.h"
#include "cohort/data.h"
#include "train/data/perm.h"

static char dir[256];

static const char *path_in(const char *name)
{
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* Token i of shard s: unique over the test data, so a window names where it came from. */
static int32_t token_at(int s, int i)
{
    return (s * 4096 + i) % 65536;
}

static void write_shard(const char *name, int s, int n)
{
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = token_at(s, i);
    CHECK_OK(coh_shard_write(path_in(name), ids, (size_t)n));
    free(ids);
}

static coh_loader *open_loader(const char **paths, size_t np, int B, int T, int rank, int world,
                               int shuffle, uint64_t seed)
{
    coh_loader_config c = {.paths = paths, .npaths = np, .batch = B, .seq = T, .rank = rank,
                           .world = world, .shuffle = shuffle, .seed = seed};
    coh_loader *l = NULL;
    CHECK_OK(coh_loader_create(&c, &l));
    return l;
}

static void test_perm_is_bijection(void)
{
    uint64_t sizes[] = {1, 2, 3, 5, 17, 1000, 4097, 65537};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uint64_t n = sizes[k];
        unsigned char *seen = calloc(n, 1);
        perm p;
        perm_init(&p, n, 7, k);
        uint64_t fixed = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t j = perm_apply(&p, i);
            CHECK(j < n);
            if (j < n)
                seen[j]++;
            fixed += j == i;
        }
        int all_once = 1;
        for (uint64_t i = 0; i < n; i++)
            all_once &= seen[i] == 1;
        CHECK(all_once);
        if (n >= 1000)
            CHECK(fixed < n / 50); /* a real shuffle, not the identity */
        free(seen);
    }
}

static void test_file_order_windows(void)
{
    /* Shards of 10, 7, 1 and 13 tokens with T = 3: 3 + 2 + 0 + 4 windows. */
    write_shard("a.bin", 0, 10);
    write_shard("b.bin", 1, 7);
    write_shard("c.bin", 2, 1);
    write_shard("d.bin", 3, 13);
    const char *paths[] = {path_in("a.bin"), path_in("b.bin"), path_in("c.bin"),
                           path_in("d.bin")};
    coh_loader *l = open_loader(paths, 4, 1, 3, 0, 1, 0, 0);
    if (!l)
        return;
    CHECK_INT(coh_loader_windows(l), 9);
    CHECK_INT(coh_loader_tokens(l), 31);
    CHECK_INT(coh_loader_steps_per_epoch(l), 9);
    int expect_shard[9] = {0, 0, 0, 1, 1, 3, 3, 3, 3}, expect_w[9] = {0, 1, 2, 0, 1, 0, 1, 2, 3};
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 9; k++) {
            int32_t in[3], tg[3];
            CHECK_OK(coh_loader_next(l, in, tg));
            for (int t = 0; t < 3; t++) {
                CHECK_INT(in[t], token_at(expect_shard[k], expect_w[k] * 3 + t));
                CHECK_INT(tg[t], token_at(expect_shard[k], expect_w[k] * 3 + t + 1));
            }
        }
    coh_loader_pos pos;
    coh_loader_position(l, &pos);
    CHECK_INT(pos.epoch, 1);
    CHECK_INT(pos.step, 9);
    coh_loader_destroy(l);

    /* A glob takes the files in sorted order: the same data set. */
    const char *glob[] = {path_in("?.bin")};
    l = open_loader(glob, 1, 1, 3, 0, 1, 0, 0);
    if (l) {
        CHECK_INT(coh_loader_shards(l), 4);
        CHECK_INT(coh_loader_windows(l), 9);
    }
    coh_loader_destroy(l);
}

/* Every window of every step across ranks, one epoch: each window at most once. */
static void test_rank_split(void)
{
    write_shard("big0.bin", 10, 3001);
    write_shard("big1.bin", 11, 2050);
    const char *paths[] = {path_in("big0.bin"), path_in("big1.bin")};
    const int T = 8, B = 3;
    for (int R = 1; R <= 4; R++) {
        coh_loader *one = open_loader(paths, 2, R * B, T, 0, 1, 1, 1234);
        coh_loader *ranks[4] = {0};
        for (int r = 0; r < R; r++)
            ranks[r] = open_loader(paths, 2, B, T, r, R, 1, 1234);
        if (!one)
            return;
        uint64_t steps = coh_loader_steps_per_epoch(one), windows = coh_loader_windows(one);
        CHECK_INT(windows, 3000 / 8 + 2049 / 8);
        unsigned char *seen = calloc(65536, 1);
        int32_t *big_in = malloc((size_t)(R * B * T) * 4), *big_tg = malloc((size_t)(R * B * T) * 4);
        int32_t *in = malloc((size_t)(B * T) * 4), *tg = malloc((size_t)(B * T) * 4);
        int equal = 1, disjoint = 1;
        /* One epoch and a half: the second epoch checks the permutation change too. */
        for (uint64_t s = 0; s < steps + steps / 2; s++) {
            CHECK_OK(coh_loader_next(one, big_in, big_tg));
            for (int r = 0; r < R; r++) {
                CHECK_OK(coh_loader_next(ranks[r], in, tg));
                equal &= !memcmp(in, big_in + r * B * T, (size_t)(B * T) * 4);
                equal &= !memcmp(tg, big_tg + r * B * T, (size_t)(B * T) * 4);
                for (int b = 0; b < B && s < steps; b++) {
                    int32_t first = in[b * T]; /* names the window: tokens are unique */
                    disjoint &= seen[first] == 0;
                    seen[first] = 1;
                }
            }
        }
        CHECK(equal);
        CHECK(disjoint);
        int covered = 0;
        for (int i = 0; i < 65536; i++)
            covered += seen[i];
        CHECK_INT(covered, steps * (uint64_t)(R * B));
        free(seen);
        free(big_in);
        free(big_tg);
        free(in);
        free(tg);
        coh_loader_destroy(one);
        for (int r = 0; r < R; r++)
            coh_loader_destroy(ranks[r]);
    }
}

/* The first window of each of the first n batches, for comparing orders. */
static void first_windows(coh_loader *l, int n, int32_t *out)
{
    int32_t in[4 * 8], tg[4 * 8];
    for (int i = 0; i < n; i++) {
        CHECK_OK(coh_loader_next(l, in, tg));
        out[i] = in[0];
    }
}

static void test_shuffle_seeds(void)
{
    const char *paths[] = {path_in("big0.bin"), path_in("big1.bin")};
    coh_loader *a = open_loader(paths, 2, 4, 8, 0, 1, 1, 5), *b = open_loader(paths, 2, 4, 8, 0, 1, 1, 5);
    coh_loader *c = open_loader(paths, 2, 4, 8, 0, 1, 1, 6), *off = open_loader(paths, 2, 4, 8, 0, 1, 0, 5);
    if (!a || !b || !c || !off)
        return;
    int n = (int)coh_loader_steps_per_epoch(a);
    int32_t wa[2 * 200], wb[2 * 200], wc[2 * 200], wo[2 * 200];
    first_windows(a, 2 * n, wa);
    first_windows(b, 2 * n, wb);
    first_windows(c, 2 * n, wc);
    first_windows(off, 2 * n, wo);
    CHECK(!memcmp(wa, wb, sizeof(int32_t) * 2 * (size_t)n));              /* same seed: same */
    CHECK(memcmp(wa, wc, sizeof(int32_t) * (size_t)n) != 0);              /* other seed */
    CHECK(memcmp(wa, wa + n, sizeof(int32_t) * (size_t)n) != 0);          /* next epoch */
    CHECK(!memcmp(wo, wo + n, sizeof(int32_t) * (size_t)n));              /* off: file order */
    CHECK_INT(wo[0], token_at(10, 0));
    CHECK_INT(wo[1], token_at(10, 4 * 8));
    coh_loader_destroy(a);
    coh_loader_destroy(b);
    coh_loader_destroy(c);
    coh_loader_destroy(off);
}

static void test_resume(void)
{
    const char *paths[] = {path_in("big0.bin"), path_in("big1.bin")};
    for (int stop = 0; stop < 200; stop += 37) {
        coh_loader *a = open_loader(paths, 2, 2, 8, 1, 2, 1, 77);
        if (!a)
            return;
        int32_t in[16], tg[16], in2[16], tg2[16];
        for (int i = 0; i < stop; i++)
            CHECK_OK(coh_loader_next(a, in, tg));
        coh_loader_pos pos;
        coh_loader_position(a, &pos);
        /* Resumed with another seed on the command line: the saved seed wins. */
        coh_loader *b = open_loader(paths, 2, 2, 8, 1, 2, 1, 999);
        CHECK_OK(coh_loader_seek(b, &pos));
        int same = 1;
        for (int i = 0; i < 150; i++) {
            CHECK_OK(coh_loader_next(a, in, tg));
            CHECK_OK(coh_loader_next(b, in2, tg2));
            same &= !memcmp(in, in2, sizeof in) && !memcmp(tg, tg2, sizeof tg);
        }
        CHECK(same);
        coh_loader_destroy(a);
        coh_loader_destroy(b);
    }
    coh_loader *c = open_loader(paths, 2, 3, 8, 0, 2, 1, 77);
    coh_loader_pos pos = {.epoch = 0, .step = 1, .seed = 1, .windows = 631, .global_rows = 4};
    CHECK_FAILS(coh_loader_seek(c, &pos), COH_ERR_MISMATCH, "position, 1 batches of 4 rows "
                "(batch x ranks) into its epoch, is not a whole number of batches of 6 rows");
    /* 3 batches of 4 rows are 2 of 6: the same row of the epoch, in this loader's batches */
    pos.step = 3;
    CHECK_OK(coh_loader_seek(c, &pos));
    coh_loader_position(c, &pos);
    CHECK(pos.step == 2 && pos.global_rows == 6);
    pos.step = 0;
    pos.global_rows = 4;
    pos.windows = 100;
    CHECK_FAILS(coh_loader_seek(c, &pos), COH_ERR_MISMATCH, "data set of 100 windows, this one has 631");
    pos.windows = 631;
    pos.global_rows = 6;
    pos.step = 1000;
    CHECK_FAILS(coh_loader_seek(c, &pos), COH_ERR_INVALID, "step '1000' beyond");
    coh_loader_destroy(c);
}

static void test_eval_mode(void)
{
    const char *paths[] = {path_in("a.bin"), path_in("b.bin"), path_in("c.bin"), path_in("d.bin")};
    coh_loader_config c = {.paths = paths, .npaths = 4, .batch = 2, .seq = 3, .rank = 0,
                           .world = 1, .shuffle = 1, .seed = 3, .mode = COH_LOADER_EVAL};
    coh_loader *l = NULL;
    CHECK_OK(coh_loader_create(&c, &l));
    if (!l)
        return;
    int32_t in[6], tg[6];
    /* 9 windows, batches of 2: 4 batches in file order (shuffle ignored), then the end. */
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < 4; k++) {
            CHECK_OK(coh_loader_next(l, in, tg));
            if (k == 0)
                CHECK(in[0] == token_at(0, 0) && in[3] == token_at(0, 3));
            if (k == 2)
                CHECK(in[0] == token_at(1, 3) && in[3] == token_at(3, 0)); /* windows 4, 5 */
        }
        CHECK_FAILS(coh_loader_next(l, in, tg), COH_ERR_NOT_FOUND, "holds only 4 batches");
        coh_loader_rewind(l);
    }
    coh_loader_destroy(l);
}

static void spit(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static coh_status open_one(const char *path, int64_t vocab)
{
    const char *paths[] = {path};
    coh_loader_config c = {.paths = paths, .npaths = 1, .batch = 1, .seq = 2, .world = 1,
                           .vocab = vocab};
    coh_loader *l = NULL;
    coh_status st = coh_loader_create(&c, &l);
    coh_loader_destroy(l);
    return st;
}

static void test_bad_shards(void)
{
    unsigned char h[1024 + 16] = {0};
    int32_t hdr[3] = {20240520, 1, 4};
    memcpy(h, hdr, sizeof hdr);
    const char *p = path_in("bad.bin");
    spit(p, h, 1024 + 8);
    CHECK_OK(open_one(p, 0));
    h[1024] = 0x10; /* token 0 = 16 */
    spit(p, h, 1024 + 8);
    CHECK_FAILS(open_one(p, 16), COH_ERR_INVALID, "token 0 is id 16, outside the model's vocabulary of 16");
    spit(p, h, 1024 + 7);
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, "truncated token shard: the header says 4 tokens (1032 bytes) but the file has 1031 bytes");
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, p);
    spit(p, h, 1024 + 10);
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, "2 trailing bytes");
    spit(p, h, 100);
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, "shorter than the 1024-byte header");
    hdr[0] = 20240801;
    memcpy(h, hdr, sizeof hdr);
    spit(p, h, 1024 + 8);
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, "bad magic 20240801");
    hdr[0] = 20240520;
    hdr[1] = 2;
    memcpy(h, hdr, sizeof hdr);
    spit(p, h, 1024 + 8);
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, "unsupported shard version 2");
    hdr[1] = 1;
    hdr[2] = 1;
    memcpy(h, hdr, sizeof hdr);
    spit(p, h, 1024 + 2);
    CHECK_FAILS(open_one(p, 0), COH_ERR_INVALID, "too little data: 1 tokens");
    CHECK_FAILS(open_one(path_in("none.bin"), 0), COH_ERR_NOT_FOUND, "none.bin");
    CHECK_FAILS(open_one(path_in("*.nothing"), 0), COH_ERR_NOT_FOUND, "no files match");
    const char *paths[] = {path_in("a.bin")};
    coh_loader_config c = {.paths = paths, .npaths = 1, .batch = 1, .seq = 2, .rank = 2, .world = 2};
    coh_loader *l;
    CHECK_FAILS(coh_loader_create(&c, &l), COH_ERR_INVALID, "invalid data-parallel rank '2': valid are 0..1");
    c.rank = 0;
    c.batch = 0;
    CHECK_FAILS(coh_loader_create(&c, &l), COH_ERR_INVALID, "invalid batch size '0'");

    int32_t ids[3] = {1, 70000, 2};
    CHECK_FAILS(coh_shard_write(path_in("wide.bin"), ids, 3), COH_ERR_INVALID,
                "token id '70000' at position 1 does not fit");
    CHECK(access(path_in("wide.bin"), F_OK) != 0);
}

/* cohort prepare (byte tokenizer) -> loader: the windows are the file's bytes. */
static void test_prepare_round_trip(void)
{
    const char *cohort = getenv("COHORT");
    if (!cohort || !*cohort)
        SKIP_CASE("COHORT (the cohort program) is not set; ctest sets it");
    char text[3000];
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (char)(' ' + (i * 7919) % 95);
    spit(path_in("in.txt"), text, sizeof text);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' prepare --tokenizer byte --shard-tokens 1000 --out '%s' '%s' >/dev/null",
             cohort, path_in("prep"), path_in("in.txt"));
    CHECK_INT(system(cmd), 0);
    const char *glob[] = {path_in("prep_train_*.bin")};
    coh_loader *l = open_loader(glob, 1, 1, 10, 0, 1, 0, 0);
    if (!l)
        return;
    CHECK_INT(coh_loader_shards(l), 3);
    CHECK_INT(coh_loader_tokens(l), 3000);
    CHECK_INT(coh_loader_windows(l), 3 * 99);
    int ok = 1;
    for (int s = 0; s < 3; s++)
        for (int w = 0; w < 99; w++) {
            int32_t in[10], tg[10];
            CHECK_OK(coh_loader_next(l, in, tg));
            for (int t = 0; t < 10; t++) {
                ok &= in[t] == (unsigned char)text[s * 1000 + w * 10 + t];
                ok &= tg[t] == (unsigned char)text[s * 1000 + w * 10 + t + 1];
            }
        }
    CHECK(ok);
    coh_loader_destroy(l);
}

int main(void)
{
    if (test_tmpdir(dir, sizeof dir, "loader-test") != 0)
        return 1;
    RUN(test_perm_is_bijection);
    RUN(test_file_order_windows);
    RUN(test_rank_split);
    RUN(test_shuffle_seeds);
    RUN(test_resume);
    RUN(test_eval_mode);
    RUN(test_bad_shards);
    RUN(test_prepare_round_trip);
    test_rmtree(dir);
    return CHECK_REPORT();
}
