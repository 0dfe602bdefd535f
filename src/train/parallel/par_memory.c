/* par_memory.c: what one rank of the parallel trainer will hold, from the same bucket plan and
 * shard ranges the trainer builds, so the prediction of `cohort estimate --engine cohort` and
 * the allocation cannot drift apart. */
#include <stdlib.h>
#include <string.h>

#include "train/model/gpt_int.h"
#include "train/ckpt/shard.h"
#include "train/parallel/par_trainer_int.h"

/* The shared-memory transport's default staging halves (COHORT_SHM_STAGE): two per rank, and a
 * rank's collectives outside the arena pass through every rank's halves. */
#define STAGE_HALF ((uint64_t)256 << 10)
/* Its channel buffer per ordered pair of a communicator (CHAN_BYTES in shm.c). */
#define CHAN_BUF ((uint64_t)64 << 10)
#define PAGE ((uint64_t)4096)

static uint64_t pages(uint64_t bytes) { return (bytes + PAGE - 1) / PAGE * PAGE; }

/* What the collectives of one communicator of n ranks touch of the shm transport's segment
 * (shm.c: every member has two staging halves, used by alternate rounds), when the largest
 * payload any of them moves on private buffers is `bytes`: the one-phase and staged algorithms
 * (shm_allreduce.c, shm_copy.c, shm_reduce_scatter.c) write a rank's pieces into its current
 * half and read every member's, so every member's two halves are resident in every member as
 * far as min(bytes, half) reaches; the cross-memory-attach path touches only the rank's own two
 * halves, which this bounds (whether ranks may use it is the kernel's ptrace rules' call). */
static uint64_t group_staging(int n, uint64_t bytes)
{
    uint64_t reach = pages(bytes) < STAGE_HALF ? pages(bytes) : STAGE_HALF;
    return n > 1 ? 2 * reach * (uint64_t)n : 0;
}

/* The scalar reductions over a communicator (loss, gradient norm, the trainer's checks): the
 * one-phase path's first page of every member's two halves. */
static uint64_t group_scalars(int n) { return n > 1 ? 2 * PAGE * (uint64_t)n : 0; }

/* The tensor-parallel group (tensor_parallel.c): its largest collective is the all-reduce of a
 * block's (B T, C) output (with sequence parallelism the all-gather and reduce-scatter of the same
 * rows), and the check of the replicated tensors at the end moves at most the position
 * embedding (the largest of them) in pieces of a staging half. */
static uint64_t tp_staging(const coh_par_config *c)
{
    const coh_gpt_config *g = &c->train.model;
    uint64_t btc = (uint64_t)c->train.batch * (uint64_t)c->train.seq * (uint64_t)g->dim;
    uint64_t wpe = (uint64_t)g->seq * (uint64_t)g->dim;
    return group_staging(c->par.tp, 4 * (btc > wpe ? btc : wpe));
}

static uint64_t not_own(const par_bucket *b)
{
    return (uint64_t)(b->end - b->begin - (b->own_e - b->own_b)) * sizeof(float);
}

/* ZeRO-3 walks the step layer by layer (par_reset_sequence), so other ranks' chunks of
 * parameters and of gradients are resident at different moments; their peak is that of their
 * sum over the step, not the sum of their peaks. What is present during each part:
 *   forward of layer l (embeddings -1, blocks, the final LayerNorm L): l and the next in the
 *     order, prefetched;
 *   the head (-1 again): ln_f (held until its backward), wte, block L-1 prefetched, and the
 *     whole of wte's gradient, which the fused head writes there;
 *   ln_f's backward: ln_f, block L-1, wte's gradient and ln_f's;
 *   block l's backward: l, l-1 prefetched, wte's gradient (reduced last), l's being written
 *     and l+1's whose reduce-scatter may still be in flight.
 * Every layer is its own bucket here (par_bucket_plan). */
typedef struct resident_peak {
    uint64_t params, grads; /* at the moment their sum is largest */
} resident_peak;

