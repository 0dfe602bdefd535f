/* test_pipeline_schedule.c: the pipeline schedules proved from their action lists alone: for
 * every shape with p <= 8, m <= 32, v <= 4, sends and receives pair up, nothing deadlocks, each
 * (microbatch, chunk) is forwarded then backwarded once per stage, activations in flight stay at
 * each schedule's bound, and the simulated bubble is the paper's; small timelines are compared
 * with ones drawn by hand from the published figures; every refusal is checked. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/pipeline.h"
#include "train/parallel/pipeline_int.h"

#define MAX_P 8
#define MAX_M 32
#define MAX_V 4

typedef struct lists {
    coh_pipe_shape s;
    coh_pipe_action *a[MAX_P];
    int n[MAX_P];
} lists;

static int build(lists *l, coh_schedule kind, int p, int m, int v)
{
    memset(l, 0, sizeof *l);
    l->s = (coh_pipe_shape){kind, p, m, v};
    for (int i = 0; i < p; i++)
        if (coh_pipeline_schedule(&l->s, i, &l->a[i], &l->n[i]) != COH_OK)
            return 0;
    return 1;
}

static void release(lists *l)
{
    for (int i = 0; i < MAX_P; i++)
        free(l->a[i]);
}

/* ---- the lists' own properties -------------------------------------------------------------- */

/* Virtual stage of a stage's chunk, and the neighbouring stage a message goes to or comes from. */
static int vstage(const lists *l, int stage, int chunk) { return chunk * l->s.stages + stage; }

/* Index of a message by kind (activation 0, gradient 1), microbatch and sending virtual stage. */
static int msg(const lists *l, int grad, int mb, int from)
{
    return (grad * l->s.microbatches + mb) * l->s.stages * l->s.virtual_stages + from;
}

/* The message a send or receive is about, checking that its peer is the neighbour's stage. */
static int msg_of(const lists *l, int stage, const coh_pipe_action *a)
{
    int p = l->s.stages, u = vstage(l, stage, a->chunk), nv = p * l->s.virtual_stages;
    int grad = a->op == COH_PIPE_SEND_GRAD || a->op == COH_PIPE_RECV_GRAD;
    int send = a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD;
    int other = grad == send ? u - 1 : u + 1; /* act goes up, grad comes down */
    CHECK(other >= 0 && other < nv);
    if (other < 0 || other >= nv)
        return -1;
    CHECK_INT(a->peer, other % p);
    return msg(l, grad, a->mb, send ? u : other);
}

/* Every message between neighbouring virtual stages is sent exactly once and received exactly
 * once, on the stages that hold them. */
static void check_pairs(const lists *l)
{
    int nv = l->s.stages * l->s.virtual_stages, nmsg = 2 * l->s.microbatches * nv;
    int *sent = calloc((size_t)nmsg, sizeof *sent), *got = calloc((size_t)nmsg, sizeof *got);
    for (int s = 0; s < l->s.stages; s++)
        for (int i = 0; i < l->n[s]; i++) {
            const coh_pipe_action *a = &l->a[s][i];
            if (a->op == COH_PIPE_FORWARD || a->op == COH_PIPE_BACKWARD) {
                CHECK_INT(a->peer, -1);
                continue;
            }
            int k = msg_of(l, s, a);
            if (k < 0)
                continue;
            if (a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD)
                sent[k]++;
            else
                got[k]++;
        }
    for (int mb = 0; mb < l->s.microbatches; mb++)
        for (int u = 0; u < nv; u++) {
            CHECK_INT(sent[msg(l, 0, mb, u)], u < nv - 1);
            CHECK_INT(got[msg(l, 0, mb, u)], u < nv - 1);
            CHECK_INT(sent[msg(l, 1, mb, u)], u > 0);
            CHECK_INT(got[msg(l, 1, mb, u)], u > 0);
        }
    free(sent);
    free(got);
}

/* Receives sit right before the compute that needs them, sends right after the one that
 * produced them. */
