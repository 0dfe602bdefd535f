/* test_pipeline_layout.c: where a pipeline puts the model: the split chosen by simulating the
 * schedule (a head-only last chunk for GPT-2's vocabulary at pp 2, v 2, m 2, simulated shorter
 * than 1F1B's best; never longer than the balanced split; the best of every split on small
 * shapes), --stage-layers with "embeddings" and "head" and its refusals, the arena ranges of a
 * stage whose chunk holds no block, and the engine running chunks that hold no block bit for
 * bit as the whole model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/parallel.h"
#include "cohort/pipeline.h"
#include "cohort/train.h"
#include "train/parallel/pipeline_int.h"
#include "train/parallel/par_trainer_int.h"

/* The benchmark model of bench/pipeline: 12 blocks of 384, T 256, GPT-2's vocabulary. */
static const coh_gpt_config GPT2_SMALLISH = {12, 6, 384, 50257, 256, 0, 0};

/* The simulated step of chain bounds b (L blocks then n head shards) under shape, costs c. */
static double simulate_chain(const pipe_chunk_cost *c, const coh_pipe_shape *shape, int L, int n,
                             const int *b)
{
    int u = shape->stages * shape->virtual_stages;
    double fwd[64], bwd[64];
    pipe_chunk_costs(c, L, n, b, u, fwd, bwd);
    pipe_lists l;
    coh_pipe_sim sim = {0};
    CHECK_OK(pipe_lists_build(shape, &l));
    pipe_sim_in in = {shape->stages, shape->microbatches, shape->virtual_stages, l.list, l.count,
                      0, 0, NULL, fwd, bwd, NULL};
    CHECK_OK(pipe_simulate(&in, &sim, NULL));
    pipe_lists_release(&l);
    return sim.makespan;
}

/* The same with the head whole, b over blocks (b[u] = L, the head in the last chunk). */
static double simulate(const pipe_chunk_cost *c, const coh_pipe_shape *shape, const int *b)
{
    int u = shape->stages * shape->virtual_stages, bb[65];
    memcpy(bb, b, sizeof(int) * (size_t)(u + 1));
    bb[u] = b[u] + 1;
    return simulate_chain(c, shape, b[u], 1, bb);
}

/* The fewest blocks chunk k of u may hold: the first and last none, the others one. */
static int fewest(int u, int k) { return k == 0 || k == u - 1 ? 0 : 1; }

/* The shortest simulated step over every split of L blocks into u chunks, by enumeration of
 * b[i..u-1] after b[0..i-1]. */
static double best_of_all(const pipe_chunk_cost *c, const coh_pipe_shape *shape, int L, int *b,
                          int i, double best)
{
    int u = shape->stages * shape->virtual_stages;
    if (i == u) {
        b[u] = L;
        if (L - b[u - 1] < fewest(u, u - 1))
            return best;
        double t = simulate(c, shape, b);
        return t < best ? t : best;
    }
    for (int x = b[i - 1] + fewest(u, i - 1); x <= L; x++) {
        b[i] = x;
        best = best_of_all(c, shape, L, b, i + 1, best);
    }
    return best;
}

/* The figure issue 11 asks for: interleaved v = 2 against 1F1B at m = 2 on GPT-2's vocabulary,
 * where the LM head weighs about 9.8 blocks. With a block in every chunk interleaving cannot
 * beat 1F1B there; with the head alone in the last chunk it does, by the simulation. But at m = 2
 * no schedule goes below the chain every pipeline has: microbatch 0's forward through every
 * block, both microbatches' head (one device runs it), microbatch 1's backward through every
 * block; and 1F1B with the head alone on stage 1 reaches that bound, so the two tie. */
