/* test_dp_equiv.c: DP at 2 and 4 devices trains the same model as one device: 30 steps with the
 * same seed and global batch give the same loss at every step and the same final parameters
 * (the bound of par_compare.py); plus the per-device thread limit and error reporting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/train_dp.h"

#define STEPS 30
#define GLOBAL_B 8
#define SEQ 16

/* The text the multi-process equivalence test trains on (tests/parallel/equiv_corpus.txt), as
 * byte tokens. Text, not a synthetic rule: its gradients have the spread of real training. */
static unsigned char *text;
static size_t text_len;

/* A fixed token stream: batch k is the same for every strategy, whatever it splits it into;
 * each row is SEQ + 1 bytes of the text from a position hashed from (k, row). */
typedef struct stream {
    int rows;       /* rows per call: the global micro-batch */
    unsigned long k;
    int bad_row;    /* >= 0: put an out-of-range token id in this row of the first batch */
} stream;

static coh_status next_batch(void *ctx, int32_t *in, int32_t *tg);

/* The same batches as a stream of GLOBAL_B rows, served in `parts` calls of GLOBAL_B / parts. */
typedef struct split_stream {
    stream s;
    int parts, part;
    int32_t in[GLOBAL_B * SEQ], tg[GLOBAL_B * SEQ];
} split_stream;

static coh_status next_part(void *ctx, int32_t *in, int32_t *tg)
{
    split_stream *p = ctx;
    coh_status st = p->part ? COH_OK : next_batch(&p->s, p->in, p->tg);
    size_t n = (size_t)GLOBAL_B / p->parts * SEQ, at = (size_t)p->part * n;
    memcpy(in, p->in + at, n * sizeof *in);
    memcpy(tg, p->tg + at, n * sizeof *tg);
    p->part = (p->part + 1) % p->parts;
    return st;
}

static coh_status next_batch(void *ctx, int32_t *in, int32_t *tg)
{
    stream *s = ctx;
    for (int r = 0; r < s->rows; r++) {
        unsigned long long x = (s->k * 7919u + (unsigned long)r * 104729u + 17u) *
                               6364136223846793005ull + 1442695040888963407ull;
        const unsigned char *row = text + (x >> 17) % (text_len - SEQ - 1);
        for (int t = 0; t < SEQ; t++) {
            in[r * SEQ + t] = row[t];
            tg[r * SEQ + t] = row[t + 1];
        }
    }
    if (s->bad_row >= 0 && s->k == 0)
        in[s->bad_row * SEQ + 3] = 1000;
    s->k++;
    return COH_OK;
}

/* Reads the corpus; 0 when it cannot. */
static int load_text(void)
{
    const char *dir = getenv("COHORT_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/parallel/equiv_corpus.txt", dir ? dir : "..");
    FILE *f = fopen(path, "rb");
    if (!f)
        return fprintf(stderr, "cannot read '%s' (set COHORT_SOURCE_DIR)\n", path), 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = n > SEQ + 1 ? malloc((size_t)n) : NULL;
    text_len = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    return text_len > SEQ + 1;
}

static void config(coh_trainer_config *c, int batch, int accum)
{
    coh_trainer_config_defaults(c);
    c->model = (coh_gpt_config){.layers = 2, .heads = 2, .dim = 32, .vocab = 256, .seq = SEQ};
    c->batch = batch;
    c->seq = SEQ;
    c->accum = accum;
    c->steps = STEPS;
    c->warmup = 3;
    c->lr = 1e-3f;
    c->seed = 4242;
}

/* Losses of STEPS single-device steps of `accum` calls of GLOBAL_B / parts rows (parts = 1: the
 * whole global batch each call), and the final parameters. */
static float *run_single(int accum, int parts, float *losses)
{
    coh_trainer_config c;
    config(&c, GLOBAL_B / parts, accum * parts);
    coh_trainer *t;
    CHECK_OK(coh_trainer_create(&c, &t));
    split_stream s = {{GLOBAL_B, 0, -1}, parts, 0, {0}, {0}};
    for (int i = 0; i < STEPS; i++) {
        coh_step_stats st;
        CHECK_OK(coh_trainer_step(t, next_part, &s, &st));
        losses[i] = st.loss;
    }
    size_t n;
    const float *p = coh_gpt_params(coh_trainer_model(t), &n);
    float *copy = malloc(n * sizeof *copy);
    memcpy(copy, p, n * sizeof *copy);
    coh_trainer_destroy(t);
    return copy;
}