static void check_placement(const lists *l, int s)
{
    for (int i = 0; i < l->n[s]; i++) {
        const coh_pipe_action *a = &l->a[s][i];
        int before = a->op == COH_PIPE_RECV_ACT || a->op == COH_PIPE_RECV_GRAD;
        int after = a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD;
        if (!before && !after)
            continue;
        int j = before ? i + 1 : i - 1;
        int fwd = a->op == COH_PIPE_RECV_ACT || a->op == COH_PIPE_SEND_ACT;
        CHECK(j >= 0 && j < l->n[s]);
        if (j < 0 || j >= l->n[s])
            continue;
        CHECK_INT(l->a[s][j].op, fwd ? COH_PIPE_FORWARD : COH_PIPE_BACKWARD);
        CHECK_INT(l->a[s][j].mb, a->mb);
        CHECK_INT(l->a[s][j].chunk, a->chunk);
    }
}

/* Each (microbatch, chunk) forwarded once and backwarded once, backward after forward; returns
 * the most held at once. */
static int check_compute(const lists *l, int s)
{
    int m = l->s.microbatches, v = l->s.virtual_stages, held = 0, peak = 0;
    int state[MAX_M * MAX_V] = {0};
    for (int i = 0; i < l->n[s]; i++) {
        const coh_pipe_action *a = &l->a[s][i];
        CHECK(a->mb >= 0 && a->mb < m && a->chunk >= 0 && a->chunk < v);
        if (a->op != COH_PIPE_FORWARD && a->op != COH_PIPE_BACKWARD)
            continue;
        int *st = &state[a->mb * v + a->chunk], fwd = a->op == COH_PIPE_FORWARD;
        CHECK_INT(*st, fwd ? 0 : 1);
        *st += 1;
        held += fwd ? 1 : -1;
        peak = held > peak ? held : peak;
    }
    for (int k = 0; k < m * v; k++)
        CHECK_INT(state[k], 2);
    return peak;
}

/* The bound each schedule keeps: one for naive, all m for GPipe, p - s for 1F1B (Narayanan et
 * al. 2021), Megatron's warm-up (p - s - 1) * 2 + (v - 1) * p plus the forward in progress for
 * interleaved; never more than the m * v there are. The lists reach it exactly. */
static int expected_peak(const coh_pipe_shape *s, int stage)
{
    int p = s->stages, m = s->microbatches, v = s->virtual_stages, bound;
    switch (s->kind) {
    case COH_SCHED_NAIVE: bound = 1; break;
    case COH_SCHED_GPIPE: bound = m; break;
    case COH_SCHED_1F1B: bound = p - stage; break;
    default: bound = (p - stage - 1) * 2 + (v - 1) * p + 1; break;
    }
    return bound < m * v ? bound : m * v;
}

/* ---- an independent run of the lists -------------------------------------------------------- */

/* Sweeps the stages in turn, each going as far as its receives allow, until none moves; compute
 * takes tf or tb per chunk. Returns the makespan, or -1 when some stage never finishes. */
static double replay(const lists *l, double tf, double tb)
{
    int p = l->s.stages, nmsg = 2 * l->s.microbatches * p * l->s.virtual_stages;
    double *sent = malloc((size_t)nmsg * sizeof *sent), clock[MAX_P] = {0}, end = 0;
    int pc[MAX_P] = {0}, moved = 1, done = 1;
    for (int k = 0; k < nmsg; k++)
        sent[k] = -1;
    while (moved) {
        moved = 0;
        for (int s = 0; s < p; s++)
            for (; pc[s] < l->n[s]; pc[s]++, moved = 1) {
                const coh_pipe_action *a = &l->a[s][pc[s]];
                if (a->op == COH_PIPE_FORWARD || a->op == COH_PIPE_BACKWARD) {
                    clock[s] += a->op == COH_PIPE_FORWARD ? tf : tb;
                    continue;
                }
                int k = msg_of(l, s, a);
                if (k < 0)
                    break;
                if (a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD)
                    sent[k] = clock[s];
                else if (sent[k] < 0)
                    break;
                else if (sent[k] > clock[s])
                    clock[s] = sent[k];
            }
    }
    for (int s = 0; s < p; s++) {
        done &= pc[s] == l->n[s];
        end = clock[s] > end ? clock[s] : end;
    }
    free(sent);
    return done ? end : -1;
}

/* ---- every shape ---------------------------------------------------------------------------- */

/* Bubble fraction: idle time of a stage over its compute time. The lists give it for any
 * t_fwd and t_bwd; the shapes are checked with t_bwd = 2 t_fwd, as in the papers, and t_bwd =
 * t_fwd. */
