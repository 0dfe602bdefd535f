/* test_parallel_unit.c: the strategy layer's pieces in one process: strategy names, mesh
 * checks, ZeRO formulas, AdamW over ranges against the full AdamW, bucket planning, and the
 * single strategy through the parallel trainer against the engine's own trainer, and what each
 * dp device holds. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "check.h"
#include "cohort/parallel.h"
#include "train/parallel/par_trainer_int.h"

static const coh_gpt_config TINY = {2, 2, 16, 64, 16, 0, 0};

static void test_strategy_names(void)
{
    coh_strategy s;
    const char *names[] = {"single", "dp", "ddp", "zero1", "zero2", "zero3"};
    for (int i = 0; i < 6; i++) {
        CHECK_OK(coh_strategy_parse(names[i], &s));
        CHECK_INT(s, i);
        CHECK_STR(coh_strategy_name(s), names[i]);
    }
    CHECK_FAILS(coh_strategy_parse("zero4", &s), COH_ERR_INVALID,
                "invalid strategy 'zero4': valid are single, dp, ddp, zero1, zero2, zero3");
    CHECK_FAILS(coh_strategy_parse("", &s), COH_ERR_INVALID, "invalid strategy ''");
    CHECK_INT(coh_strategy_zero_stage(COH_STRATEGY_DDP), 0);
    CHECK_INT(coh_strategy_zero_stage(COH_STRATEGY_ZERO3), 3);
    CHECK(!coh_strategy_is_multiprocess(COH_STRATEGY_SINGLE));
    CHECK(!coh_strategy_is_multiprocess(COH_STRATEGY_DP));
    CHECK(coh_strategy_is_multiprocess(COH_STRATEGY_ZERO2));
}

static void test_formulas(void)
{
    coh_model_state_bytes b;
    coh_zero_expected_bytes(COH_STRATEGY_DDP, 1000, 4, &b);
    CHECK(b.params == 4000 && b.grads == 4000 && b.optim == 8000);
    coh_zero_expected_bytes(COH_STRATEGY_ZERO1, 1000, 4, &b);
    CHECK(b.params == 4000 && b.grads == 4000 && b.optim == 2000);
    coh_zero_expected_bytes(COH_STRATEGY_ZERO2, 1000, 4, &b);
    CHECK(b.params == 4000 && b.grads == 1000 && b.optim == 2000);
    coh_zero_expected_bytes(COH_STRATEGY_ZERO3, 1000, 4, &b);
    CHECK(b.params == 1000 && b.grads == 1000 && b.optim == 2000);
    coh_dp_expected_bytes(1000, 0, &b);
    CHECK(b.params == 4000 && b.grads == 4000 && b.optim == 8000);
    coh_dp_expected_bytes(1000, 3, &b);
    CHECK(b.params == 4000 && b.grads == 4000 && b.optim == 0);
}

static void test_mesh(void)
{
    coh_comm *self;
    coh_mesh *m;
    CHECK_OK(coh_comm_create_self(&self));
    CHECK_FAILS(coh_mesh_create(self, 2, 1, 1, &m), COH_ERR_INVALID,
                "invalid mesh '2x1x1' (dp x pp x tp): the product must equal the world size 1");
    CHECK_OK(coh_mesh_create(self, 1, 1, 1, &m));
    CHECK(m->dp == 1 && m->dp_rank == 0 && coh_comm_size(m->dp_comm) == 1);
    coh_mesh_destroy(m);
    coh_comm_destroy(self);
}

/* The range optimizer updates exactly what the full one updates inside its ranges. */
static void test_adamw_ranges(void)
{
    size_t n = coh_gpt_param_count(&TINY);
    float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2), *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) {
        p1[i] = p2[i] = sinf((float)i);
        g[i] = cosf((float)i * 0.7f);
    }
    size_t b[2] = {5, n / 2}, e[2] = {n / 3, n - 7};
    coh_adamw *full, *part;
    CHECK_OK(coh_adamw_create(&TINY, &full));
    CHECK_OK(coh_adamw_create_ranges(&TINY, b, e, 2, &part));
    size_t cm;
    coh_adamw_m(part, &cm);
    CHECK(cm == (e[0] - b[0]) + (e[1] - b[1]));
    coh_adamw_params ap = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (long t = 1; t <= 3; t++) {
        coh_adamw_update(full, p1, g, &ap, t);
        coh_adamw_update(part, p2, g, &ap, t);
    }
    int same = 1, untouched = 1;
    for (size_t i = 0; i < n; i++) {
        int in = (i >= b[0] && i < e[0]) || (i >= b[1] && i < e[1]);
        if (in && p1[i] != p2[i])
            same = 0;
        if (!in && p2[i] != sinf((float)i))
            untouched = 0;
    }
    CHECK(same);
    CHECK(untouched);
    size_t bad_b[2] = {10, 5}, bad_e[2] = {20, 30};
    coh_adamw *o;
    CHECK_FAILS(coh_adamw_create_ranges(&TINY, bad_b, bad_e, 2, &o), COH_ERR_INVALID,
                "invalid optimizer range 1 '[5, 30)'");
    size_t big = n + 1, zero = 0;
    CHECK_FAILS(coh_adamw_create_ranges(&TINY, &zero, &big, 1, &o), COH_ERR_INVALID,
                "must be sorted, disjoint and inside");
    coh_adamw_destroy(full);
    coh_adamw_destroy(part);
    free(p1);
    free(p2);
    free(g);
}

