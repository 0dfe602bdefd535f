/* schedule.c: pipeline schedules as pure functions from (schedule, p, m, v, stage) to the
 * stage's ordered action list. All four are one shape of list: W warm-up forwards, then one
 * forward and one backward in turn, then the last W backwards; only W differs (naive 0, GPipe m,
 * 1F1B p - s - 1, interleaved Megatron's count), and the order in which (microbatch, chunk)
 * pairs are visited, which only the interleaved schedule changes. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/pipeline_int.h"

const char *coh_pipe_op_name(coh_pipe_op op)
{
    static const char *const names[] = {"forward",  "backward",  "send_act",
                                        "recv_act", "send_grad", "recv_grad"};
    return (int)op >= 0 && (int)op < 6 ? names[op] : "unknown";
}

static coh_status check_range(const char *what, int value, int lo, int hi)
{
    if (value < lo || value > hi)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%d': need %d .. %d", what, value, lo, hi);
    return COH_OK;
}

static coh_status check_interleaved(const coh_pipe_shape *s)
{
    int p = s->stages, m = s->microbatches;
    if (p < 2)
        return coh_errf(COH_ERR_INVALID,
                        "the interleaved schedule needs at least 2 stages, got '%d' (with one "
                        "stage use 1f1b)", p);
    if (m % p == 0)
        return COH_OK;
    int below = m / p * p, above = below + p;
    if (below == 0)
        return coh_errf(COH_ERR_INVALID,
                        "the interleaved schedule needs microbatches a multiple of the %d stages, "
                        "got '%d' (valid: %d, %d, ...)", p, m, p, 2 * p);
    return coh_errf(COH_ERR_INVALID,
                    "the interleaved schedule needs microbatches a multiple of the %d stages, "
                    "got '%d' (nearest valid: %d or %d)", p, m, below, above);
}

coh_status coh_pipeline_check(const coh_pipe_shape *s)
{
    coh_status st;
    if (!s)
        return coh_errf(COH_ERR_INVALID, "no pipeline shape given");
    if ((int)s->kind < 0 || (int)s->kind >= COH_SCHED_COUNT)
        return coh_errf(COH_ERR_INVALID,
                        "invalid pipeline schedule '%d': valid are naive, gpipe, 1f1b, "
                        "interleaved", (int)s->kind);
    if ((st = check_range("pipeline stages", s->stages, 1, COH_PIPE_MAX_STAGES)) ||
        (st = check_range("microbatches", s->microbatches, 1, COH_PIPE_MAX_MICROBATCHES)) ||
        (st = check_range("virtual stages", s->virtual_stages, 1, COH_PIPE_MAX_VIRTUAL)))
        return st;
    if (s->kind == COH_SCHED_INTERLEAVED)
        return check_interleaved(s);
    if (s->virtual_stages != 1)
        return coh_errf(COH_ERR_INVALID,
                        "virtual stages '%d' need the interleaved schedule; %s takes 1",
                        s->virtual_stages, coh_schedule_name(s->kind));
    return COH_OK;
}

static coh_status check_stage(const coh_pipe_shape *s, int stage)
{
    coh_status st = coh_pipeline_check(s);
    if (st)
        return st;
    if (stage < 0 || stage >= s->stages)
        return coh_errf(COH_ERR_INVALID, "invalid stage '%d': need 0 .. %d for %d stages", stage,
                        s->stages - 1, s->stages);
    return COH_OK;
}

int pipe_warmup(const coh_pipe_shape *s, int stage)
{
    int p = s->stages, m = s->microbatches, total = m * s->virtual_stages, w;
    switch (s->kind) {
    case COH_SCHED_NAIVE: return 0;
    case COH_SCHED_GPIPE: return m;
    case COH_SCHED_1F1B: w = p - stage - 1; break;
    default: w = (p - stage - 1) * 2 + (s->virtual_stages - 1) * p; break;
    }
    return w < total ? w : total;
}

/* The k-th (microbatch, chunk) a stage forwards: groups of p microbatches through chunk 0, then
 * the same group through chunk 1, ...; backward visits the chunks in reverse. With v = 1 this is
 * simply microbatch k. */
static void visit(const coh_pipe_shape *s, int k, int backward, int *mb, int *chunk)
{
    int p = s->stages, v = s->virtual_stages, r = k % (p * v);
    *mb = k / (p * v) * p + r % p;
    *chunk = backward ? v - 1 - r / p : r / p;
}