static void test_head_alone_at_m2(void)
{
    pipe_chunk_cost c;
    pipe_estimate_costs(&GPT2_SMALLISH, 256, &c);
    int L = 12, bi[5], b1[3];
    coh_pipe_shape inter = {COH_SCHED_INTERLEAVED, 2, 2, 2}, f1b = {COH_SCHED_1F1B, 2, 2, 1};
    double ti, ti_bal, t1, t1_bal, u = c.block_fwd;
    int n;
    CHECK_OK(pipe_choose_split(&c, L, &inter, 1, bi, &n, &ti, &ti_bal));
    CHECK_INT(n, 1);
    CHECK_OK(pipe_choose_split(&c, L, &f1b, 1, b1, &n, &t1, &t1_bal));
    CHECK_INT(n, 1);
    bi[4] = b1[2] = L; /* over blocks, the head in the last chunk */
    double bound = L * (c.block_fwd + c.block_bwd) + c.embed_fwd + c.embed_bwd +
                   2 * (c.head_fwd + c.head_bwd);
    printf("head / block %.2f; in block forwards: bound %.2f\n",
           (c.head_fwd + c.head_bwd) / (c.block_fwd + c.block_bwd), bound / u);
    printf("interleaved: %d,%d,%d,%d,%d  step %.2f (balanced %.2f)\n", bi[0], bi[1], bi[2],
           bi[3], bi[4], ti / u, ti_bal / u);
    printf("1f1b:        %d,%d,%d  step %.2f (balanced %.2f)\n", b1[0], b1[1], b1[2], t1 / u,
           t1_bal / u);
    CHECK_INT(bi[0], 0);
    CHECK_INT(bi[4], L);
    CHECK_INT(bi[3], L); /* the last chunk holds the head alone */
    CHECK(bi[1] >= 1 && bi[2] > bi[1] && bi[3] > bi[2]);
    /* the balanced starts, the defaults before the split was simulated (bench/pipeline's
     * "-blocks" rows): 0-3 | 4 | 5-10 | 11 + head and 0-10 | 11 + head */
    const int old_i[5] = {0, 4, 5, 11, 12}, old_1[3] = {0, 11, 12};
    CHECK_NEAR(simulate(&c, &inter, old_i), ti_bal, 1e-12);
    CHECK_NEAR(simulate(&c, &f1b, old_1), t1_bal, 1e-12);
    CHECK(ti <= ti_bal);
    CHECK(ti < ti_bal * 0.99);  /* the head alone beats a block in every chunk */
    CHECK(ti < t1_bal * 0.99);  /* and 1F1B with a block on every stage */
    CHECK_INT(b1[1], L);        /* 1F1B's best: every block on stage 0, the head alone on 1 */
    CHECK(t1 < t1_bal * 0.99);
    CHECK(ti >= bound * (1 - 1e-12) && t1 >= bound * (1 - 1e-12));
    CHECK_NEAR(t1, bound, 1e-9); /* 1F1B reaches the bound: nothing beats it */
    CHECK_NEAR(ti, bound, 1e-9);
    /* and the chosen splits are the best of every split */
    int b[5] = {0};
    CHECK_NEAR(ti, best_of_all(&c, &inter, L, b, 1, INFINITY), 1e-12);
    CHECK_NEAR(t1, best_of_all(&c, &f1b, L, b, 1, INFINITY), 1e-12);
    /* the trainer's split is this one */
    int bt[5];
    par_pipe_split(&GPT2_SMALLISH, 256, &inter, bt);
    CHECK(!memcmp(bt, bi, sizeof bt));
    /* deterministic: every rank computes the same */
    CHECK_OK(pipe_choose_split(&c, L, &inter, 1, bt, &n, NULL, NULL));
    bt[4] = L;
    CHECK(!memcmp(bt, bi, sizeof bt));
}

/* On small shapes the local search finds the best split there is, and never does worse than
 * the balanced start; naive's step is the same for every split, so it keeps the balanced one. */
static void test_choice_against_enumeration(void)
{
    static const coh_gpt_config models[] = {{4, 2, 32, 256, 32, 0, 0},
                                            {8, 4, 128, 50257, 128, 0, 0},
                                            {8, 4, 256, 8000, 256, 0, 0}};
    static const coh_pipe_shape shapes[] = {{COH_SCHED_1F1B, 2, 4, 1},
                                            {COH_SCHED_GPIPE, 2, 4, 1},
                                            {COH_SCHED_1F1B, 4, 8, 1},
                                            {COH_SCHED_INTERLEAVED, 2, 2, 2},
                                            {COH_SCHED_INTERLEAVED, 2, 4, 2}};
    int worse = 0, cases = 0;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        for (size_t j = 0; j < sizeof shapes / sizeof *shapes; j++) {
            pipe_chunk_cost c;
            pipe_estimate_costs(&models[i], models[i].seq, &c);
            int L = models[i].layers, u = shapes[j].stages * shapes[j].virtual_stages;
            int b[9] = {0}, got[9];
            double t, bal;
            int n;
            CHECK_OK(pipe_choose_split(&c, L, &shapes[j], 1, got, &n, &t, &bal));
            CHECK(t <= bal);
            CHECK_INT(got[u], L + 1);
            got[u] = L;
            CHECK_NEAR(t, simulate(&c, &shapes[j], got), 1e-12);
            double best = best_of_all(&c, &shapes[j], L, b, 1, INFINITY);
            CHECK(t >= best * (1 - 1e-12));
            cases++;
            worse += t > best * (1 + 1e-9);
            if (t > best * (1 + 1e-9))
                printf("model %zu %s p %d m %d v %d: chosen %.6g, best %.6g\n", i,
                       coh_schedule_name(shapes[j].kind), shapes[j].stages,
                       shapes[j].microbatches, shapes[j].virtual_stages, t, best);
            for (int k = 1; k < u - 1; k++)
                CHECK(got[k + 1] > got[k]); /* middle chunks hold a block */
        }
    printf("%d of %d shapes: the local search stopped above the best split\n", worse, cases);
    CHECK_INT(worse, 0);
    /* naive: every split takes as long, so the balanced one stays */
    pipe_chunk_cost c;
    pipe_estimate_costs(&GPT2_SMALLISH, 256, &c);
    coh_pipe_shape naive = {COH_SCHED_NAIVE, 2, 4, 1};
    int b[3];
    double t, bal;
    int n;
    CHECK_OK(pipe_choose_split(&c, 12, &naive, 4, b, &n, &t, &bal));
    CHECK_INT(n, 1);
    CHECK(t == bal);
    CHECK(b[1] >= 1 && b[1] < 12);
}