/* Buckets: whole layers from the end backwards, covering the arena once; ZeRO chunks of every
 * rank tile each bucket. */
static void test_buckets(void)
{
    coh_gpt_config c = {4, 2, 32, 64, 16, 0, 0};
    coh_gpt *g;
    CHECK_OK(coh_gpt_create(&c, 1, 4, &g));
    size_t lb, le;
    coh_gpt_layer_range(&c, 0, &lb, &le);
    for (int ndp = 1; ndp <= 3; ndp++) {
        for (int zero = 0; zero <= 3; zero += 3) {
            size_t covered[3] = {0};
            int nbk = 0;
            for (int r = 0; r < ndp; r++) {
                coh_par_trainer t = {.ndp = ndp, .rdp = r, .zero_stage = zero, .model = g};
                t.cfg.par.bucket_bytes = 2 * (le - lb) * sizeof(float); /* two blocks a bucket */
                CHECK_OK(par_plan_buckets(&t));
                size_t end = coh_gpt_param_count(&c);
                for (int k = 0; k < t.nbk; k++) {
                    CHECK(t.bk[k].end == end);
                    CHECK(t.bk[k].own_b >= t.bk[k].begin && t.bk[k].own_e <= t.bk[k].end);
                    covered[r] += t.bk[k].own_e - t.bk[k].own_b;
                    end = t.bk[k].begin;
                }
                CHECK(end == 0);
                CHECK(t.bk[0].hi == c.layers && t.bk[t.nbk - 1].lo == -1);
                nbk = t.nbk;
                free(t.bk);
                free(t.bucket_of);
            }
            size_t sum = 0;
            for (int r = 0; r < ndp; r++)
                sum += covered[r];
            CHECK(sum == coh_gpt_param_count(&c));
            /* ZeRO-3 gathers per layer: L + 2 buckets; otherwise the size cap groups blocks */
            CHECK(zero == 3 ? nbk == c.layers + 2 : nbk < c.layers + 2);
        }
    }
    coh_gpt_destroy(g);
}

/* A pipeline stage's buckets: inside the stage's ranges and covering them once, never across a
 * layer another stage holds (a cap of the whole arena would merge everything otherwise), each
 * held layer in the bucket that holds its range, and wte a bucket of its own on the first stage
 * and on the head's (its copy), reported with layer -1. */
