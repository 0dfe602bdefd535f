/* train_dp.h: DP, single-process data parallelism with one thread per device (the multi-GPU
 * guide's torch.nn.DataParallel design): device 0 scatters the batch, replicates the model,
 * gathers the loss, reduces the gradients and runs the optimizer. A face over the parallel
 * trainer with strategy dp (cohort/parallel.h), whose devices are ranks of a thread group. */
#ifndef COHORT_TRAIN_DP_H
#define COHORT_TRAIN_DP_H

#include "cohort/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most devices one DP trainer drives (each holds a full replica and its activations). */
#define COH_DP_MAX_DEVICES 64

typedef struct coh_dp coh_dp;

/* A DP trainer over `devices` devices. `c->batch` is the micro-batch of ONE device, so the
 * global batch is c->batch * devices * c->accum. Device 0 is a coh_trainer (model initialised
 * from c->seed, AdamW, step counter); devices 1.. get their own coh_gpt replica and a thread
 * that lives until coh_dp_destroy. Every device thread (device 0's is the caller's during
 * coh_dp_step) runs OpenMP and OpenBLAS with exactly one thread.
 * COH_ERR_INVALID naming the bad value (devices outside 1..COH_DP_MAX_DEVICES, a bad config),
 * COH_ERR_NOMEM, COH_ERR_SYSTEM when a thread cannot be started. The caller owns *out. */
coh_status coh_dp_create(const coh_trainer_config *c, int devices, coh_dp **out);

/* Stops the device threads and frees every replica. NULL-safe. */
void coh_dp_destroy(coh_dp *dp);

/* One optimizer step. For each of c->accum micro-steps: next() fills the global micro-batch
 * (devices * batch rows of seq tokens; device d reads rows d*batch..); device 0 copies its
 * parameters into every replica, every device runs forward and backward on its rows, device 0
 * gathers the devices' loss sums and adds every replica's gradients into its own, each over the
 * thread transport (coh_comm_create_threads). Then device 0 clips, schedules and updates,
 * through the parallel trainer's step (the same code as ddp's). The loss equals single-device training on the same
 * global batch. Errors of a device thread come back here with the device named. Not thread
 * safe: one caller at a time; the caller's own OpenMP thread count is restored on return. */
coh_status coh_dp_step(coh_dp *dp, coh_batch_fn next, void *ctx, coh_step_stats *out);

/* Device 0's trainer: the model that is trained, its optimizer and step counter (checkpoints,
 * evaluation, resume). Owned by dp. */
coh_trainer *coh_dp_trainer(coh_dp *dp);

int coh_dp_devices(const coh_dp *dp);

/* Device d's model: device 0's is the trained one (coh_trainer_model of coh_dp_trainer), the
 * others are its replicas. NULL for d outside 0..devices-1. Owned by dp. */
coh_gpt *coh_dp_device_model(coh_dp *dp, int d);

/* The OpenMP thread count device `d` ran its last forward and backward with (0 before the
 * first step or for d out of range): 1 when the per-device thread limit holds. */
int coh_dp_device_threads(const coh_dp *dp, int d);

#ifdef __cplusplus
}
#endif
#endif
