/* cost.c: the planner's per-op cost model: the GEMMs, attention, elementwise ops and optimizer of
 * cohort's GPT engine priced from a rate table (measured curve or GPU roofline), and α-β costs of
 * the collectives the trainer issues. docs/plan.md gives every formula. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"
#include "plan/planner_int.h"
#include "train/parallel/par_trainer_int.h" /* par_pipe_split_chain: the trainer's own split */

/* ---- rates ---------------------------------------------------------------------------------- */

int plan_node_size(const coh_hw *hw, const coh_parallel_config *c)
{
    if (!hw->gpu && hw->nodes <= 1) /* every rank on this machine */
        return c->dp * c->tp * c->pp;
    return hw->gpus_per_node > 0 ? hw->gpus_per_node : 1;
}

coh_status plan_dev_for(const coh_hw *hw, const coh_parallel_config *c, plan_dev *out)
{
    memset(out, 0, sizeof *out);
    out->hw = hw;
    out->half = c->precision != COH_PREC_FP32;
    out->share = 1.0;
    if (hw->nrates < 1)
        return coh_errf(COH_ERR_INVALID, "hardware '%s' has no rates", hw->name);
    if (hw->gpu) {
        out->row = &hw->rates[0];
        out->threads = 0;
        return COH_OK;
    }
    long ranks = (long)c->dp * c->tp * c->pp;
    if (hw->nodes > 1 && hw->gpus_per_node > 0 && ranks > hw->gpus_per_node)
        ranks = hw->gpus_per_node; /* several nodes like this one: a node's ranks share its cores */
    int cores = hw->cores > 0 ? hw->cores : 1;
    out->threads = hw->threads > 0 ? hw->threads : ranks >= cores ? 1 : (int)(cores / ranks);
    out->row = &hw->rates[0];
    for (int i = 0; i < hw->nrates; i++)
        if (hw->rates[i].threads <= out->threads)
            out->row = &hw->rates[i];
    if (ranks * out->threads > cores) /* oversubscribed: the threads take turns on the cores */
        out->share = (double)cores / (double)(ranks * out->threads);
    out->saturated = ranks * out->threads >= cores;
    out->ranks = (int)(ranks < 4096 ? ranks : 4096);
    return COH_OK;
}

/* The measured curve at `work`, interpolated in log(work), clamped at its ends. */
static double curve_rate(const coh_rate_curve *c, double work)
{
    if (work <= c->work[0])
        return c->flops[0];
    for (int i = 1; i < c->n; i++)
        if (work <= c->work[i]) {
            double f = (log(work) - log(c->work[i - 1])) / (log(c->work[i]) - log(c->work[i - 1]));
            return c->flops[i - 1] + f * (c->flops[i] - c->flops[i - 1]);
        }
    return c->flops[c->n - 1];
}

/* cuBLAS's CTA tiles (NVIDIA, "Matrix Multiplication Background User's Guide", section 2.3
 * and chapter 3, https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-
 * multiplication/index.html): 256 x 128 for large GEMMs, smaller ones where those leave SMs
 * idle. */
static const int GEMM_TILES[][2] = {{256, 128}, {128, 256}, {128, 128}, {128, 64}, {64, 128},
                                    {64, 64}};

/* Operands a tile reuses per load: tm tn / (tm + tn) (each K step loads tm + tn rows for
 * tm tn products), the guide's reason larger tiles are more efficient. */
static double tile_reuse(const int *t)
{
    return (double)t[0] * t[1] / (t[0] + t[1]);
}

double plan_gemm_shape_share(int sms, double M, double N, double count)
{
    if (sms < 1)
        return 1.0;
    double best = 0, large = tile_reuse(GEMM_TILES[0]);
    for (size_t i = 0; i < sizeof GEMM_TILES / sizeof GEMM_TILES[0]; i++) {
        const int *t = GEMM_TILES[i];
        double tm = ceil(M / t[0]), tn = ceil(N / t[1]), tiles = tm * tn * count;
        double used = M * N / (tm * t[0] * tn * t[1]);         /* tile quantization */
        double waves = ceil(tiles / sms), busy = tiles / (waves * sms); /* wave quantization */
        double share = used * busy * tile_reuse(t) / large;  /* smaller tiles, less reuse */
        best = share > best ? share : best;
    }
    return best;
}