static double expected_bubble(const coh_pipe_shape *s)
{
    double p = s->stages, m = s->microbatches, v = s->virtual_stages;
    switch (s->kind) {
    case COH_SCHED_NAIVE: return p - 1; /* each microbatch crosses p stages alone */
    case COH_SCHED_INTERLEAVED: return (p - 1) / (v * m);
    default: return (p - 1) / m;
    }
}

static void check_simulation(const lists *l, double tb)
{
    const coh_pipe_shape *s = &l->s;
    coh_pipe_sim sim;
    coh_pipe_stage_stats st[MAX_P];
    double v = s->virtual_stages;
    CHECK_OK(coh_pipeline_simulate(s, 1.0, tb, &sim, st));
    double ideal = s->microbatches * (1.0 + tb), makespan = replay(l, 1.0 / v, tb / v);
    CHECK(makespan > 0); /* no deadlock */
    CHECK_NEAR(sim.makespan, makespan, 1e-9);
    CHECK_NEAR(sim.ideal, ideal, 1e-9);
    CHECK_NEAR(sim.bubble, expected_bubble(s), 1e-9);
    CHECK_NEAR(sim.makespan, ideal * (1 + expected_bubble(s)), 1e-9);
    int peak = 0;
    for (int i = 0; i < s->stages; i++) {
        CHECK_NEAR(st[i].busy, ideal, 1e-9);
        CHECK_NEAR(st[i].idle, sim.makespan - st[i].busy, 1e-9);
        CHECK(st[i].finish <= sim.makespan);
        CHECK_INT(st[i].peak_in_flight, expected_peak(s, i));
        peak = st[i].peak_in_flight > peak ? st[i].peak_in_flight : peak;
    }
    CHECK_INT(sim.peak_in_flight, peak);
}

static void check_shape(coh_schedule kind, int p, int m, int v)
{
    lists l;
    CHECK(build(&l, kind, p, m, v));
    if (l.a[p - 1]) {
        check_pairs(&l);
        for (int s = 0; s < p; s++) {
            int peak;
            check_placement(&l, s);
            CHECK_INT(check_compute(&l, s), expected_peak(&l.s, s));
            CHECK_OK(coh_pipeline_peak_in_flight(&l.s, s, &peak));
            CHECK_INT(peak, expected_peak(&l.s, s));
        }
        check_simulation(&l, 2.0);
        check_simulation(&l, 1.0);
    }
    release(&l);
}

static int valid(coh_schedule kind, int p, int m, int v)
{
    if (kind != COH_SCHED_INTERLEAVED)
        return v == 1;
    return p >= 2 && m % p == 0;
}

static void test_every_shape(void)
{
    const coh_schedule kinds[] = {COH_SCHED_NAIVE, COH_SCHED_GPIPE, COH_SCHED_1F1B,
                                  COH_SCHED_INTERLEAVED};
    int shapes = 0, failed = 0;
    for (int k = 0; k < 4; k++)
        for (int p = 1; p <= MAX_P; p++)
            for (int m = 1; m <= MAX_M; m++)
                for (int v = 1; v <= MAX_V; v++) {
                    if (!valid(kinds[k], p, m, v) || shapes++ < 0 || failed >= 10)
                        continue;
                    int before = check_failures;
                    check_shape(kinds[k], p, m, v);
                    if (check_failures != before && ++failed)
                        fprintf(stderr, "  in %s p=%d m=%d v=%d\n", coh_schedule_name(kinds[k]),
                                p, m, v);
                }
    CHECK_INT(shapes, 3 * MAX_P * MAX_M + (16 + 10 + 8 + 6 + 5 + 4 + 4) * MAX_V);
}

/* ---- pictures drawn by hand ----------------------------------------------------------------- */

static void check_drawing(coh_schedule kind, int p, int m, int v, const char *expect)
{
    coh_pipe_shape s = {kind, p, m, v};
    char *text = NULL;
    CHECK_OK(coh_pipeline_draw(&s, 1, 2, &text));
    CHECK_STR(text, expect);
    free(text);
}