/* The bound of tests/parallel/par_compare.py (its TOL), which says why: the loss of every step,
 * every tensor's relative L2 error and every element's error relative to its tensor's scale (its
 * largest magnitude) within TOL. The engine alone, reordering its own sums, reaches 5.8e-6 of a
 * tensor's scale (test_single_reordered, docs/parallel.md), so TOL still says something about
 * dp. Every comparison is written so that NaN or an infinity breaks it. */
#define TOL 1e-5

typedef struct param_err {
    double rel;             /* the worst element's error over its tensor's scale (NaN stays) */
    char tensor[64];        /* where it is */
    size_t index;
    float a, b;
    double l2;              /* the worst tensor's relative L2 error (NaN stays) */
    double need;            /* the smallest floor F that keeps every element within
                               TOL max(|a|, |b|, F s); F <= 1 is the element bound itself */
    size_t over;            /* elements beyond TOL of their tensor's scale, NaN included */
    size_t nonfinite;       /* parameters NaN or infinite, on either side */
} param_err;

/* x is a worse figure than y: larger, or NaN, which then stays the worst. */
static int worse(double x, double y) { return (isnan(x) && !isnan(y)) || x > y; }

static void tensor_err(const coh_tensor_info *ti, const float *a, const float *b, param_err *e)
{
    double s = 0, dd = 0, bb = 0;
    for (size_t k = ti->offset; k < ti->offset + ti->numel; k++)
        s = fmax(s, fmax(fabs((double)a[k]), fabs((double)b[k])));
    for (size_t k = ti->offset; k < ti->offset + ti->numel; k++) {
        int finite = isfinite(a[k]) && isfinite(b[k]);
        double mag = fmax(fabs((double)a[k]), fabs((double)b[k]));
        double d = finite ? fabs((double)a[k] - b[k]) : NAN;
        double r = s > 0 ? d / s : d;
        e->nonfinite += !finite;
        e->over += !(d <= TOL * s);
        dd += d * d;
        bb += (double)b[k] * b[k];
        if (!(d <= TOL * mag) && worse(d / (TOL * s), e->need))
            e->need = d / (TOL * s);
        if (worse(r, e->rel)) {
            e->rel = r;
            e->index = k - ti->offset;
            e->a = a[k];
            e->b = b[k];
            snprintf(e->tensor, sizeof e->tensor, "%s", ti->name);
        }
    }
    double l2 = sqrt(dd / (bb > 0 ? bb : 1e-60));
    if (worse(l2, e->l2))
        e->l2 = l2;
}

/* Compares the parameters a with the reference b, prints the worst figures and checks them. */
static void check_params(const char *what, const coh_gpt_config *m, const float *a,
                         const float *b)
{
    param_err e = {.rel = -1.0, .l2 = -1.0};
    for (int i = 0; i < coh_gpt_tensor_count(m); i++) {
        coh_tensor_info ti;
        coh_gpt_tensor(m, i, &ti);
        tensor_err(&ti, a, b, &e);
    }
    fprintf(stderr, "%s: final params: worst tensor l2 rel err %.3g, worst element err %.3g of "
            "its tensor's scale (%s[%zu]: %.9g vs %.9g), floor needed %.3g, %zu element(s) "
            "beyond %g, %zu non-finite\n", what, e.l2, e.rel, e.tensor, e.index, e.b, e.a,
            e.need, e.over, TOL, e.nonfinite);
    CHECK(e.l2 <= TOL);
    CHECK(e.rel <= TOL);
    CHECK_INT(e.over, 0);
    CHECK_INT(e.nonfinite, 0);
}