static void moment(resident_peak *pk, uint64_t params, uint64_t grads)
{
    if (params + grads > pk->params + pk->grads)
        *pk = (resident_peak){params, grads};
}

/* Other ranks' chunk of layer l (-1 the embeddings, L the final LayerNorm). */
static uint64_t others(const par_bucket *bk, const int *bucket_of, int l)
{
    return not_own(&bk[bucket_of[l + 1]]);
}

static resident_peak zero3_peak(const par_bucket *bk, const int *bucket_of, int L)
{
    resident_peak pk = {0, 0};
    uint64_t wte = others(bk, bucket_of, -1), lnf = others(bk, bucket_of, L);
    uint64_t last = L > 0 ? others(bk, bucket_of, L - 1) : 0;
    for (int l = -1; l < L; l++)
        moment(&pk, others(bk, bucket_of, l) + others(bk, bucket_of, l + 1), 0);
    moment(&pk, lnf + wte, 0);
    moment(&pk, lnf + wte + last, wte);
    moment(&pk, lnf + last, wte + lnf);
    for (int l = L - 1; l >= 0; l--) {
        uint64_t x = others(bk, bucket_of, l);
        moment(&pk, x + (l > 0 ? others(bk, bucket_of, l - 1) : 0),
               wte + x + others(bk, bucket_of, l + 1));
    }
    return pk;
}

/* ZeRO-2: the embedding bucket's gradient is written first in backward (the LM head) and
 * reduced last, so it is held through backward beside the bucket backward is writing and the
 * one before it, whose reduce-scatter is still in flight: the two largest others. */
static uint64_t grad_bucket_peak(const par_bucket *bk, int nbk)
{
    uint64_t a = 0, b = 0; /* largest, second largest */
    for (int k = 0; k < nbk - 1; k++) {
        uint64_t x = not_own(&bk[k]);
        if (x > a) {
            b = a;
            a = x;
        } else if (x > b) {
            b = x;
        }
    }
    return not_own(&bk[nbk - 1]) + a + b;
}

/* DDP/ZeRO-1 all-reduce each bucket in place in the shared arena (the transport's rs+ag over
 * blocks of ceil(m / dp) rounded to 64 elements): rank r reads block r of every peer's bucket
 * and writes the reduced block r back into every peer's, so it maps one block of every peer's
 * gradients. */
static uint64_t peer_pieces(const par_bucket *bk, int nbk, int dp, uint64_t elem)
{
    uint64_t sum = 0;
    for (int k = 0; k < nbk; k++) {
        uint64_t m = bk[k].end - bk[k].begin, blk = ((m + dp - 1) / dp + 63) / 64 * 64;
        if (m * elem > ((uint64_t)16 << 10)) /* smaller ones go through staging */
            sum += (uint64_t)(dp - 1) * (blk < m ? blk : m) * elem;
    }
    return sum;
}

/* --grad-reduce-dtype bf16 under ZeRO-2/3: a bucket's bf16 copy is resident from its issue to
 * its collection; at most the two largest at once. */
static uint64_t bf16_in_flight(const par_bucket *bk, int nbk)
{
    uint64_t a = 0, b = 0;
    for (int k = 0; k < nbk; k++) {
        uint64_t x = (uint64_t)(bk[k].end - bk[k].begin) * 2;
        if (x > a) {
            b = a;
            a = x;
        } else if (x > b) {
            b = x;
        }
    }
    return a + b;
}