double plan_gemm_s(const plan_dev *d, double M, double N, double K, double count)
{
    if (M <= 0 || N <= 0 || K <= 0 || count <= 0)
        return 0;
    const coh_device_rates *r = d->row;
    double work = M * N * K, flops = 2.0 * work * count;
    if (r->gemm.n > 0) {
        double rate = curve_rate(&r->gemm, work);
        if (count > 1 && d->threads > 1 && d->hw->rates[0].threads == 1) {
            /* the engine runs batched small GEMMs (attention's heads) one per thread */
            double one = curve_rate(&d->hw->rates[0].gemm, work);
            double par = one * fmin(count, d->threads);
            rate = par > rate ? par : rate;
        }
        return flops / (rate * d->share) + r->op_overhead_s;
    }
    double e = d->half ? 2.0 : 4.0;
    double peak = d->hw->peak_flops * (d->half ? 1.0 : 0.5) * d->hw->gemm_efficiency *
                  plan_gemm_shape_share(d->hw->sms, M, N, count);
    double bytes = e * (M * K + K * N + M * N) * count;
    return fmax(flops / peak, bytes / d->hw->mem_bytes_per_s) + r->op_overhead_s;
}

double coh_plan_gemm_seconds(const coh_hw *hw, int half, double M, double N, double K)
{
    plan_dev d = {.hw = hw, .row = &hw->rates[0], .share = 1, .threads = 1, .half = half};
    return plan_gemm_s(&d, M, N, K, 1);
}

double plan_elementwise_s(const plan_dev *d, double bytes)
{
    return bytes / (d->row->elementwise_bytes_per_s * d->share) + d->row->op_overhead_s;
}

double plan_optimizer_s(const plan_dev *d, const coh_parallel_config *c, double n)
{
    /* AdamW reads p, g, m, v and writes p, m, v (7 x 4 bytes), and the gradient is zeroed;
     * mixed precision also writes the 2-byte working copy. */
    double per = 32.0 + (c->precision != COH_PREC_FP32 ? 2.0 : 0.0);
    double measured = plan_engine_optimizer_s_per_param(d);
    if (measured > 0 && c->offload == COH_OFFLOAD_NONE)
        return n * measured;
    if (c->offload != COH_OFFLOAD_NONE) /* on the host over PCIe-class bandwidth: 25 GB/s */
        return n * per / 25e9 + n * 8.0 / 25e9;
    return plan_elementwise_s(d, n * per);
}

double plan_wire_bytes(const plan_dev *d)
{
    return d->hw->gpu && d->half ? 2.0 : 4.0;
}

double plan_grad_bytes(const coh_parallel_config *c)
{
    return c->grad_reduce_bf16 || c->precision == COH_PREC_FP16_MIXED ? 2.0 : 4.0;
}

/* ---- links and collectives ------------------------------------------------------------------ */

const coh_link *plan_link(const coh_hw *hw, long a, long b)
{
    if (hw->gpus_per_node < 1 || hw->nodes <= 1) /* CPU nodes: gpus_per_node = ranks per node */
        return &hw->intra;
    return a / hw->gpus_per_node == b / hw->gpus_per_node ? &hw->intra : &hw->inter;
}

/* g ranks of the group per node, k nodes. */
static void group_shape(const coh_hw *hw, int n, int stride, int *g, int *k)
{
    int gpn = hw->gpus_per_node;
    if (hw->nodes <= 1 || gpn < 1) {
        *g = n;
        *k = 1;
        return;
    }
    *g = stride >= gpn ? 1 : (gpn / stride < n ? gpn / stride : n);
    *k = (n + *g - 1) / *g;
}

static double ring_steps(int n, double steps_per_rank, const coh_link *l, double bytes)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return steps_per_rank * (n - 1) * (l->alpha_s + bytes / n / l->bytes_per_s);
}

