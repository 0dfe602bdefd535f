/* par_trainer_int.h: the inside of the parallel trainer (its private struct), shared by its
 * files: buckets, shards, the hooks each strategy installs, and the trace. Public API:
 * include/cohort/parallel.h.
 *
 * One step (every strategy; single is dp = 1 and installs no hooks):
 *   forward  (ZeRO-3: param hook gathers layer l, prefetches the next, frees after use)
 *   backward (grad hook: when a bucket's last layer is done, start its async all-reduce (DDP,
 *             ZeRO-1) or reduce-scatter (ZeRO-2/3); on earlier micro-steps DDP/ZeRO-1 skip it)
 *   wait     (ZeRO-2/3: keep the own chunk of each bucket, release the rest of the gradients)
 *   clip     (global norm: one clipper over what the rank holds, summed over the groups
 *             that split the parameters: dp for ZeRO-2/3, pp, tp)
 *   AdamW    (on the own chunks only for ZeRO; full for single/DDP)
 *   gather   (ZeRO-1/2: all-gather the updated chunks; ZeRO-3 gathers on next use)
 *
 * Buckets are ranges of whole layers taken from the end of the layer-major arena backwards.
 * Each bucket [b, e) is split for ZeRO into dp chunks of q = (e - b) / dp elements; rank r owns
 * [b + r q, b + (r + 1) q) and the last rank also the tail [b + dp q, e), so reduce-scatter
 * and all-gather work in place on the arena and the tail travels by all-reduce / broadcast. */
#ifndef COHORT_PAR_TRAINER_INT_H
#define COHORT_PAR_TRAINER_INT_H

#include <stdio.h>

#include "cohort/parallel.h"
#include "cohort/pipeline.h"
#include "cohort/train_dp.h"
#include "train/backend/backend.h"

typedef struct par_trace par_trace;
typedef struct par_dp par_dp;
typedef struct par_dp_dev par_dp_dev;

/* Elements of the token embedding in the arena of c (a tensor-parallel shard's vocabulary rows). */
static inline size_t par_wte_size(const coh_gpt_config *c)
{
    return (size_t)coh_gpt_vocab_per_shard(c) * (size_t)c->dim;
}
typedef struct par_pipe par_pipe;

typedef struct par_bucket {
    size_t begin, end;     /* arena range */
    int lo, hi;            /* layers lo..hi (-1 embeddings, L final LayerNorm) */
    size_t q;              /* ZeRO chunk per rank */
    size_t own_b, own_e;   /* this rank's chunk (with the tail on the last rank) */
    size_t acc_off;        /* offset of the own chunk in the accumulation buffer */
    coh_comm_req *req[2];  /* main op and tail op in flight */
    int busy;              /* gradient communication issued, not yet collected */
    double t_issue;        /* trace: when it was issued */
    coh_comm_req *preq[2]; /* ZeRO parameter all-gather (main, tail) in flight */
    int pbusy, present;    /* gather issued; parameters whole (ZeRO-3) */
    double t_pissue;
    /* the part this rank does not own is given back to the backend (not held) */
    int params_away, grads_away;
} par_bucket;