/* Forward one cell, backward two, as in Narayanan et al. 2021, figs. 3 and 4. Two stages, two
 * microbatches: GPipe's last stage starts backward as soon as its forwards are done, and stage 0
 * waits for its gradient; 1F1B's stage 0 warms up with one forward and starts B0 as soon as
 * stage 1 returns it. */
static void test_drawings_small(void)
{
    check_drawing(COH_SCHED_NAIVE, 2, 2, 1,
                  "stage 0: F0 .  .  .  B0 -- F1 .  .  .  B1 --\n"
                  "stage 1: .  F0 B0 -- .  .  .  F1 B1 -- .  .\n");
    check_drawing(COH_SCHED_GPIPE, 2, 2, 1,
                  "stage 0: F0 F1 .  .  .  B0 -- B1 --\n"
                  "stage 1: .  F0 F1 B0 -- B1 -- .  .\n");
    check_drawing(COH_SCHED_1F1B, 2, 2, 1,
                  "stage 0: F0 F1 .  .  B0 -- .  B1 --\n"
                  "stage 1: .  F0 B0 -- F1 B1 -- .  .\n");
    /* virtual stages 0a, 1a, 0b, 1b; stage 0 warms up with all four chunk forwards (Megatron's
     * count 2 + 2 reaches m v = 4), stage 1 with two */
    check_drawing(COH_SCHED_INTERLEAVED, 2, 2, 2,
                  "stage 0: F0a F1a F0b F1b .   .   B0b --- .   B1b --- B0a --- B1a ---\n"
                  "stage 1: .   F0a F1a F0b B0b --- F1b B1b --- B0a --- B1a --- .   .\n");
}

/* Narayanan et al. 2021, fig. 4 (top): four devices, eight microbatches, 1F1B. */
static void test_drawing_megatron_fig4(void)
{
    check_drawing(COH_SCHED_1F1B, 4, 8, 1,
                  "stage 0: F0 F1 F2 F3 .  .  .  .  .  .  B0 -- F4 B1 -- F5 B2 -- F6 B3 -- F7 "
                  "B4 -- .  B5 -- .  B6 -- .  B7 --\n"
                  "stage 1: .  F0 F1 F2 .  .  .  .  B0 -- F3 B1 -- F4 B2 -- F5 B3 -- F6 B4 -- "
                  "F7 B5 -- .  B6 -- .  B7 -- .  .\n"
                  "stage 2: .  .  F0 F1 .  .  B0 -- F2 B1 -- F3 B2 -- F4 B3 -- F5 B4 -- F6 B5 "
                  "-- F7 B6 -- .  B7 -- .  .  .  .\n"
                  "stage 3: .  .  .  F0 B0 -- F1 B1 -- F2 B2 -- F3 B3 -- F4 B4 -- F5 B5 -- F6 "
                  "B6 -- F7 B7 -- .  .  .  .  .  .\n");
}

/* ---- the simulator refuses broken lists ----------------------------------------------------- */

static coh_status simulate_two(coh_pipe_action *s0, int n0, coh_pipe_action *s1, int n1)
{
    coh_pipe_action *list[2] = {s0, s1};
    int count[2] = {n0, n1};
    pipe_sim_in in = {2, 1, 1, list, count, 1.0, 2.0, NULL, NULL, NULL, NULL};
    coh_pipe_sim sim;
    return pipe_simulate(&in, &sim, NULL);
}