static void check_dp(int devices, int accum)
{
    float ref[STEPS], got[STEPS];
    float *pref = run_single(accum, 1, ref);
    coh_trainer_config c;
    config(&c, GLOBAL_B / devices, accum);
    coh_dp *dp;
    CHECK_OK(coh_dp_create(&c, devices, &dp));
    stream s = {GLOBAL_B, 0, -1};
    for (int i = 0; i < STEPS; i++) {
        coh_step_stats st;
        CHECK_OK(coh_dp_step(dp, next_batch, &s, &st));
        CHECK_INT(st.step, i + 1);
        got[i] = st.loss;
        CHECK_NEAR(got[i], ref[i], TOL);
    }
    CHECK(ref[STEPS - 1] < ref[0] - 0.1f); /* it trained: equal losses are not two flat lines */
    size_t n;
    const float *p = coh_gpt_params(coh_trainer_model(coh_dp_trainer(dp)), &n);
    char what[64];
    snprintf(what, sizeof what, "dp %d devices accum %d (loss %.6f -> %.6f)", devices, accum,
             got[0], got[STEPS - 1]);
    check_params(what, &c.model, p, pref);
    CHECK_INT(coh_trainer_get_step(coh_dp_trainer(dp)), STEPS);
    coh_dp_destroy(dp);
    free(pref);
}

/* The floor: one device, the same global batch in 4 calls instead of 1, reorders the same sums
 * as dp at 4 devices does; its distance from the reference is what float32 and AdamW allow. */
static void test_single_reordered(void)
{
    float ref[STEPS], got[STEPS];
    float *a = run_single(1, 1, ref), *b = run_single(1, 4, got);
    for (int i = 0; i < STEPS; i++)
        CHECK_NEAR(got[i], ref[i], TOL);
    coh_trainer_config c;
    config(&c, GLOBAL_B, 1);
    check_params("floor: single, batch 2 x accum 4", &c.model, b, a);
    free(a);
    free(b);
}

static void test_dp_two_devices(void) { check_dp(2, 1); }
static void test_dp_four_devices(void) { check_dp(4, 1); }
static void test_dp_accumulation(void) { check_dp(2, 2); }

/* Every device computes with one thread, whatever the caller uses, and the caller gets its own
 * thread count back. */
static void test_dp_one_thread_per_device(void)
{
    coh_trainer_config c;
    config(&c, 2, 1);
    coh_dp *dp;
    CHECK_OK(coh_dp_create(&c, 4, &dp));
    CHECK_INT(coh_dp_devices(dp), 4);
    CHECK_INT(coh_dp_device_threads(dp, 0), 0);
    coh_set_threads(2);
    stream s = {8, 0, -1};
    coh_step_stats st;
    CHECK_OK(coh_dp_step(dp, next_batch, &s, &st));
    for (int d = 0; d < 4; d++)
        CHECK_INT(coh_dp_device_threads(dp, d), 1);
    CHECK_INT(coh_dp_device_threads(dp, 4), 0);
    CHECK_INT(coh_get_threads(), 2);
    coh_set_threads(1);
    coh_dp_destroy(dp);
}

static void test_dp_errors(void)
{
    coh_trainer_config c;
    config(&c, 2, 1);
    coh_dp *dp = (coh_dp *)&c;
    CHECK_FAILS(coh_dp_create(&c, 0, &dp), COH_ERR_INVALID, "invalid dp device count '0'");
    CHECK(dp == NULL);
    CHECK_FAILS(coh_dp_create(&c, 65, &dp), COH_ERR_INVALID, "must be 1..64");
    c.batch = 0;
    CHECK_FAILS(coh_dp_create(&c, 2, &dp), COH_ERR_INVALID, "invalid batch '0'");
    config(&c, 2, 1);
    CHECK_OK(coh_dp_create(&c, 3, &dp));
    stream s = {6, 0, 5}; /* row 5 belongs to device 2 (2 rows each) */
    coh_step_stats st;
    CHECK_FAILS(coh_dp_step(dp, next_batch, &s, &st), COH_ERR_INVALID,
                "dp device 2: invalid token id '1000'");
    CHECK_INT(coh_trainer_get_step(coh_dp_trainer(dp)), 0);
    CHECK_OK(coh_dp_step(dp, next_batch, &s, &st)); /* the threads still serve the next step */
    CHECK_INT(st.step, 1);
    coh_dp_destroy(dp);
    coh_dp_destroy(NULL);
}

int main(void)
{
    /* one thread: an OpenMP team spinning at its barriers is slow on a loaded 2-core machine */
    coh_set_threads(1);
    if (!load_text())
        return 1;
    RUN(test_single_reordered);
    RUN(test_dp_two_devices);
    RUN(test_dp_four_devices);
    RUN(test_dp_accumulation);
    RUN(test_dp_one_thread_per_device);
    RUN(test_dp_errors);
    free(text);
    return CHECK_REPORT();
}