static void fill(const coh_par_config *c, int zero, int dp, const par_bucket *bk, int nbk,
                 const int *bucket_of, size_t own, coh_par_memory *out)
{
    uint64_t n = coh_gpt_param_count(&c->train.model), f = sizeof(float);
    uint64_t mine = zero ? own : n;
    out->state.params = (zero == 3 ? own : n) * f;
    out->state.grads = (zero >= 2 ? own * (c->train.accum > 1 ? 2 : 1) : n) * f;
    out->state.optim = 2 * mine * f;
    out->gathered = 0;
    out->grad_buckets = zero == 2 ? grad_bucket_peak(bk, nbk) : 0;
    if (zero == 3) {
        resident_peak pk = zero3_peak(bk, bucket_of, c->train.model.layers);
        out->gathered = pk.params;
        out->grad_buckets = pk.grads;
    }
    out->comm = 0;
    int b16 = c->par.grad_reduce_bf16;
    if (dp > 1) /* bf16: DDP/ZeRO-1 reduce the bf16 copy in place (2 bytes a parameter) */
        out->comm = (zero < 2 ? peer_pieces(bk, nbk, dp, b16 ? 2 : 4) + (b16 ? 2 * n : 0)
                              : (b16 ? bf16_in_flight(bk, nbk) : 0)) +
                    group_staging(dp, STAGE_HALF);
    out->comm += tp_staging(c) + group_scalars(dp * c->par.tp); /* and the world's */
}

coh_status coh_par_memory_estimate(const coh_par_config *cfg, int dp, int rank,
                                   coh_par_memory *out)
{
    coh_par_config applied = *cfg;
    const coh_par_config *c = &applied;
    coh_par_config_apply(&applied);
    if (c->par.strategy == COH_STRATEGY_DP || (unsigned)c->par.strategy >= COH_STRATEGY_COUNT)
        return coh_errf(COH_ERR_UNSUPPORTED, "strategy '%s' has no memory model: use single, "
                        "ddp or zero1..3", coh_strategy_name(c->par.strategy));
    if (dp < 1 || rank < 0 || rank >= dp)
        return coh_errf(COH_ERR_INVALID, "invalid rank '%d' of data-parallel size '%d'", rank,
                        dp);
    coh_train_memory tm;
    coh_status st = coh_train_memory_estimate(&c->train.model, c->train.batch, c->train.seq, &tm);
    if (st)
        return st;
    int L = c->train.model.layers, zero = dp > 1 ? coh_strategy_zero_stage(c->par.strategy) : 0;
    par_bucket *bk = calloc((size_t)L + 2, sizeof *bk);
    int *bucket_of = calloc((size_t)L + 2, sizeof *bucket_of);
    if (!bk || !bucket_of) {
        free(bk);
        free(bucket_of);
        return coh_errf(COH_ERR_NOMEM, "out of memory planning gradient buckets");
    }
    size_t own = 0, bucket = coh_parallel_bucket_bytes(&c->par);
    int nbk = par_bucket_plan(&c->train.model, NULL, zero, dp, rank, bucket, bk, bucket_of, &own);
    fill(c, zero, dp, bk, nbk, bucket_of, own, out);
    free(bk);
    free(bucket_of);
    out->engine = tm.total - 4 * tm.params +
                  2 * (uint64_t)c->train.batch * (uint64_t)c->train.seq * sizeof(int32_t);
    if (c->par.recompute == COH_RECOMPUTE_FULL) {
        /* each block keeps its output only; one block's activations are rebuilt at a time */
        gpt_act_sizes_t as;
        gpt_act_sizes(&c->train.model, c->train.batch, c->train.seq, &as);
        size_t btc = (size_t)c->train.batch * c->train.seq * c->train.model.dim;
        out->engine -= (uint64_t)L * (as.per_layer - btc) * sizeof(float);
        out->engine += (uint64_t)as.per_layer * sizeof(float);
    }
    if (c->par.precision == COH_PREC_BF16_MIXED) { /* the products' bf16 operands, scratchpad,
                                                      less the bf16-kept activations' halves */
        out->engine += coh_train_memory_bf16(&c->train.model, c->train.batch, c->train.seq);
        out->engine -= (uint64_t)(c->par.recompute == COH_RECOMPUTE_FULL ? 1 : L) *
                       coh_train_memory_bf16_acts_saved(&c->train.model, c->train.batch,
                                                        c->train.seq);
    }
    if (c->train.tied_grad_apart) /* the head's part of the wte gradient, apart */
        out->engine += 4 * (uint64_t)par_wte_size(&c->train.model);
    if (c->train.grad_accum_apart) /* a micro-batch's own gradient arena */
        out->engine += 4 * (uint64_t)coh_gpt_param_count(&c->train.model);
    const coh_model_state_bytes *s = &out->state;
    out->save = c->train.saves ? ckpt_save_bytes(&c->train.model, dp, 1) : 0;
    out->total = s->params + s->grads + s->optim + out->engine + out->gathered +
                 out->grad_buckets + out->comm + out->save;
    return COH_OK;
}