static void test_simulator_refusals(void)
{
    coh_pipe_action f = {COH_PIPE_FORWARD, 0, 0, -1}, b = {COH_PIPE_BACKWARD, 0, 0, -1};
    coh_pipe_action sa = {COH_PIPE_SEND_ACT, 0, 0, 1}, ra = {COH_PIPE_RECV_ACT, 0, 0, 0};
    coh_pipe_action sg = {COH_PIPE_SEND_GRAD, 0, 0, 0}, rg = {COH_PIPE_RECV_GRAD, 0, 0, 1};
    coh_pipe_action good0[] = {f, sa, rg, b}, good1[] = {ra, f, b, sg};
    CHECK_OK(simulate_two(good0, 4, good1, 4));
    /* stage 1 wants the gradient back before it sends the activation on: each waits */
    coh_pipe_action dead0[] = {rg, f, sa, b}, dead1[] = {ra, f, b, sg};
    CHECK_FAILS(simulate_two(dead0, 4, dead1, 4), COH_ERR_INVALID,
                "stage 0 action 0 (recv_grad mb 0 chunk 0 peer 1): deadlock");
    coh_pipe_action lost1[] = {ra, f, b};
    CHECK_FAILS(simulate_two(good0, 4, lost1, 3), COH_ERR_INVALID, "deadlock");
    coh_pipe_action resent1[] = {ra, f, b, sg, sg};
    CHECK_FAILS(simulate_two(good0, 4, resent1, 5), COH_ERR_INVALID, "sent twice");
    coh_pipe_action extra1[] = {ra, f, sa};
    CHECK_FAILS(simulate_two(good0, 2, extra1, 3), COH_ERR_INVALID, "no neighbour on that side");
    coh_pipe_action wrong0[] = {f, {COH_PIPE_SEND_ACT, 0, 0, 0}, rg, b};
    CHECK_FAILS(simulate_two(wrong0, 4, good1, 4), COH_ERR_INVALID, "wrong peer");
    coh_pipe_action early1[] = {ra, b, f, sg};
    CHECK_FAILS(simulate_two(good0, 4, early1, 4), COH_ERR_INVALID, "backward without its forward");
    coh_pipe_action twice1[] = {ra, f, f, b, sg};
    CHECK_FAILS(simulate_two(good0, 4, twice1, 5), COH_ERR_INVALID, "forwarded twice");
    coh_pipe_action deaf0[] = {f, sa, b}, mute1[] = {ra, f, b, sg};
    CHECK_FAILS(simulate_two(deaf0, 3, mute1, 4), COH_ERR_INVALID,
                "the gradient of microbatch 0 sent by virtual stage 1 is never received");
    coh_pipe_action range0[] = {{COH_PIPE_FORWARD, 1, 0, -1}};
    CHECK_FAILS(simulate_two(range0, 1, good1, 0), COH_ERR_INVALID, "out of range");
}

/* ---- refusals ------------------------------------------------------------------------------- */

static coh_status schedule_of(coh_schedule kind, int p, int m, int v, int stage)
{
    coh_pipe_shape s = {kind, p, m, v};
    coh_pipe_action *a = NULL;
    int n = 0;
    coh_status st = coh_pipeline_schedule(&s, stage, &a, &n);
    free(a);
    return st;
}

static void test_shape_refusals(void)
{
    const coh_status E = COH_ERR_INVALID;
    CHECK_FAILS(schedule_of(COH_SCHED_1F1B, 0, 4, 1, 0), E,
                "invalid pipeline stages '0': need 1 .. 1024");
    CHECK_FAILS(schedule_of(COH_SCHED_1F1B, 1025, 4, 1, 0), E, "invalid pipeline stages '1025'");
    CHECK_FAILS(schedule_of(COH_SCHED_GPIPE, 4, 0, 1, 0), E,
                "invalid microbatches '0': need 1 .. 65536");
    CHECK_FAILS(schedule_of(COH_SCHED_GPIPE, 4, 65537, 1, 0), E, "invalid microbatches '65537'");
    CHECK_FAILS(schedule_of(COH_SCHED_INTERLEAVED, 4, 8, 0, 0), E,
                "invalid virtual stages '0': need 1 .. 64");
    CHECK_FAILS(schedule_of(COH_SCHED_INTERLEAVED, 4, 8, 65, 0), E, "invalid virtual stages '65'");
    CHECK_FAILS(schedule_of((coh_schedule)7, 4, 8, 1, 0), E,
                "invalid pipeline schedule '7': valid are naive, gpipe, 1f1b, interleaved");
    CHECK_FAILS(schedule_of(COH_SCHED_1F1B, 4, 8, 2, 0), E,
                "virtual stages '2' need the interleaved schedule; 1f1b takes 1");
    CHECK_FAILS(schedule_of(COH_SCHED_NAIVE, 4, 8, 3, 0), E, "naive takes 1");
    CHECK_FAILS(schedule_of(COH_SCHED_INTERLEAVED, 1, 8, 2, 0), E,
                "the interleaved schedule needs at least 2 stages, got '1' (with one stage use "
                "1f1b)");
    CHECK_FAILS(schedule_of(COH_SCHED_INTERLEAVED, 4, 6, 2, 0), E,
                "the interleaved schedule needs microbatches a multiple of the 4 stages, got "
                "'6' (nearest valid: 4 or 8)");
    CHECK_FAILS(schedule_of(COH_SCHED_INTERLEAVED, 4, 3, 2, 0), E,
                "got '3' (valid: 4, 8, ...)");
    CHECK_FAILS(schedule_of(COH_SCHED_1F1B, 4, 8, 1, 4), E,
                "invalid stage '4': need 0 .. 3 for 4 stages");
    CHECK_FAILS(schedule_of(COH_SCHED_1F1B, 4, 8, 1, -1), E, "invalid stage '-1'");
    CHECK_FAILS(coh_pipeline_check(NULL), E, "no pipeline shape given");
    int peak;
    coh_pipe_shape bad = {COH_SCHED_1F1B, 4, 8, 1};
    CHECK_FAILS(coh_pipeline_peak_in_flight(&bad, 9, &peak), E, "invalid stage '9'");
}