static void test_stage_buckets(void)
{
    coh_par_config pc = {0};
    coh_parallel_config_init(&pc.par);
    coh_trainer_config_defaults(&pc.train);
    pc.train.model = (coh_gpt_config){4, 2, 32, 64, 16, 0, 0};
    pc.par.pp = 2;
    pc.par.micro_batch = 1;
    pc.par.microbatches = 2;
    pc.par.schedule = COH_SCHED_INTERLEAVED;
    pc.par.virtual_stages = 2;
    pc.par.stage_layers = "0-0,1-1,2-2,3-3";
    coh_par_config_apply(&pc);
    const coh_gpt_config *c = &pc.train.model;
    size_t wte = par_wte_size(c), n = coh_gpt_param_count(c);
    for (int s = 0; s < 2; s++) {
        coh_pipe_stage lay;
        CHECK_OK(coh_par_pipe_stage(&pc, s, &lay));
        par_bucket bk[8];
        int of[6];
        size_t own, sum = 0;
        int nbk = par_bucket_plan(c, &lay, 0, 2, 0, n * sizeof(float), bk, of, &own), wb = -1;
        for (int k = 0; k < nbk; k++) {
            int in = 0;
            for (int r = 0; r < lay.nranges; r++)
                in |= bk[k].begin >= lay.begin[r] && bk[k].end <= lay.end[r];
            CHECK(in && bk[k].end > bk[k].begin);
            sum += bk[k].end - bk[k].begin;
            if (bk[k].begin == 0)
                wb = k;
        }
        CHECK(sum == lay.params);
        CHECK(wb >= 0 && bk[wb].end == wte && bk[wb].lo == -1);
        for (int l = -1; l <= c->layers; l++) {
            size_t b, e;
            coh_gpt_layer_range(c, l, &b, &e);
            int held = 0; /* layer -1's bucket is wpe's, wte's apart */
            for (int r = 0; l >= 0 && r < lay.nranges; r++)
                held |= b >= lay.begin[r] && e <= lay.end[r];
            if (held) /* a held layer's range lies in its bucket */
                CHECK(bk[of[l + 1]].begin <= b && e <= bk[of[l + 1]].end);
        }
        /* stage 0 holds the embeddings with block 0, and block 2; stage 1 block 1, and block 3
         * with the head: the cap holds all, so two buckets (the gap splits) beside wte */
        CHECK(nbk == 3);
    }
}

static coh_status fixed_batch(void *ctx, int32_t *in, int32_t *tg)
{
    int *k = ctx;
    for (int i = 0; i < 2 * 8; i++) {
        in[i] = (i * 7 + *k) % 64;
        tg[i] = (i * 5 + 3 * *k) % 64;
    }
    (*k)++;
    return COH_OK;
}

/* TINY on one rank (a mesh of one over the self transport): micro-batch 2 x seq 8, 2
 * micro-batches a step, 4 steps. */
static coh_par_config tiny_single(coh_comm **self, coh_mesh **m)
{
    CHECK_OK(coh_comm_create_self(self));
    CHECK_OK(coh_mesh_create(*self, 1, 1, 1, m));
    coh_par_config pc = {0};
    coh_parallel_config_init(&pc.par);
    coh_trainer_config_defaults(&pc.train);
    pc.train.model = TINY;
    pc.par.micro_batch = 2;
    pc.par.seq = 8;
    pc.train.steps = 4;
    pc.par.microbatches = 2;
    return pc;
}

/* single through the parallel trainer is bit for bit the engine's own trainer */
static void test_single_is_engine(void)
{
    coh_comm *self;
    coh_mesh *m;
    coh_par_config pc = tiny_single(&self, &m);
    coh_par_config_apply(&pc); /* the engine's own trainer below gets the same batch shape */
    CHECK(pc.train.batch == 2 && pc.train.seq == 8 && pc.train.accum == 2);
    coh_par_trainer *pt;
    coh_trainer *t;
    CHECK_OK(coh_par_trainer_create(&pc, m, &pt));
    CHECK_OK(coh_trainer_create(&pc.train, &t));
    int k1 = 0, k2 = 0;
    for (int s = 0; s < 4; s++) {
        coh_step_stats a, b;
        CHECK_OK(coh_par_trainer_step(pt, fixed_batch, &k1, &a));
        CHECK_OK(coh_trainer_step(t, fixed_batch, &k2, &b));
        CHECK(a.loss == b.loss && a.grad_norm == b.grad_norm && a.step == b.step);
    }
    size_t n;
    float *p = coh_gpt_params(coh_trainer_model(t), &n);
    float *q = malloc(n * sizeof *q);
    CHECK_OK(coh_par_trainer_gather_params(pt, q));
    CHECK(!memcmp(p, q, n * sizeof *q));
    pc.par.strategy = COH_STRATEGY_DP; /* runs its device threads here, but has no trace */
    pc.trace_path = "dp.json";
    coh_par_trainer *bad;
    CHECK_FAILS(coh_par_trainer_create(&pc, m, &bad), COH_ERR_UNSUPPORTED,
                "not available for strategy 'dp'");
    pc.trace_path = NULL; /* nor a pipeline: its devices are whole replicas */
    pc.par.pp = 2;
    CHECK_FAILS(coh_par_trainer_create(&pc, m, &bad), COH_ERR_UNSUPPORTED,
                "strategy 'dp' with pp 2: DataParallel runs whole replicas");
    free(q);
    coh_trainer_destroy(t);
    coh_par_trainer_destroy(pt);
    coh_mesh_destroy(m);
    coh_comm_destroy(self);
}