/* half: reduce-scatter or all-gather (1 pass); full all-reduce: 2 passes. */
static double collective(const coh_hw *hw, int n, int stride, double bytes, double passes)
{
    int g, k;
    group_shape(hw, n, stride, &g, &k);
    if (k <= 1)
        return ring_steps(n, passes, &hw->intra, bytes);
    double flat = ring_steps(n, passes, &hw->inter, bytes);
    /* hierarchical: reduce-scatter inside the node, the collective across nodes on 1/g of the
     * data (each of the g ranks on its own NIC), all-gather inside the node */
    double inside = g > 1 ? ring_steps(g, 1.0, &hw->intra, bytes) : 0;
    coh_link inter = hw->inter;
    if (!hw->gpu) /* CPU nodes (a calibration): the g ranks' shards share the node's one link */
        inter.bytes_per_s /= g;
    double across = ring_steps(k, passes, &inter, bytes / g);
    double hier = (passes > 1 ? 2 : 1) * inside + across;
    return fmin(flat, hier);
}

double plan_allreduce_s(const coh_hw *hw, int n, int stride, double bytes)
{
    return collective(hw, n, stride, bytes, 2.0);
}

double plan_reduce_scatter_s(const coh_hw *hw, int n, int stride, double bytes)
{
    return collective(hw, n, stride, bytes, 1.0);
}

double plan_allgather_s(const coh_hw *hw, int n, int stride, double bytes)
{
    return collective(hw, n, stride, bytes, 1.0);
}

/* ---- the engine's ops ----------------------------------------------------------------------- */

typedef struct block_cost {
    double fwd, bwd, tp_fwd, tp_bwd, flops_fwd, flops_bwd;
} block_cost;

static void block(const coh_model_desc *m, const coh_parallel_config *c, const plan_dev *d,
                  double b, double s, const plan_engine_cost *measured, block_cost *out)
{
    const coh_hw *hw = d->hw;
    double t = c->tp, h = (double)m->dim, hd = (double)m->head_dim, f = (double)m->ffn;
    double a = (double)m->heads / t, kv = ceil((double)m->kv_heads / t), N = b * s;
    double e = d->half ? 2.0 : 4.0;
    int llama = m->arch == COH_ARCH_LLAMA;
    /* the four (Llama: five) linear layers */
    double lin = plan_gemm_s(d, N, (a + 2 * kv) * hd, h, 1) + plan_gemm_s(d, N, h, a * hd, 1) +
                 plan_gemm_s(d, N, f / t, h, llama ? 2 : 1) + plan_gemm_s(d, N, h, f / t, 1);
    double lin_flops = 2 * N * h * ((a + 2 * kv) * hd + a * hd + (llama ? 3 : 2) * f / t);
    /* attention: (T, T) scores and their product with V, per (sequence, head) */
    double att = plan_gemm_s(d, s, s, hd, b * a) + plan_gemm_s(d, s, hd, s, b * a);
    double att_flops = 4 * b * a * s * s * hd;
    /* the scores: the engine's fp32 scratch; a GPU stack's in the training precision, plus a
     * dropout mask when dropout is on */
    double pe = hw->gpu ? e : 4.0;
    double soft = 2 * b * a * s * s * pe + (c->dropout ? b * a * s * s * (e + 1) : 0);
    double ew = 2 * (2 * N * h * e)                      /* two norms */
              + (llama ? 3 : 2) * N * (f / t) * e        /* GELU / SwiGLU */
              + 2 * 3 * N * h * e                        /* two residual adds */
              + (c->dropout ? 2 * N * h * (2 * e + 1) : 0) + (llama ? 2 * N * (a + kv) * hd * e : 0);
    /* one launch per kernel: on a GPU stack Megatron-LM's fused kernels, five a block
     * outside attention (two LayerNorms, bias-GELU, two bias-dropout-adds) and the softmax,
     * plus the attention dropout when dropout is on (megatron/model/transformer.py,
     * fused_layer_norm.py, fused_bias_gelu.py, fused_softmax.py); on a CPU six for the ew bytes
     * (one more than the engine's five passes, gpt_step.c block_forward: kept, so that CPU
     * plans are unchanged; --measure replaces it) and one for the scores */
    double oh = d->row->op_overhead_s, ew_kernels = hw->gpu ? 5 : 6;
    double soft_s = plan_elementwise_s(d, soft) + (hw->gpu && c->dropout ? oh : 0);
    double ew_s = plan_elementwise_s(d, ew) + (ew_kernels - 1) * oh;
    out->fwd = lin + att + soft_s + ew_s;
    out->flops_fwd = lin_flops + att_flops;
    /* backward: two GEMMs per linear layer (the input's gradient and the weight's); attention's
     * are counted: a GPU stack that keeps the probabilities P (Megatron-LM 2021) runs four
     * products of the forward's two shapes, dV = P^T dO, dP = dO V^T, dS K and dS^T Q: 2x;
     * the engine keeps only the log-sum-exp and rebuilds S = Q K^T first: five, 2.5x (as
     * FlashAttention-2, Dao 2023, section 4.1, counts its own recomputing backward) */
    double att_b = (hw->gpu ? 2.0 : 2.5) * att;
    out->bwd = 2 * lin + att_b + 2 * soft_s + 2 * ew_s;
    out->flops_bwd = 2 * lin_flops + (hw->gpu ? 2.0 : 2.5) * att_flops;
    if (measured) { /* the engine timed at this shape, with the node's other ranks running */
        out->fwd = measured->block_fwd_s;
        out->bwd = measured->block_bwd_s;
    }
    /* Megatron tp: an all-reduce of the block's (N, h) output after attention and after the MLP
     * in forward, and of the input gradients of both in backward */
    double ar = c->tp > 1 ? plan_allreduce_s(hw, c->tp, 1, N * h * plan_wire_bytes(d)) : 0;
    out->tp_fwd = 2 * ar;
    out->tp_bwd = 2 * ar;
    if (c->recompute == COH_RECOMPUTE_FULL) {
        out->bwd += out->fwd;
        out->flops_bwd += out->flops_fwd;
        out->tp_bwd += out->tp_fwd;
    } else if (c->recompute == COH_RECOMPUTE_SELECTIVE) {
        out->bwd += att + soft_s;
        out->flops_bwd += att_flops;
    }
}