/* A large pipeline keeps to its budget and still answers; an invalid shape is refused. */
static void test_choice_bounds(void)
{
    pipe_chunk_cost c;
    coh_gpt_config big = {384, 16, 1024, 50257, 1024, 0, 0};
    pipe_estimate_costs(&big, 1024, &c);
    coh_pipe_shape s = {COH_SCHED_INTERLEAVED, 16, 64, 4};
    int *b = malloc(sizeof(int) * 65);
    double t, bal;
    int n;
    CHECK_OK(pipe_choose_split(&c, 384, &s, 4, b, &n, &t, &bal));
    CHECK(t <= bal);
    CHECK_INT(b[0], 0);
    CHECK_INT(b[64], 384 + n);
    for (int k = 1; k < 63; k++)
        CHECK(b[k + 1] > b[k]);
    coh_pipe_shape bad = {COH_SCHED_INTERLEAVED, 2, 3, 2};
    CHECK_FAILS(pipe_choose_split(&c, 384, &bad, 1, b, &n, NULL, NULL), COH_ERR_INVALID, "'3'");
    CHECK_FAILS(pipe_choose_split(&c, 384, &s, 17, b, &n, NULL, NULL), COH_ERR_INVALID, "'17'");
    coh_pipe_shape deep = {COH_SCHED_1F1B, 4, 4, 1};
    CHECK_FAILS(pipe_choose_split(&c, 3, &deep, 1, b, &n, NULL, NULL), COH_ERR_INVALID,
                "at most one virtual stage a block");
    free(b);
}

static void test_parse_ends(void)
{
    int b[6];
    CHECK_OK(coh_pipe_parse_layers("0,1,2-11,head", 12, 4, b));
    CHECK(b[0] == 0 && b[1] == 1 && b[2] == 2 && b[3] == 12 && b[4] == 12);
    CHECK_OK(coh_pipe_parse_layers("embeddings,0-1,2-5,6-11", 12, 4, b));
    CHECK(b[0] == 0 && b[1] == 0 && b[2] == 2 && b[3] == 6 && b[4] == 12);
    CHECK_OK(coh_pipe_parse_layers("embeddings,0-11,head", 12, 3, b));
    CHECK(b[0] == 0 && b[1] == 0 && b[2] == 12 && b[3] == 12);
    CHECK_OK(coh_pipe_parse_layers("0-11,head", 12, 2, b));
    CHECK(b[1] == 12 && b[2] == 12);
    CHECK_FAILS(coh_pipe_parse_layers("0-3,head,4-11", 12, 3, b), COH_ERR_INVALID,
                "invalid --stage-layers '0-3,head,4-11': 'head'");
    CHECK_FAILS(coh_pipe_parse_layers("0-3,head,4-11", 12, 3, b), COH_ERR_INVALID,
                "only be the last entry, not entry 2");
    CHECK_FAILS(coh_pipe_parse_layers("0-3,embeddings,4-11", 12, 3, b), COH_ERR_INVALID,
                "'embeddings' (a stage of the embeddings alone) can only be the first entry, "
                "not entry 2");
    CHECK_FAILS(coh_pipe_parse_layers("0-5,head", 12, 2, b), COH_ERR_INVALID,
                "'head' ends the stages, but blocks 6..11 are in none");
    CHECK_FAILS(coh_pipe_parse_layers("embeddings,head", 12, 2, b), COH_ERR_INVALID,
                "blocks 0..11 are in none");
    CHECK_FAILS(coh_pipe_parse_layers("0-11,heads", 12, 2, b), COH_ERR_INVALID,
                "'0-11,heads': expected block ranges like 0-2,3-7, with 'embeddings' first or "
                "'head' last");
    CHECK_FAILS(coh_pipe_parse_layers("0-11,head,", 12, 2, b), COH_ERR_INVALID,
                "'head' (a stage of the final LayerNorm and LM head alone) can only be the last");
    CHECK_FAILS(coh_pipe_parse_layers("0-11,head", 12, 3, b), COH_ERR_INVALID,
                "2 stage(s) covering blocks 0..11, but the pipeline has 3 stages");
    CHECK_FAILS(coh_pipe_parse_layers("embeddings,0-5,6-11,head", 12, 3, b), COH_ERR_INVALID,
                "more than the 3 stages");
    CHECK_FAILS(coh_pipe_parse_layers("HEAD", 12, 1, b), COH_ERR_INVALID, "'HEAD'");
}

/* GPT2_SMALLISH at pp 2, interleaved with 2 chunks a stage, m = 2 microbatches of 1. */
static coh_par_config interleaved_2x2(void)
{
    coh_par_config pc;
    memset(&pc, 0, sizeof pc);
    pc.train.model = GPT2_SMALLISH;
    coh_parallel_config_init(&pc.par);
    pc.par.pp = 2;
    pc.par.schedule = COH_SCHED_INTERLEAVED;
    pc.par.virtual_stages = 2;
    pc.par.microbatches = 2;
    pc.par.micro_batch = 1;
    coh_par_config_apply(&pc);
    return pc;
}