struct coh_par_trainer {
    coh_par_config cfg;
    const coh_backend *be; /* the model's: every buffer and give-back of the rank */
    coh_mesh *mesh;
    coh_comm *dp;
    int ndp, rdp;
    int zero_stage;        /* the ZeRO stage: 1..3 (1 at most with pp > 1), or 0 (single, ddp);
                              never a pipeline stage (those are par_pipe's) */
    coh_trainer *base;
    par_dp *threads;       /* strategy dp: devices 1.. as ranks that are threads (par_dp.c) */
    int step_threads;      /* > 0: a step computes with this many threads (dp: one a device) */
    coh_gpt *model;
    float *params, *grads; /* the engine's arenas (n floats) */
    float *grads_shm;      /* DDP/ZeRO-1: grads moved into the transport's arena (owned) */
    uint16_t *g16;         /* --grad-reduce-dtype bf16: the buckets' bf16 copies in flight (n;
                              DDP/ZeRO-1 in the transport's arena when it has room) */
    int g16_shm;           /* g16 came from coh_comm_alloc */
    size_t n;
    par_bucket *bk;        /* in backward order: bk[0] holds the last layers */
    int nbk;
    int *bucket_of;        /* (L + 2) bucket of layer l at [l + 1] */
    int last_micro;        /* this micro-step communicates gradients */
    coh_status err;        /* first failure inside a hook (hooks cannot return one) */
    float *gacc;           /* ZeRO-2/3 with accum > 1: own chunks accumulated, back to back */
    float *grads_apart;    /* micro-batches summed apart: where each but the first sums its
                              gradient before it is added to grads (pipe_exec.c) */
    size_t own_total;
    double *t_need;        /* (L + 2) trace: when layer l's NEED arrived */
    int *need_ev;          /* (L + 2) the NEED event kind, for the trace name */
    int *seq;              /* (2L + 4) expected NEED order of one step, for prefetching */
    int nseq, seqpos;
    int seq_train;           /* the step walking seq writes gradients (not an evaluation) */
    par_trace *trace;
    coh_model_state_bytes peak;
    coh_model_state_bytes *dev_peak; /* (ndev) each device's peak; dp has one per device */
    int ndev;
    size_t *own_rb, *own_re; /* (nown) the optimizer's ranges in arena order */
    int nown;
    par_pipe *exec;          /* this rank's stage and its schedule's action list, for any pp
                                (pp = 1: the one-stage list); run by par_forward_backward */
    par_pipe *pipe;          /* pp > 1: exec, the pipeline (NULL with one stage) */
    size_t *rep_b, *rep_e;   /* tp > 1: arena ranges of the replicated tensors, sorted */
    int nrep;
    size_t *clip_b, *clip_e; /* (nclip) the clipper's ranges (par_clip_plan) */
    unsigned char *clip_counted;
    int nclip;
    double tp_step_s;        /* the last step's time in tensor-parallel all-reduces */
};

/* buckets.c */
coh_status par_plan_buckets(coh_par_trainer *t);
/* The bucket plan of rank rdp of ndp over what a pipeline stage of layout `lay` holds (NULL: the
 * whole model) into bk (L + 3 long) and bucket_of (L + 2); returns the bucket count, *own_total
 * the elements this rank owns under ZeRO. Pure. */
int par_bucket_plan(const coh_gpt_config *c, const coh_pipe_stage *lay, int zero_stage, int ndp,
                    int rdp, size_t bucket_bytes, par_bucket *bk, int *bucket_of,
                    size_t *own_total);
/* Zero [b, e) of `base` and give what it can of it back through the backend, counting nothing
 * (the give-backs below count). */
void par_release(float *base, size_t b, size_t e);
/* ZeRO: bucket b's parameters (gradients) this rank does not own given back to the backend,
 * and taken back before they are written again (gathered; backward). Each counts once in the
 * allocator's figures, however often it is called. */
void par_params_give_back(coh_par_trainer *t, par_bucket *b);
void par_params_take_back(coh_par_trainer *t, par_bucket *b);
void par_grads_give_back(coh_par_trainer *t, par_bucket *b);
void par_grads_take_back(coh_par_trainer *t, par_bucket *b);
/* Every bucket's gradients zeroed and given back (ZeRO-2/3 between steps; own chunks too). */
void par_grads_give_back_all(coh_par_trainer *t);
/* Bytes of [b, e) of `base` in resident pages. */
uint64_t par_resident(const coh_backend *be, const float *base, size_t b, size_t e);

/* grad_sync.c */
void par_grad_hook(void *ctx, int layer, size_t begin, size_t end);
/* Start bucket k's reduction now (one no layer's report starts: a head stage's copy of wte). */
coh_status par_grad_issue(coh_par_trainer *t, int k);
/* Collect finished (or, with `all`, every) bucket communication. */
coh_status par_grad_collect(coh_par_trainer *t, int all);
/* The ranges the clipper sums and scales (clip_b, clip_e, clip_counted): the gradients this rank
 * holds after the sync (all of them; ZeRO-2/3's own chunks; a stage's ranges), each parameter of
 * the whole model counted on one rank only: the head's copy of the tied wte is left to the first
 * stage, the tensors a tensor-parallel shard holds whole to tp rank 0. After the build. */
coh_status par_clip_plan(coh_par_trainer *t);
/* The one clipper (train/optim/clip.h) over those ranges and the groups that split them. */
double par_clip(coh_par_trainer *t);
/* The replicated tensors' ranges of a tensor-parallel shard (rep_b, rep_e). */
coh_status par_find_replicated(coh_par_trainer *t);

/* par_dp.c: strategy dp. After the rank's own model and optimizer are built (device 0): the
 * replicas (each a one-rank trainer of its own running the executor), their threads and the
 * thread group joining them (t->threads, t->ndev). */