static void test_tool_refusals(void)
{
    const coh_status E = COH_ERR_INVALID;
    coh_pipe_shape s = {COH_SCHED_1F1B, 4, 8, 1};
    coh_pipe_sim sim;
    char *text = NULL;
    CHECK_FAILS(coh_pipeline_simulate(&s, 0.0, 2.0, &sim, NULL), E,
                "invalid compute times forward '0', backward '2': need finite and > 0");
    CHECK_FAILS(coh_pipeline_simulate(&s, 1.0, NAN, &sim, NULL), E, "backward 'nan'");
    coh_pipe_shape huge = {COH_SCHED_INTERLEAVED, 1024, 1024, 2};
    CHECK_FAILS(coh_pipeline_simulate(&huge, 1.0, 2.0, &sim, NULL), E,
                "pipeline too large to simulate: stages x microbatches x virtual stages = 1024 x "
                "1024 x 2 = '2097152', at most 1048576");
    CHECK_FAILS(coh_pipeline_draw(&huge, 1, 2, &text), E, "pipeline too large to draw");
    CHECK_FAILS(coh_pipeline_draw(&s, 0, 2, &text), E,
                "invalid cells per forward '0', per backward '2': need 1 .. 16 each");
    CHECK_FAILS(coh_pipeline_draw(&s, 1, 17, &text), E, "per backward '17'");
    coh_pipe_shape wide = {COH_SCHED_INTERLEAVED, 2, 2, 27};
    CHECK_FAILS(coh_pipeline_draw(&wide, 1, 2, &text), E,
                "cannot draw '27' virtual stages: chunks are drawn as letters, at most 26");
    coh_pipe_shape bad = {COH_SCHED_GPIPE, 4, 8, 2};
    CHECK_FAILS(coh_pipeline_simulate(&bad, 1.0, 2.0, &sim, NULL), E, "gpipe takes 1");
    CHECK_FAILS(coh_pipeline_draw(&bad, 1, 2, &text), E, "gpipe takes 1");
    CHECK(text == NULL);
}

static void test_names(void)
{
    const char *names[] = {"1f1b", "gpipe", "interleaved", "naive"}; /* enum order */
    for (int k = 0; k < 4; k++) {
        coh_schedule kind;
        CHECK_OK(coh_schedule_parse(names[k], &kind));
        CHECK_INT(kind, k);
        CHECK_STR(coh_schedule_name(kind), names[k]);
    }
    coh_schedule kind;
    CHECK_FAILS(coh_schedule_parse("zb-v", &kind), COH_ERR_INVALID,
                "invalid schedule 'zb-v': valid are 1f1b, gpipe, interleaved, naive");
    CHECK_INT(COH_SCHED_NAIVE, 3); /* added last: the estimator's values stay */
    CHECK_STR(coh_schedule_name((coh_schedule)9), "unknown");
    CHECK_STR(coh_pipe_op_name(COH_PIPE_RECV_GRAD), "recv_grad");
    CHECK_STR(coh_pipe_op_name((coh_pipe_op)6), "unknown");
}

int main(void)
{
    RUN(test_names);
    RUN(test_shape_refusals);
    RUN(test_tool_refusals);
    RUN(test_simulator_refusals);
    RUN(test_drawings_small);
    RUN(test_drawing_megatron_fig4);
    RUN(test_every_shape);
    return CHECK_REPORT();
}