/* The stage holding the head alone holds the final LayerNorm and its copy of wte; first and
 * last follow the virtual stage, not the blocks. */
static void test_stage_ranges(void)
{
    coh_par_config pc = interleaved_2x2();
    const coh_gpt_config *m = &pc.train.model;
    size_t wte = (size_t)m->vocab * m->dim, b, e, lnf_b, lnf_e;
    coh_gpt_layer_range(m, m->layers, &lnf_b, &lnf_e);
    coh_pipe_stage s0, s1;
    char text[64];
    /* the default: the trainer's chosen split */
    CHECK_OK(coh_par_pipe_stage(&pc, 0, &s0));
    CHECK_OK(coh_par_pipe_stage(&pc, 1, &s1));
    printf("default: stage 0 %s, stage 1 %s\n", coh_pipe_stage_blocks(&s0, text, sizeof text),
           coh_pipe_stage_blocks(&s1, text + 32, 32));
    CHECK_INT(s1.lo[1], 12);
    CHECK_INT(s1.hi[1], 12);
    CHECK_INT(s0.hi[1], 12); /* stage 0's second chunk ends at block L (then head shard 0) */
    CHECK(s0.first && !s0.last && !s0.tied_copy);
    CHECK(!s1.first && s1.last && s1.tied_copy);
    /* explicit: 0 | 1 | 2-11 | head */
    pc.par.stage_layers = "0,1,2-11,head";
    CHECK_OK(coh_par_pipe_stage(&pc, 0, &s0));
    CHECK_OK(coh_par_pipe_stage(&pc, 1, &s1));
    CHECK_STR(coh_pipe_stage_blocks(&s0, text, sizeof text), "0-0,2-11");
    CHECK_STR(coh_pipe_stage_blocks(&s1, text, sizeof text), "1-1,head");
    /* stage 0: embeddings + block 0, blocks 2..11 (no final LayerNorm) */
    CHECK_INT(s0.nranges, 2);
    coh_gpt_layer_range(m, -1, &b, &e);
    CHECK_INT(s0.begin[0], b);
    coh_gpt_layer_range(m, 0, &b, &e);
    CHECK_INT(s0.end[0], e);
    coh_gpt_layer_range(m, 2, &b, &e);
    CHECK_INT(s0.begin[1], b);
    coh_gpt_layer_range(m, 11, &b, &e);
    CHECK_INT(s0.end[1], e);
    CHECK(s0.end[1] <= lnf_b);
    /* stage 1: its wte copy, block 1, the final LayerNorm */
    CHECK_INT(s1.nranges, 3);
    CHECK_INT(s1.begin[0], 0);
    CHECK_INT(s1.end[0], wte);
    coh_gpt_layer_range(m, 1, &b, &e);
    CHECK_INT(s1.begin[1], b);
    CHECK_INT(s1.end[1], e);
    CHECK_INT(s1.begin[2], lnf_b);
    CHECK_INT(s1.end[2], lnf_e);
    /* every parameter once over the stages, wte twice */
    CHECK_INT(s0.params + s1.params, coh_gpt_param_count(m) + wte);
    /* an embeddings-only first chunk: stage 0 holds the embeddings, then blocks 2..5 */
    pc.par.stage_layers = "embeddings,0-1,2-5,6-11";
    CHECK_OK(coh_par_pipe_stage(&pc, 0, &s0));
    CHECK_OK(coh_par_pipe_stage(&pc, 1, &s1));
    CHECK_STR(coh_pipe_stage_blocks(&s0, text, sizeof text), "embeddings,2-5");
    CHECK_STR(coh_pipe_stage_blocks(&s1, text, sizeof text), "0-1,6-11");
    coh_gpt_layer_range(m, -1, &b, &e);
    CHECK_INT(s0.begin[0], b);
    CHECK_INT(s0.end[0], e);
    coh_gpt_layer_range(m, 0, &b, &e);
    CHECK_INT(s1.begin[1], b);
    CHECK_INT(s0.params + s1.params, coh_gpt_param_count(m) + wte);
    /* more virtual stages than blocks only with the ends alone */
    pc.train.model.layers = 2;
    pc.par.stage_layers = "embeddings,0,1,head";
    CHECK_OK(coh_par_pipe_stage(&pc, 0, &s0));
    pc.par.stage_layers = NULL;
    pc.par.virtual_stages = 4;
    CHECK_FAILS(coh_par_pipe_stage(&pc, 0, &s0), COH_ERR_INVALID, "8 virtual stages for 2");
}

/* The engine run as chunks holding no block (embeddings alone, then every block, then the head
 * alone) and as chunks splitting at block 0 and L without their ends computes the whole
 * model's loss and gradients bit for bit; a chunk holding nothing is refused. */