coh_status par_dp_build(coh_par_trainer *t);
/* What strategy dp cannot run: a device count outside 1..COH_DP_MAX_DEVICES, several ranks (its
 * devices are threads of one), tp, pp, a trace. */
coh_status par_dp_check(const coh_par_config *c, const coh_mesh *m);
void par_dp_destroy(par_dp *dp); /* NULL-safe */
/* The executor's device hooks (pipe_exec.c, one-stage lists). Before micro-batch mb's forward:
 * device 0 wakes the others at mb 0 (the step's batches are read), then the parameters are
 * broadcast from device 0 and a replica's gradients zeroed. After its backward, with the
 * device's compute status: whether any device failed and the summed loss reach every device
 * (all stop after the same micro-batch; device 0 names the first that failed), the gradients
 * are summed into device 0's, and *loss gets the micro-batch's mean over every device's tokens. */
coh_status par_dp_replicate(par_dp_dev *d, int mb);
coh_status par_dp_reduce(par_dp_dev *d, int slot, coh_status computed, double *loss);
/* Device d's model (0: the trainer's) and the OpenMP threads its last micro-step ran with (0
 * before one); NULL / 0 for d out of range. */
coh_gpt *par_dp_device_model(const par_dp *dp, int d);
int par_dp_device_threads(const par_dp *dp, int d);

/* par_step.c: this rank's arena whole, in its own layout (a tensor-parallel shard's): the
 * ranges of its stage (all of them with one stage; the tied wte from the first stage only),
 * ZeRO-3's shards gathered over dp, summed over the pipeline's stages. Collective over dp
 * (ZeRO-3) and pp. */
coh_status par_gather_own(coh_par_trainer *t, float *out);

/* pipe_exec.c: pipeline parallelism (pp > 1) */
/* Receives the pipeline's receiver thread may hold at once, the one being read included. */
#define PIPE_RECV_DEPTH 3
coh_status par_pipe_create(coh_par_trainer *t, par_pipe **out); /* *out set even on failure */
/* Strategy dp: the executor runs device id of n with dev's hooks; each micro-batch holds every
 * device's rows, read by device 0's executor (first, set before the others) and shared. */
coh_status par_pipe_set_device(par_pipe *pp, par_dp_dev *dev, int id, int n, par_pipe *first);
void par_pipe_destroy(par_pipe *pp);
int par_pipe_slots(const par_pipe *pp);
/* The model's head shards for this stage (after coh_gpt_set_slots): nothing with the head
 * whole; their logits kept for the backward unless `recompute`. */
coh_status par_pipe_setup_model(const par_pipe *pp, coh_gpt *model, int recompute);
const coh_pipe_stage *par_pipe_layout(const par_pipe *pp);
/* Zero and give back the pages of every parameter this stage does not hold (after a full load;
 * one stage holds them all). */
void par_pipe_keep_own(coh_par_trainer *t, float *params);
/* pipe_layout.c: the estimated compute of a model chunk, in any one unit: per block, and what
 * the first virtual stage (embeddings) and the last (final LayerNorm, LM head, loss) add. */
typedef struct pipe_chunk_cost {
    double block_fwd, block_bwd, embed_fwd, embed_bwd, head_fwd, head_bwd;
    int vocab;          /* rows of the head, for the shards' shares (0: equal shares) */
    int head_recompute; /* a head shard before the last recomputes its logits in backward */
} pipe_chunk_cost;
/* Most head shards the trainer's own split considers. */
#define PIPE_AUTO_HEAD_SHARDS 4
/* The engine's costs per token of model c at sequence length T (multiply-adds). */
void pipe_estimate_costs(const coh_gpt_config *c, int T, pipe_chunk_cost *out);
/* Each of u virtual stages' forward and backward time for bounds b[0..u] over the chain of L
 * blocks then n head shards (b[u] = L + n). */
void pipe_chunk_costs(const pipe_chunk_cost *c, int L, int n, const int *b, int u, double *fwd,
                      double *bwd);
/* Blocks 0..L-1 in u = p * v contiguous virtual stages of `shape` (virtual stage k on stage
 * k mod p): bounds[0..u]. Starts from the split that balances each stage's summed compute with
 * at least one block a chunk, and from it with the first chunk the embeddings alone and the
 * last the head alone; from each, moves boundaries while the schedule's action lists, simulated
 * with these costs, give a strictly shorter step. Deterministic and bounded (a few ms);
 * pipelines over 2^16 stages x microbatches x chunks keep the balanced split. *step and
 * *balanced_step (each may be NULL) get the simulated steps of the choice and of the balanced
 * split (NAN when not simulated). COH_ERR_NOMEM, or COH_ERR_INVALID for the shape or more
 * virtual stages than blocks. */