/* The pipeline links stage s is in (make_links, pipe_exec.c): a two-rank communicator per
 * direction of each neighbouring pair, around the ring when chunks wrap. */
static int stage_links(int p, int v, int s)
{
    int pairs = v > 1 ? p : p - 1, n = 0;
    for (int i = 0; i < pairs; i++)
        n += s == i || s == (i + 1) % p ? 2 : 0;
    return n;
}

/* The stages in the tied embedding's group (make_links): the first and each holding a head
 * shard; the head whole is on the last stage. */
static int embed_members(const coh_par_config *c, const coh_pipe_stage *lay)
{
    if (lay->head_shards <= 1)
        return 2;
    int n = 0;
    for (int s = 0; s < c->par.pp; s++) {
        coh_pipe_stage o;
        if (coh_par_pipe_stage(c, s, &o) == COH_OK && (s == 0 || o.head))
            n++;
    }
    return n;
}

/* What a pipeline stage's communicators touch of the shm transport (shm.c): its links, each a
 * message of `msg` bytes at a time through the pair's channel buffer, which sender and receiver
 * both touch (a message larger than the channel goes by cross-memory attach where the kernel
 * allows it: then none, which this bounds); the tied embedding's group (its gradient's
 * all-reduce, pipe_exec.c, and the end's check of the copies, replicas.c); the stage's dp
 * replicas (its gradients reduced from private memory by the bucket hooks, the ZeRO-1 updates
 * gathered; never in place in the arena); its tp group; and the scalar reductions over the
 * pipeline and the world. */
static uint64_t stage_transport(const coh_par_config *c, const coh_pipe_stage *lay, int stage,
                                uint64_t msg)
{
    const coh_gpt_config *g = &c->train.model;
    int pp = c->par.pp, dp = c->par.dp, tp = c->par.tp;
    uint64_t links = (uint64_t)stage_links(pp, lay->chunks, stage) *
                     pages(msg < CHAN_BUF ? msg : CHAN_BUF);
    uint64_t embed = stage == 0 || lay->head
                         ? group_staging(embed_members(c, lay), 4 * (uint64_t)par_wte_size(g))
                         : 0;
    return links + embed + group_staging(dp, 4 * (uint64_t)lay->params) + tp_staging(c) +
           group_scalars(pp) + group_scalars(dp * pp * tp);
}