static void test_engine_empty_chunks(void)
{
    enum { B = 2, T = 8, C = 16 };
    static const coh_gpt_config cfg = {3, 2, C, 37, T, 0, 0};
    coh_gpt *whole, *ch;
    CHECK_OK(coh_gpt_create(&cfg, B, T, &whole));
    CHECK_OK(coh_gpt_create(&cfg, B, T, &ch));
    coh_gpt_init_weights(whole, 3);
    coh_gpt_init_weights(ch, 3);
    CHECK_OK(coh_gpt_set_slots(ch, 1));
    coh_gpt_zero_grad(whole);
    coh_gpt_zero_grad(ch);
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7 + 1) % cfg.vocab;
        tgt[i] = (i * 5 + 2) % cfg.vocab;
    }
    static float x0[B * T * C], x1[B * T * C], x2[B * T * C], d0[B * T * C], d1[B * T * C],
        d2[B * T * C];
    float lw, lc;
    const int E = COH_GPT_EMBEDDINGS, H = COH_GPT_HEAD;
    CHECK_OK(coh_gpt_step(whole, tok, tgt, B, T, 0.5f, &lw));
    /* embeddings | blocks 0..1 | block 2 | head */
    CHECK_OK(coh_gpt_chunk_forward(ch, 0, 0, 0, E, tok, NULL, NULL, B, T, 0.5f, x0, NULL));
    CHECK_OK(coh_gpt_chunk_forward(ch, 0, 0, 2, 0, NULL, x0, NULL, B, T, 0.5f, x1, NULL));
    CHECK_OK(coh_gpt_chunk_forward(ch, 0, 2, 3, 0, NULL, x1, NULL, B, T, 0.5f, x2, NULL));
    CHECK_OK(coh_gpt_chunk_forward(ch, 0, 3, 3, H, NULL, x2, tgt, B, T, 0.5f, NULL, &lc));
    CHECK_OK(coh_gpt_chunk_backward(ch, 0, 3, 3, H, NULL, B, T, d2));
    CHECK_OK(coh_gpt_chunk_backward(ch, 0, 2, 3, 0, d2, B, T, d1));
    CHECK_OK(coh_gpt_chunk_backward(ch, 0, 0, 2, 0, d1, B, T, d0));
    CHECK_OK(coh_gpt_chunk_backward(ch, 0, 0, 0, E, d0, B, T, NULL));
    CHECK(lw == lc);
    size_t n;
    float *gw = coh_gpt_grads(whole, &n), *gc = coh_gpt_grads(ch, NULL);
    CHECK(!memcmp(gw, gc, n * sizeof *gw));
    float big = 0.0f;
    for (size_t i = 0; i < n; i++)
        big = fabsf(gw[i]) > big ? fabsf(gw[i]) : big;
    CHECK(big > 0.0f);
    CHECK_FAILS(coh_gpt_chunk_forward(ch, 0, 1, 1, 0, NULL, x0, NULL, B, T, 0.5f, x1, NULL),
                COH_ERR_INVALID, "invalid layer range 1..0");
    CHECK_FAILS(coh_gpt_chunk_forward(ch, 0, 1, 2, E, tok, NULL, NULL, B, T, 0.5f, x1, NULL),
                COH_ERR_INVALID, "the embeddings come before block 0");
    CHECK_FAILS(coh_gpt_chunk_forward(ch, 0, 1, 2, H, NULL, x0, tgt, B, T, 0.5f, NULL, &lc),
                COH_ERR_INVALID, "the head after block 2");
    CHECK_FAILS(coh_gpt_chunk_forward(ch, 0, 0, 1, 4, tok, NULL, NULL, B, T, 0.5f, x1, NULL),
                COH_ERR_INVALID, "invalid chunk ends '4'");
    CHECK_FAILS(coh_gpt_stage_forward(ch, 0, 0, 0, tok, NULL, NULL, B, T, 0.5f, x1, NULL),
                COH_ERR_INVALID, "invalid layer range 0..-1");
    coh_gpt_destroy(whole);
    coh_gpt_destroy(ch);
}

/* Issue 11's figure again, with the head divisible: split by vocabulary into head shards, each
 * a pipeline unit after the blocks, interleaved v = 2 at m = 2 no longer has to run both
 * microbatches' whole head on one device, and its chosen split simulates well below the chain
 * every split with the head whole has (12 + 2 x 29.5 + 24 = 94.9 block forwards), and below
 * 1F1B's best, which may also shard the head. The chosen split is the best of every split of
 * the chain into 4 chunks for 1..4 shards (enumerated). */
static double best_chain(const pipe_chunk_cost *c, const coh_pipe_shape *shape, int L, int n,
                         int *b, int i)
{
    int u = shape->stages * shape->virtual_stages;
    if (i == u) {
        b[u] = L + n;
        return b[u] - b[u - 1] >= 1 ? simulate_chain(c, shape, L, n, b) : INFINITY;
    }
    double best = INFINITY;
    for (int x = b[i - 1] + (i - 1 > 0); x < L + n; x++) {
        b[i] = x;
        double t = best_chain(c, shape, L, n, b, i + 1);
        best = t < best ? t : best;
    }
    return best;
}