/* Parameters one tp rank holds of one block. */
static double block_params(const coh_model_desc *m, int tp)
{
    return (double)plan_layer_params_local(m, tp);
}

/* The LM head and loss of one microbatch (the engine computes the loss gradient and the
 * head's weight gradient in its forward; a GPU stack in backward). */
static void head(const coh_model_desc *m, const coh_parallel_config *c, const plan_dev *d,
                 double N, double *fwd, double *bwd, double *flops)
{
    double t = c->tp, h = (double)m->dim, V = (double)m->vocab / t, e = d->half ? 2.0 : 4.0;
    double logits = plan_gemm_s(d, N, V, h, 1), grads = plan_gemm_s(d, N, h, V, 1) +
                                                        plan_gemm_s(d, V, h, N, 1);
    double xent = plan_elementwise_s(d, 3 * N * V * 4.0), norm = plan_elementwise_s(d, 4 * N * h * e);
    double ar = c->tp > 1 ? plan_allreduce_s(d->hw, c->tp, 1, N * h * plan_wire_bytes(d)) : 0;
    *flops = 6 * N * V * h;
    if (!d->hw->gpu) {
        *fwd = norm + logits + xent + grads + ar;
        *bwd = norm;
    } else {
        *fwd = norm + logits + xent;
        *bwd = grads + xent + norm + ar;
    }
}