/* The tied wte's two gradients summed in a pipeline's order (train.tied_grad_apart): the head's
 * part in a buffer of one wte, zeroed each step and added at its end. With clipping off, one step
 * moves every tensor but wte exactly as the interleaved order does; the buffer is kept once; a
 * data-parallel trainer refuses it, naming why. */
static void test_tied_grad_apart(void)
{
    coh_comm *self;
    coh_mesh *m;
    coh_par_config pc = tiny_single(&self, &m);
    pc.train.grad_clip = 0; /* else the norm carries wte's last bits into every tensor */
    coh_par_trainer *a, *b, *bad;
    CHECK_OK(coh_par_trainer_create(&pc, m, &a));
    pc.train.tied_grad_apart = 1;
    CHECK_OK(coh_par_trainer_create(&pc, m, &b));
    coh_gpt *ga = coh_trainer_model(coh_par_trainer_base(a));
    coh_gpt *gb = coh_trainer_model(coh_par_trainer_base(b));
    size_t hn = 1, wte = (size_t)TINY.vocab * TINY.dim;
    CHECK(!coh_gpt_head_grad(ga, &hn) && hn == 0);
    CHECK(coh_gpt_head_grad(gb, &hn) && hn == wte);
    CHECK_FAILS(coh_gpt_keep_head_grad_apart(gb), COH_ERR_INVALID, "already kept apart");
    int ka = 0, kb = 0;
    coh_step_stats sa, sb;
    CHECK_OK(coh_par_trainer_step(a, fixed_batch, &ka, &sa));
    CHECK_OK(coh_par_trainer_step(b, fixed_batch, &kb, &sb));
    CHECK(sa.loss == sb.loss);
    size_t n;
    coh_gpt_params(ga, &n);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    CHECK_OK(coh_par_trainer_gather_params(a, pa));
    CHECK_OK(coh_par_trainer_gather_params(b, pb));
    /* wte leads the arena; its own update may differ where its gradient's last bits do */
    CHECK(!memcmp(pa + wte, pb + wte, (n - wte) * sizeof *pa));
    pc.par.strategy = COH_STRATEGY_DP;
    pc.par.dp = 2;
    CHECK_FAILS(coh_par_trainer_create(&pc, m, &bad), COH_ERR_UNSUPPORTED, "keep one replica");
    free(pa);
    free(pb);
    coh_par_trainer_destroy(a);
    coh_par_trainer_destroy(b);
    coh_mesh_destroy(m);
    coh_comm_destroy(self);
}

static coh_status dp_batch(void *ctx, int32_t *in, int32_t *tg)
{
    int *k = ctx;
    for (int i = 0; i < 3 * 8; i++) {
        in[i] = (i * 7 + *k) % 256;
        tg[i] = (i * 5 + 3 * *k) % 256;
    }
    (*k)++;
    return COH_OK;
}