static void test_head_shards_at_m2(void)
{
    pipe_chunk_cost c;
    pipe_estimate_costs(&GPT2_SMALLISH, 256, &c);
    int L = 12, bi[5], b1[3], ni, n1, bt[5], nt;
    coh_pipe_shape inter = {COH_SCHED_INTERLEAVED, 2, 2, 2}, f1b = {COH_SCHED_1F1B, 2, 2, 1};
    double ti, t1, bal, u = c.block_fwd;
    double chain = L * (c.block_fwd + c.block_bwd) + c.embed_fwd + c.embed_bwd +
                   2 * (c.head_fwd + c.head_bwd);
    CHECK_OK(pipe_choose_split(&c, L, &inter, PIPE_AUTO_HEAD_SHARDS, bi, &ni, &ti, &bal));
    CHECK_OK(pipe_choose_split(&c, L, &f1b, PIPE_AUTO_HEAD_SHARDS, b1, &n1, &t1, &bal));
    printf("head shards: interleaved %d shards %d,%d,%d,%d,%d step %.2f; 1f1b %d shards %d,%d,%d "
           "step %.2f; the chain with the head whole %.2f (block forwards)\n", ni, bi[0], bi[1],
           bi[2], bi[3], bi[4], ti / u, n1, b1[0], b1[1], b1[2], t1 / u, chain / u);
    CHECK(ni >= 2);
    CHECK_INT(bi[4], L + ni);
    CHECK(bi[3] > L && bi[3] < L + ni); /* the last chunk holds the last shard(s) only */
    CHECK(bi[2] <= L);                  /* and the chunk before it the first shard */
    CHECK(ti < chain * 0.9);            /* shorter than any split with the head whole */
    CHECK(ti < t1 * 0.9);               /* and than 1F1B's best, sharded or not */
    CHECK_NEAR(ti, simulate_chain(&c, &inter, L, ni, bi), 1e-12);
    /* the best there is for 1..4 shards, by enumeration */
    double best = INFINITY;
    for (int n = 1; n <= PIPE_AUTO_HEAD_SHARDS; n++) {
        int b[65] = {0};
        double t = best_chain(&c, &inter, L, n, b, 1);
        best = t < best ? t : best;
    }
    printf("interleaved: chosen %.4f, best of every split %.4f\n", ti / u, best / u);
    CHECK(ti <= best * (1 + 1e-9));
    /* the trainer's split is this one, on every rank alike */
    par_pipe_split_chain(&GPT2_SMALLISH, 256, &inter, 0, bt, &nt);
    CHECK_INT(nt, ni);
    CHECK(!memcmp(bt, bi, sizeof bt));
    /* recomputing the shards' logits costs a product more, and still beats the chain */
    c.head_recompute = 1;
    CHECK_OK(pipe_choose_split(&c, L, &inter, PIPE_AUTO_HEAD_SHARDS, bt, &nt, &ti, &bal));
    printf("recomputed logits: interleaved %d shards, step %.2f\n", nt, ti / u);
    CHECK(nt >= 2 && ti < chain * 0.95);
    /* one shard allowed: the head whole, the old figure */
    c.head_recompute = 0;
    CHECK_OK(pipe_choose_split(&c, L, &inter, 1, bt, &nt, &ti, &bal));
    CHECK_INT(nt, 1);
    CHECK_NEAR(ti, chain, 1e-9);
}