coh_status plan_chunk_costs(const coh_model_desc *m, const coh_parallel_config *c,
                            const plan_dev *d, int64_t seq, plan_chunk *chunk)
{
    int p = c->pp, v = c->virtual_stages > 1 ? c->virtual_stages : 1, u = p * v;
    int L = (int)m->layers, shards = 1;
    /* the trainer's split: bounds over the chain of L blocks and the LM head's `shards` units
     * (bounds[u] = L + shards; pipe_layout.c), as --stage-layers names it or as the trainer
     * chooses it, head shards included where its simulation finds them faster */
    int *bounds = malloc(sizeof(int) * (size_t)(u + 1));
    unsigned char *wte_held = calloc((size_t)p, 1);
    double *head_t = malloc(sizeof(double) * 4 * (size_t)u); /* fwd, bwd, flops x 2 */
    if (!bounds || !wte_held || !head_t) {
        free(bounds);
        free(wte_held);
        free(head_t);
        return coh_errf(COH_ERR_NOMEM, "out of memory pricing %d virtual stages", u);
    }
    coh_status st = COH_OK;
    /* head shards are the CPU trainer's, on its tied GPT-2 head */
    int shardable = !d->hw->gpu && m->arch == COH_ARCH_GPT2 && m->tied;
    if (c->stage_layers) {
        st = coh_pipe_parse_split(c->stage_layers, L, u, bounds, &shards);
        if (!st && shards > 1 && !shardable)
            st = coh_errf(COH_ERR_INVALID, "invalid --stage-layers '%s': head shards are priced "
                          "only for cohort's own trainer (a tied GPT-2 head, on CPUs)",
                          c->stage_layers);
        if (!st)
            st = par_pipe_check_shards(c->stage_layers, shards, c->tp, (int)m->vocab);
    } else if (u == 1) {
        bounds[0] = 0;
        bounds[1] = L + 1;
    } else {
        coh_gpt_config g = {.layers = L, .heads = (int)m->heads, .dim = (int)m->dim,
                            .vocab = (int)m->vocab, .seq = (int)seq, .tp = c->tp,
                            .sp = c->sequence_parallel};
        coh_pipe_shape shape = {c->schedule, p, (int)plan_microbatches(c), v};
        int recompute = shardable && c->recompute == COH_RECOMPUTE_FULL; /* the chain's only */
        int key[PLAN_SPLIT_KEY] = {g.layers, g.heads, g.dim, g.vocab, g.seq, g.tp, g.sp,
                                   (int)shape.kind, p, shape.microbatches, v, shardable,
                                   recompute};
        if (!d->splits || !plan_split_memo_get(d->splits, key, u, bounds, &shards)) {
            if (shardable) {
                par_pipe_split_chain(&g, (int)seq, &shape, recompute, bounds, &shards);
            } else {
                par_pipe_split(&g, (int)seq, &shape, bounds);
                bounds[u] = L + 1;
            }
            if (d->splits)
                plan_split_memo_put(d->splits, key, u, bounds, shards);
        }
    }
    if (st) {
        free(bounds);
        free(wte_held);
        free(head_t);
        return st;
    }
    double b = (double)c->micro_batch, s = (double)seq, N = b * s, h = (double)m->dim;
    const plan_engine_cost *measured = NULL;
    st = plan_engine_lookup(d, m, (int)c->micro_batch, (int)seq, c->tp,
                            coh_strategy_zero_stage(c->strategy) >= 2 && c->dp > 1, &measured);
    if (st) {
        free(bounds);
        free(wte_held);
        free(head_t);
        return st;
    }
    block_cost bc;
    block(m, c, d, b, s, measured, &bc);
    double hf, hb, hflops;
    head(m, c, d, N, &hf, &hb, &hflops);
    double wire = plan_wire_bytes(d), e = d->half ? 2.0 : 4.0;
    double emb_ar = c->tp > 1 ? plan_allreduce_s(d->hw, c->tp, 1, N * h * wire) : 0;
    double emb_f = plan_elementwise_s(d, 3 * N * h * e) + emb_ar;
    double emb_b = plan_elementwise_s(d, 2 * N * h * 4.0);
    if (measured) {
        double head_ar = c->tp > 1 ? plan_allreduce_s(d->hw, c->tp, 1, N * h * wire) : 0;
        hf = measured->head_fwd_s + head_ar;
        hb = measured->head_bwd_s;
        emb_f = measured->emb_fwd_s + emb_ar;
        emb_b = measured->emb_bwd_s;
    }
    double bp = block_params(m, c->tp), vocab_shard = ceil((double)m->vocab / c->tp) * h;
    int zero3 = coh_strategy_zero_stage(c->strategy) == 3 && c->dp > 1;
    int dstride = plan_dp_stride(c);
    double gather_blk = zero3 ? plan_allgather_s(d->hw, c->dp, dstride, bp * wire) : 0;
    double gather_emb = zero3 ? plan_allgather_s(d->hw, c->dp, dstride, vocab_shard * wire) : 0;
    /* the head's units on each chunk, split as the trainer runs them (pipe_chunk_costs: a shard
     * before the last computes its logits in forward, one of the fused head's three products,
     * and the gradient products in backward; the last runs the fused head on its rows; shard 0
     * the final LayerNorm's backward): its forward and backward, then likewise its FLOPs */
    pipe_chunk_cost hc = {.block_fwd = bc.fwd + bc.tp_fwd, .block_bwd = bc.bwd + bc.tp_bwd,
                          .embed_fwd = emb_f, .embed_bwd = emb_b, .head_fwd = hf, .head_bwd = hb,
                          .vocab = (int)m->vocab,
                          .head_recompute = c->recompute == COH_RECOMPUTE_FULL};
    pipe_chunk_costs(&hc, L, shards, bounds, u, head_t, head_t + u);
    pipe_chunk_cost fc = {.block_fwd = bc.flops_fwd + bc.flops_bwd, .head_fwd = hflops,
                          .vocab = (int)m->vocab, .head_recompute = hc.head_recompute};
    pipe_chunk_costs(&fc, L, shards, bounds, u, head_t + 2 * u, head_t + 3 * u);
    for (int k = 0; k < u; k++) {
        plan_chunk *ch = &chunk[k];
        memset(ch, 0, sizeof *ch);
        ch->lo = bounds[k] < L ? bounds[k] : L;
        ch->hi = bounds[k + 1] < L ? bounds[k + 1] : L;
        ch->head_lo = bounds[k] > L ? bounds[k] - L : 0;
        ch->head_hi = bounds[k + 1] > L ? bounds[k + 1] - L : 0;
        ch->first = k == 0;
        ch->last = ch->head_hi > ch->head_lo;
        double nb = ch->hi - ch->lo;
        /* the trainer's chunk cost (pipe_chunk_costs) over the priced block, embeddings and
         * head: its forward and backward, then its FLOPs */
        ch->fwd = head_t[k];
        ch->bwd = head_t[u + k];
        ch->flops = head_t[2 * u + k] + head_t[3 * u + k];
        ch->tp_comm = nb * (bc.tp_fwd + bc.tp_bwd);
        ch->block_params = bp;
        ch->bwd_block = bc.bwd + bc.tp_bwd;
        ch->bwd_top = fmax(0, ch->bwd - nb * ch->bwd_block - (ch->first ? emb_b : 0));
        if (ch->first) {
            if (p > 1)
                ch->wte_params = (int64_t)vocab_shard;
            else
                ch->embed_params = (int64_t)vocab_shard;
            wte_held[0] = (unsigned char)m->tied; /* a head unit here reads this wte */
            if (m->arch == COH_ARCH_GPT2)
                ch->embed_params += m->positions * m->dim;
        }
        if (ch->last) {
            if (ch->head_lo == 0)
                ch->top_params += (int64_t)(2 * h); /* the final LayerNorm goes with shard 0 */
            /* the LM head's weights: a stage holding head units keeps a whole copy of them
             * (tied: of wte, summed with the first stage's) */
            if ((!m->tied || u > 1) && !wte_held[k % p]) {
                if (m->tied)
                    ch->wte_params += (int64_t)vocab_shard;
                else
                    ch->top_params += (int64_t)vocab_shard;
            }
            wte_held[k % p] = 1;
        }
        ch->params = (int64_t)(nb * bp) + ch->top_params + ch->embed_params + ch->wte_params;
        if (zero3) {
            /* each block gathered just before use, the next one prefetched while it runs: a
             * gather stalls compute by what the previous block's compute does not cover */
            double cover_f = d->saturated ? 0 : bc.fwd, cover_b = d->saturated ? 0 : bc.bwd;
            double stall_f = gather_blk + (nb > 1 ? (nb - 1) * fmax(0, gather_blk - cover_f) : 0);
            double stall_b = gather_blk + (nb > 1 ? (nb - 1) * fmax(0, gather_blk - cover_b) : 0);
            double extra = (ch->first ? gather_emb : 0) + (ch->last ? gather_emb : 0);
            ch->zero3_comm = 2 * (nb * gather_blk + extra);
            ch->zero3_exposed = stall_f + stall_b + 2 * extra;
            ch->fwd += stall_f + extra;
            ch->bwd += stall_b + extra;
        }
    }
    free(bounds);
    free(wte_held);
    free(head_t);
    return COH_OK;
}