/* The head is tried whole and in 2..max_shards shards (the chain of blocks then shards, as
 * coh_pipe_parse_split): bounds[0..u] in chain units, *shards the count; more shards only when
 * 2% shorter (their messages and extra passes are not in the costs). Where the chain's splits
 * are few enough (a quarter of the budget), every split is also simulated. */
coh_status pipe_choose_split(const pipe_chunk_cost *cost, int L, const coh_pipe_shape *shape,
                             int max_shards, int *bounds, int *shards, double *step,
                             double *balanced_step);
/* pipe_choose_split with the engine's costs of model c and the head whole, bounds over blocks
 * (bounds[u] = L; the planner's pricing where head shards are not the trainer's: GPUs, other
 * heads); the balanced split when it fails (the error cleared). */
void par_pipe_split(const coh_gpt_config *c, int T, const coh_pipe_shape *shape, int *bounds);
/* Whether `shards` head shards, as split `split` names them, can run: none with tensor
 * parallelism (it splits the vocabulary already), at most one per vocabulary row. COH_ERR_INVALID
 * naming the split. */
coh_status par_pipe_check_shards(const char *split, int shards, int tp, int vocab);
/* The trainer's split: pipe_choose_split with the engine's costs, head shards considered (up to
 * PIPE_AUTO_HEAD_SHARDS, none with tensor parallelism), chain bounds. */
void par_pipe_split_chain(const coh_gpt_config *c, int T, const coh_pipe_shape *shape,
                          int recompute, int *bounds, int *shards);
/* The activation slots a stage's list needs: the most micro-batches with a chunk forwarded and
 * not yet backwarded (-1 out of memory). */
int par_pipe_count_slots(const coh_pipe_action *a, int n, int m);
/* The step's forward and backward for any (dp, pp, tp) and strategy dp's every device: this
 * rank's action list run over the step's micro-batches, then the gradients reduced (the tied
 * embedding over its group, what the hooks have in flight over dp); *loss the step's mean over
 * the pipeline. next NULL: a dp replica, reading its rows of device 0's batches. */
coh_status par_forward_backward(coh_par_trainer *t, coh_batch_fn next, void *ctx, double *loss);
/* One evaluation micro-batch through the stage (forward only; every pp, dp's device 0 alone);
 * the last stage adds its loss to *loss. par_pipe_drain after the last: the sends still in
 * flight. */
coh_status par_pipe_eval_batch(coh_par_trainer *t, coh_batch_fn next, void *ctx, double *loss);
coh_status par_pipe_drain(coh_par_trainer *t);
/* The group of the stages holding a copy of the tied wte (NULL: none). */
coh_comm *par_pipe_embed(const par_pipe *pp);
/* "0-2" or, with chunks, "0-0,4-4": the layers this rank holds. */
void par_pipe_describe(const par_pipe *pp, char *buf, size_t cap);

/* tensor_parallel.c: the whole model's arena (`whole` floats) in `out` on every rank of the tp
 * group, from each rank's shard arena. Collective over tp. */
coh_status par_tp_gather(coh_par_trainer *t, const float *shard, float *out, size_t whole);

/* zero.c */
void par_param_hook(void *ctx, int layer, coh_param_event ev, size_t begin, size_t end);
/* Start and wait for the all-gather of bucket k's parameters (ZeRO). */
coh_status par_gather_bucket(coh_par_trainer *t, int k, int wait);
coh_status par_wait_bucket(coh_par_trainer *t, int k);
/* Release every parameter this rank does not own (ZeRO-3 at rest). */
void par_release_params(coh_par_trainer *t);
void par_reset_sequence(coh_par_trainer *t, int train);

/* trace.c: Chrome trace events (JSON), "X" complete events in microseconds. */
coh_status par_trace_open(const char *path, int rank, par_trace **out);
/* The shared monotonic clock (cohort/clock.h) in microseconds, the unit of the events. */
double par_now_us(void);
void par_trace_event(par_trace *tr, const char *name, const char *cat, int tid, double t0,
                     double t1);
coh_status par_trace_close(par_trace *tr);

#endif