static void test_parse_shards(void)
{
    int b[6], n;
    CHECK_OK(coh_pipe_parse_split("0-5,6-11,head:0/2,head:1/2", 12, 4, b, &n));
    CHECK(n == 2 && b[0] == 0 && b[1] == 6 && b[2] == 12 && b[3] == 13 && b[4] == 14);
    CHECK_OK(coh_pipe_parse_split("0-3,4-9,10-11+head:0/2,head:1/2", 12, 4, b, &n));
    CHECK(n == 2 && b[2] == 10 && b[3] == 13 && b[4] == 14);
    CHECK_OK(coh_pipe_parse_split("0-11+head:0/4,head:1-3/4", 12, 2, b, &n));
    CHECK(n == 4 && b[1] == 13 && b[2] == 16);
    CHECK_OK(coh_pipe_parse_split("embeddings,0-11+head:0-1/3,head:2/3", 12, 3, b, &n));
    CHECK(n == 3 && b[1] == 0 && b[2] == 14 && b[3] == 15);
    CHECK_OK(coh_pipe_parse_layers("0-5,6-11,head:0/2,head:1/2", 12, 4, b));
    CHECK(b[2] == 12 && b[3] == 12 && b[4] == 12); /* over blocks: shard chunks hold none */
    /* without shards: the head whole, one unit after the blocks */
    CHECK_OK(coh_pipe_parse_split("0-5,6-11", 12, 2, b, &n));
    CHECK(n == 1 && b[1] == 6 && b[2] == 13);
    CHECK_OK(coh_pipe_parse_split("0-11,head", 12, 2, b, &n));
    CHECK(n == 1 && b[1] == 12 && b[2] == 13);
    /* bad splits: each refused naming what is wrong */
    static const struct {
        const char *text;
        int stages;
        const char *says;
    } bad[] = {
        {"0-5,6-11,head:1/2,head:0/2", 4,
         "holds head shards 1-1 of 2, but it must start at shard 0"},
        {"0-5,6-11,head:0/2,head:1/3", 4,
         "head shards of '3'"},
        {"0-11,head:0/1", 2,
         "head shards of '1'"},
        {"0-11,head:0/17", 2,
         "head shards of '17'"},
        {"0-5,head:0/2,6-11,head:1/2", 4,
         "head shard 0 comes before blocks 6..11"},
        {"0-4+head:0/2,5-11,head:1/2", 3,
         "only the stage ending at block 11 goes on to the head"},
        {"0-11+head:1/2,head:0/2", 2,
         "only the stage ending at block 11 goes on to the head, from shard 0"},
        {"0-11,head:0/2", 2,
         "2 stage(s) covering blocks 0..11 and part of the head's shards"},
        {"0-11,head:0/2,head:1/2,head", 4,
         "'head' ends the stages"},
        {"0-11,head:0/2,head:0-1/2", 3,
         "must start at shard 1"},
        {"0-11,head:/2", 2,
         "expected block ranges"},
        {"0-11,head:0/2x", 2,
         "expected block ranges"},
        {"0-11+,head:1/2", 2,
         "expected a block range like 0-2, or blocks then head shards"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_FAILS(coh_pipe_parse_split(bad[i].text, 12, bad[i].stages, b, &n), COH_ERR_INVALID,
                    bad[i].says);
}

/* A stage of head shards holds the wte copy (not the final LayerNorm unless it runs shard 0);
 * the stage running shard 0 holds the final LayerNorm; every parameter once, wte twice. */
static void test_shard_ranges(void)
{
    coh_par_config pc = interleaved_2x2();
    const coh_gpt_config *m = &pc.train.model;
    size_t wte = (size_t)m->vocab * m->dim, b, e, lnf_b, lnf_e;
    coh_gpt_layer_range(m, m->layers, &lnf_b, &lnf_e);
    coh_pipe_stage s0, s1;
    char text[64];
    pc.par.stage_layers = "0-5,6-11,head:0/2,head:1/2";
    CHECK_OK(coh_par_pipe_stage(&pc, 0, &s0));
    CHECK_OK(coh_par_pipe_stage(&pc, 1, &s1));
    CHECK_STR(coh_pipe_stage_blocks(&s0, text, sizeof text), "0-5,head:0/2");
    CHECK_STR(coh_pipe_stage_blocks(&s1, text, sizeof text), "6-11,head:1/2");
    CHECK(s0.head && s1.head && !s0.tied_copy && s1.tied_copy);
    CHECK(s0.head_shards == 2 && s0.head_lo[1] == 0 && s0.head_hi[1] == 1);
    CHECK(s1.head_lo[1] == 1 && s1.head_hi[1] == 2 && s1.head_lo[0] == 0 && s1.head_hi[0] == 0);
    /* stage 0: embeddings..block 5, the final LayerNorm */
    CHECK_INT(s0.nranges, 2);
    CHECK_INT(s0.begin[1], lnf_b);
    CHECK_INT(s0.end[1], lnf_e);
    /* stage 1: its wte copy, blocks 6..11 (no final LayerNorm) */
    CHECK_INT(s1.nranges, 2);
    CHECK(s1.begin[0] == 0 && s1.end[0] == wte);
    coh_gpt_layer_range(m, 6, &b, &e);
    CHECK_INT(s1.begin[1], b);
    coh_gpt_layer_range(m, 11, &b, &e);
    CHECK_INT(s1.end[1], e);
    CHECK_INT(s0.params + s1.params, coh_gpt_param_count(m) + wte);
    /* the default at m = 2 shards the head over both stages */
    pc.par.stage_layers = NULL;
    CHECK_OK(coh_par_pipe_stage(&pc, 0, &s0));
    CHECK_OK(coh_par_pipe_stage(&pc, 1, &s1));
    printf("default: stage 0 %s, stage 1 %s\n", coh_pipe_stage_blocks(&s0, text, 32),
           coh_pipe_stage_blocks(&s1, text + 32, 32));
    CHECK(s0.head_shards > 1 && s0.head && s1.head);
    CHECK_INT(s0.params + s1.params, coh_gpt_param_count(m) + wte);
    /* tensor parallelism already splits the vocabulary: named shards are refused */
    pc.par.stage_layers = "0-5,6-11,head:0/2,head:1/2";
    pc.par.tp = 2;
    coh_par_config_apply(&pc);
    CHECK_FAILS(coh_par_pipe_stage(&pc, 0, &s0), COH_ERR_INVALID,
                "which tensor parallelism (tp 2) already splits");
}

/* The engine with its head in 3 shards run as chunks (blocks | shards 0-1 | shard 2) computes the
 * whole model's loss and gradients to float rounding (an online log-sum-exp sums in another
 * order), and keeping the shards' logits or recomputing them gives the same bits. */
static void test_engine_shards(void)
{
    enum { B = 2, T = 8, C = 16 };
    static const coh_gpt_config cfg = {3, 2, C, 37, T, 0, 0};
    coh_gpt *whole, *keep, *again;
    CHECK_OK(coh_gpt_create(&cfg, B, T, &whole));
    CHECK_OK(coh_gpt_create(&cfg, B, T, &keep));
    CHECK_OK(coh_gpt_create(&cfg, B, T, &again));
    coh_gpt *ch[2] = {keep, again};
    int held[3] = {1, 1, 1};
    coh_gpt_init_weights(whole, 3);
    coh_gpt_zero_grad(whole);
    for (int i = 0; i < 2; i++) {
        coh_gpt_init_weights(ch[i], 3);
        CHECK_OK(coh_gpt_set_slots(ch[i], 1));
        CHECK_OK(coh_gpt_set_head_shards(ch[i], 3, held, i == 0));
        coh_gpt_zero_grad(ch[i]);
    }
    CHECK_INT(coh_gpt_chunk_message(keep, B, T), B * T * C + 3 * B * T);
    int32_t tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) {
        tok[i] = (i * 7 + 1) % cfg.vocab;
        tgt[i] = (i * 5 + 2) % cfg.vocab; /* targets in every shard */
    }
    static float x0[B * T * (C + 3)], x1[B * T * (C + 3)], d0[B * T * (C + 3)],
        d1[B * T * (C + 3)];
    float lw, lc[2];
    const int E = COH_GPT_EMBEDDINGS;
    CHECK_OK(coh_gpt_step(whole, tok, tgt, B, T, 0.5f, &lw));
    for (int i = 0; i < 2; i++) {
        CHECK_OK(coh_gpt_shards_forward(ch[i], 0, 0, 3, E, 0, 0, tok, NULL, NULL, B, T, 0.5f, x0,
                                        NULL));
        CHECK_OK(coh_gpt_shards_forward(ch[i], 0, 3, 3, 0, 0, 2, NULL, x0, tgt, B, T, 0.5f, x1,
                                        NULL));
        CHECK_OK(coh_gpt_shards_forward(ch[i], 0, 3, 3, 0, 2, 3, NULL, x1, tgt, B, T, 0.5f, NULL,
                                        &lc[i]));
        CHECK_OK(coh_gpt_shards_backward(ch[i], 0, 3, 3, 0, 2, 3, NULL, B, T, d1));
        CHECK_OK(coh_gpt_shards_backward(ch[i], 0, 3, 3, 0, 0, 2, d1, B, T, d0));
        CHECK_OK(coh_gpt_shards_backward(ch[i], 0, 0, 3, E, 0, 0, d0, B, T, NULL));
    }
    printf("sharded head: loss %.9g, whole %.9g\n", lc[0], lw);
    CHECK(fabsf(lc[0] - lw) <= 1e-6f * fabsf(lw));
    CHECK(lc[0] == lc[1]);
    size_t n;
    float *gw = coh_gpt_grads(whole, &n), *gk = coh_gpt_grads(keep, NULL);
    float *ga = coh_gpt_grads(again, NULL);
    CHECK(!memcmp(gk, ga, n * sizeof *gk)); /* kept or recomputed logits: the same bits */
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        diff += ((double)gk[i] - gw[i]) * ((double)gk[i] - gw[i]);
        norm += (double)gw[i] * gw[i];
    }
    printf("sharded head: gradients' relative L2 difference %.3g\n", sqrt(diff / norm));
    CHECK(norm > 0.0 && sqrt(diff / norm) < 1e-5);
    /* refused: a shard past 0 after blocks, shards out of range, shards twice */
    CHECK_FAILS(coh_gpt_shards_forward(keep, 0, 2, 3, 0, 1, 2, NULL, x0, tgt, B, T, 0.5f, x1,
                                       NULL), COH_ERR_INVALID, "head shard 1 after blocks");
    CHECK_FAILS(coh_gpt_shards_forward(keep, 0, 3, 3, 0, 2, 4, NULL, x0, tgt, B, T, 0.5f, x1,
                                       NULL), COH_ERR_INVALID, "invalid head shards 2..3");
    CHECK_FAILS(coh_gpt_set_head_shards(keep, 2, held, 1), COH_ERR_INVALID, "once");
    coh_gpt_destroy(whole);
    coh_gpt_destroy(keep);
    coh_gpt_destroy(again);
}

int main(void)
{
    RUN(test_head_alone_at_m2);
    RUN(test_choice_against_enumeration);
    RUN(test_choice_bounds);
    RUN(test_parse_ends);
    RUN(test_stage_ranges);
    RUN(test_engine_empty_chunks);
    RUN(test_head_shards_at_m2);
    RUN(test_parse_shards);
    RUN(test_shard_ranges);
    RUN(test_engine_shards);
    return CHECK_REPORT();
}