coh_status coh_par_memory_estimate_stage(const coh_par_config *cfg, int stage,
                                         coh_par_memory *out)
{
    coh_par_config applied = *cfg;
    const coh_par_config *c = &applied;
    coh_par_config_apply(&applied);
    memset(out, 0, sizeof *out);
    coh_train_memory tm;
    coh_pipe_stage lay;
    coh_status st = coh_train_memory_estimate(&c->train.model, c->train.batch, c->train.seq, &tm);
    if (!st)
        st = coh_par_pipe_stage(c, stage, &lay);
    if (st)
        return st;
    int v = lay.chunks, m = c->train.accum;
    coh_pipe_shape shape = {c->par.schedule, c->par.pp, m, v};
    coh_pipe_action *acts;
    int nacts;
    if ((st = coh_pipeline_schedule(&shape, stage, &acts, &nacts)))
        return st;
    int slots = par_pipe_count_slots(acts, nacts, m);
    free(acts);
    if (slots < 1)
        return coh_errf(COH_ERR_NOMEM, "out of memory counting activation slots");
    const coh_gpt_config *g = &c->train.model;
    gpt_act_sizes_t as;
    gpt_act_sizes(g, c->train.batch, c->train.seq, &as);
    uint64_t bt = (uint64_t)c->train.batch * c->train.seq, btc = bt * (uint64_t)g->dim, blocks = 0;
    uint64_t btr = (uint64_t)as.rows * (uint64_t)g->dim; /* this rank's rows (sequence parallel) */
    int full = c->par.recompute == COH_RECOMPUTE_FULL;
    for (int k = 0; k < v; k++)
        blocks += (uint64_t)(lay.hi[k] - lay.lo[k]);
    int first = lay.first; /* by virtual stage: a chunk may hold no block */
    /* one slot: the blocks' saved activations (only outputs when recomputing), each chunk's
     * input (the embedding's output on the first; an embeddings-only chunk's output, a
     * head-only chunk's input), the head's LayerNorm (all rows), its statistics, the losses and
     * dL/dlnf */
    int head = lay.head; /* a chunk of the head, or of its shards (the last stage's) */
    uint64_t per_slot = blocks * (full ? btr : as.per_layer) + (uint64_t)v * btr +
                        (first ? bt : 0) + (head ? 2 * btc + 2 * as.rows + bt : 0);
    /* head shards: each slot's targets, statistics and the logits the shards before the last
     * keep for their backward (unless recomputed); the running statistics, dropped losses and
     * every message's statistics */
    uint64_t shard_engine = 0, msg = btr, logits = head ? as.logits : 0;
    if (lay.head_shards > 1 && head) {
        uint64_t kept = 0, widest = 0; /* the widest shard computing in the logits chunk */
        for (int k = 0; k < v; k++)
            for (int h = lay.head_lo[k]; h < lay.head_hi[k]; h++) {
                uint64_t w = (uint64_t)(coh_pipe_head_shard_row(g->vocab, h + 1, lay.head_shards) -
                                        coh_pipe_head_shard_row(g->vocab, h, lay.head_shards));
                if (h < lay.head_shards - 1 && !full)
                    kept += w;
                else
                    widest = w > widest ? w : widest;
            }
        per_slot += 4 * bt + kept * bt;
        shard_engine = 4 * bt;
        logits = (uint64_t)as.chunk_rows * widest;
    }
    if (lay.head_shards > 1)
        msg += 3 * bt;
    out->state.params = 4 * (uint64_t)lay.params;
    out->state.grads = 4 * (uint64_t)lay.params;
    uint64_t optim = lay.params;
    if (c->par.strategy == COH_STRATEGY_ZERO1 && c->par.dp > 1) { /* the last replica's slices */
        optim = 0;
        for (int k = 0; k < lay.nranges; k++) {
            uint64_t len = lay.end[k] - lay.begin[k];
            optim += len - (len / (uint64_t)c->par.dp) * (uint64_t)(c->par.dp - 1);
        }
    }
    out->state.optim = 8 * optim;
    out->engine = 4 * ((uint64_t)slots * per_slot + (full ? as.per_layer : 0) + as.grads +
                       logits + shard_engine +
                       (uint64_t)(PIPE_RECV_DEPTH + 1) * msg /* received ahead, to send */ +
                       2 * (uint64_t)m * bt /* the step's tokens and targets */ + 2 * bt) +
                  tm.attention * (uint64_t)coh_get_threads();
    if (c->par.precision == COH_PREC_BF16_MIXED) { /* as in the whole model's estimate */
        out->engine += coh_train_memory_bf16(g, c->train.batch, c->train.seq);
        out->engine -= (full ? 1 : (uint64_t)slots * blocks) *
                       coh_train_memory_bf16_acts_saved(g, c->train.batch, c->train.seq);
    }
    out->activation_slots = slots;
    out->save = c->train.saves ? ckpt_save_bytes(g, c->par.dp, c->par.pp) : 0;
    out->comm = stage_transport(c, &lay, stage, 4 * msg);
    out->total = out->state.params + out->state.grads + out->state.optim + out->engine +
                 out->comm + out->save;
    /* the seeded initialisation writes the whole arena's parameters before the stage gives back
     * the pages of the others: a stage lighter than that (the head alone) peaks there */
    uint64_t init = 4 * (uint64_t)coh_gpt_param_count(g);
    if (init > out->total)
        out->total = init;
    return COH_OK;
}