/* One sequence of 8 tokens: a single-device trainer's micro-batch in test_dp_device_memory. */
static coh_status one_batch(void *ctx, int32_t *in, int32_t *tg)
{
    int *k = ctx;
    for (int i = 0; i < 8; i++) {
        in[i] = (i * 7 + *k) % 256;
        tg[i] = (i * 5 + 3 * *k) % 256;
    }
    (*k)++;
    return COH_OK;
}

/* Strategy dp: device 0 holds parameters, gradients and AdamW moments, devices 1 and 2 a replica
 * and its gradients (measured resident pages, within the two partial pages at an arena's ends),
 * and the rank's figures are the three summed. */
static void test_dp_device_memory(void)
{
    coh_comm *self;
    coh_mesh *m;
    CHECK_OK(coh_comm_create_self(&self));
    CHECK_OK(coh_mesh_create(self, 1, 1, 1, &m));
    coh_par_config pc = {0};
    coh_parallel_config_init(&pc.par);
    pc.par.strategy = COH_STRATEGY_DP;
    pc.par.dp = 3;
    coh_trainer_config_defaults(&pc.train);
    pc.train.model = (coh_gpt_config){2, 2, 64, 256, 8, 0, 0}; /* 118 K parameters: 115 pages each */
    pc.par.micro_batch = 1;
    pc.par.seq = 8;
    pc.train.steps = 2;
    coh_par_trainer *pt;
    CHECK_OK(coh_par_trainer_create(&pc, m, &pt));
    CHECK_INT(coh_par_trainer_devices(pt), 3);
    int k = 0;
    coh_step_stats st;
    CHECK_OK(coh_par_trainer_step(pt, dp_batch, &k, &st));
    uint64_t P = coh_gpt_param_count(&pc.train.model), page = (uint64_t)sysconf(_SC_PAGESIZE);
    coh_model_state_bytes d, sum = {0}, rank, e;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(coh_par_trainer_device_memory_peak(pt, i, &d));
        coh_dp_expected_bytes(P, i, &e);
        CHECK(d.params >= e.params && d.params <= e.params + 2 * page);
        CHECK(d.grads >= e.grads && d.grads <= e.grads + 2 * page);
        CHECK(d.optim == e.optim);
        sum.params += d.params;
        sum.grads += d.grads;
        sum.optim += d.optim;
    }
    coh_par_trainer_memory_peak(pt, &rank);
    CHECK(rank.params == sum.params && rank.grads == sum.grads && rank.optim == sum.optim);
    CHECK(rank.optim == 8 * P);
    CHECK_FAILS(coh_par_trainer_device_memory(pt, 3, &d), COH_ERR_INVALID,
                "invalid device '3': this rank drives devices 0..2");
    CHECK_FAILS(coh_par_trainer_device_memory_peak(pt, -1, &d), COH_ERR_INVALID,
                "invalid device '-1'");
    coh_par_trainer_destroy(pt);
    /* every other strategy has one device: the rank */
    pc.par.strategy = COH_STRATEGY_SINGLE;
    pc.par.dp = 1;
    CHECK_OK(coh_par_trainer_create(&pc, m, &pt));
    CHECK_INT(coh_par_trainer_devices(pt), 1);
    CHECK_OK(coh_par_trainer_device_memory(pt, 0, &d));
    coh_par_trainer_memory(pt, &rank);
    CHECK(d.params == rank.params && d.grads == rank.grads && d.optim == rank.optim);
    CHECK(d.optim <= 8 * P); /* resident moments: the pages written so far */
    k = 0;
    CHECK_OK(coh_par_trainer_step(pt, one_batch, &k, &st));
    CHECK_OK(coh_par_trainer_device_memory(pt, 0, &d));
    CHECK(d.optim == 8 * P); /* the first update wrote every element of both */
    coh_par_trainer_destroy(pt);
    coh_mesh_destroy(m);
    coh_comm_destroy(self);
}

int main(void)
{
    RUN(test_strategy_names);
    RUN(test_formulas);
    RUN(test_stage_buckets);
    RUN(test_mesh);
    RUN(test_adamw_ranges);
    RUN(test_buckets);
    RUN(test_single_is_engine);
    RUN(test_tied_grad_apart);
    RUN(test_dp_device_memory);
    return CHECK_REPORT();
}