typedef struct list_out {
    const coh_pipe_shape *s;
    int stage;
    coh_pipe_action *a;
    int n;
} list_out;

static void put(list_out *o, coh_pipe_op op, int mb, int chunk, int peer)
{
    o->a[o->n++] = (coh_pipe_action){op, mb, chunk, peer};
}

/* Virtual stage u = chunk * p + stage; u - 1 and u + 1 live on the stages before and after,
 * wrapping from the last stage to the first one chunk further. */
static void put_forward(list_out *o, int k)
{
    int p = o->s->stages, last = p * o->s->virtual_stages - 1, mb, c;
    visit(o->s, k, 0, &mb, &c);
    int u = c * p + o->stage;
    if (u > 0)
        put(o, COH_PIPE_RECV_ACT, mb, c, (u - 1) % p);
    put(o, COH_PIPE_FORWARD, mb, c, -1);
    if (u < last)
        put(o, COH_PIPE_SEND_ACT, mb, c, (u + 1) % p);
}

static void put_backward(list_out *o, int k)
{
    int p = o->s->stages, last = p * o->s->virtual_stages - 1, mb, c;
    visit(o->s, k, 1, &mb, &c);
    int u = c * p + o->stage;
    if (u < last)
        put(o, COH_PIPE_RECV_GRAD, mb, c, (u + 1) % p);
    put(o, COH_PIPE_BACKWARD, mb, c, -1);
    if (u > 0)
        put(o, COH_PIPE_SEND_GRAD, mb, c, (u - 1) % p);
}

/* Each chunk's m forwards and m backwards, with a receive and a send for each neighbour. */
static int list_length(const coh_pipe_shape *s, int stage)
{
    int p = s->stages, v = s->virtual_stages, last = p * v - 1, n = 0;
    for (int c = 0; c < v; c++) {
        int u = c * p + stage;
        n += 2 * (1 + (u > 0) + (u < last));
    }
    return n * s->microbatches;
}

coh_status coh_pipeline_schedule(const coh_pipe_shape *s, int stage, coh_pipe_action **out,
                                 int *count)
{
    coh_status st = check_stage(s, stage);
    if (st)
        return st;
    int len = list_length(s, stage), total = s->microbatches * s->virtual_stages;
    list_out o = {s, stage, malloc((size_t)len * sizeof(coh_pipe_action)), 0};
    if (!o.a)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a pipeline schedule of %d actions", len);
    int w = pipe_warmup(s, stage);
    for (int k = 0; k < w; k++)
        put_forward(&o, k);
    for (int k = 0; k < total - w; k++) {
        put_forward(&o, w + k);
        put_backward(&o, k);
    }
    for (int k = total - w; k < total; k++)
        put_backward(&o, k);
    *out = o.a;
    *count = o.n;
    return COH_OK;
}

coh_status coh_pipeline_peak_in_flight(const coh_pipe_shape *s, int stage, int *out)
{
    coh_pipe_action *a;
    int n, held = 0, peak = 0;
    coh_status st = coh_pipeline_schedule(s, stage, &a, &n);
    if (st)
        return st;
    for (int i = 0; i < n; i++) {
        held += a[i].op == COH_PIPE_FORWARD ? 1 : a[i].op == COH_PIPE_BACKWARD ? -1 : 0;
        peak = held > peak ? held : peak;
    }
    free(a);
    *out = peak;
    return COH_OK;
}

void pipe_lists_release(pipe_lists *l)
{
    for (int i = 0; l->list && i < l->stages; i++)
        free(l->list[i]);
    free(l->list);
    free(l->count);
    memset(l, 0, sizeof *l);
}

coh_status pipe_lists_build(const coh_pipe_shape *s, pipe_lists *l)
{
    memset(l, 0, sizeof *l);
    coh_status st = coh_pipeline_check(s);
    if (st)
        return st;
    l->stages = s->stages;
    l->list = calloc((size_t)s->stages, sizeof *l->list);
    l->count = calloc((size_t)s->stages, sizeof *l->count);
    if (!l->list || !l->count)
        return coh_errf(COH_ERR_NOMEM, "out of memory for %d pipeline schedules", s->stages);
    for (int i = 0; i < s->stages && !st; i++)
        st = coh_pipeline_schedule(s, i, &l->list[i], &l->count[i]);
    return st;
}
