/* device_int.h: helpers shared by the files of the device layer (not public API). */
#ifndef COHORT_DEVICE_INT_H
#define COHORT_DEVICE_INT_H

#include <stddef.h>

#include "cohort/device.h"

/* An empty inventory (no GPUs, zeroed CPU). NULL on allocation failure. */
coh_inventory *inv_alloc(void);

/* Probe NVIDIA GPUs through NVML into inv (appending); no library = note, not an error. */
coh_status nvml_probe(coh_inventory *inv);

/* Append the Apple MPS device on macOS with Apple silicon (unless DISABLE_MPS=1); nothing
 * on other systems. */
coh_status mps_probe(coh_inventory *inv);

/* CPU probing below a root directory ("" for the real machine; tests build a fake tree). */
coh_status cpu_probe_root(const char *root, coh_cpu_info *out);

/* Order of the NVIDIA GPUs in PCI bus order (by physical_index); returns the count. */
int nvidia_pci_order(const coh_inventory *inv, int *order, int cap);

/* pick.c internals shared with reserve.c */
coh_status pick_prepare(const coh_visible *vis, const coh_pick_opts *o, coh_pick_result *res);
int pick_rank(const coh_inventory *inv, const coh_visible *vis, const coh_pick_opts *o,
              coh_pick_result *res, int *rank);
/* reserve.c: drop from rank[0..nr) the devices another process reserved (their reason says
 * who); returns how many are left. */
int pick_skip_reserved(const coh_inventory *inv, const coh_visible *vis, coh_pick_result *res,
                       int *rank, int nr);
void pick_rejections(const coh_inventory *inv, const coh_visible *vis, const coh_pick_result *res,
                     char *buf, size_t cap);

/* visible*.c internals: one comma-separated entry of a visibility variable. */
typedef struct entry {
    char text[128];
    int pos;    /* 1-based */
    int spaced; /* spaces around it were dropped */
} entry;
int vis_vendor_list(const coh_inventory *inv, coh_vendor v, int *out, int cap);
int vis_split(const char *value, entry *out, int cap);
int vis_int_entry(const char *t, long *v);
void vis_set_cut(coh_visible *v, const char *var, const char *value, const entry *e,
                 coh_cut_reason r, const char *detail, const char *consequence);
int vis_push(coh_visible *v, int gpu, int mig, int tile);
int vis_uuid_match(const coh_inventory *inv, const int *cand, int n, const char *text);
coh_status visible_cuda(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v);
coh_status visible_ze(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v);
/* ZE_AFFINITY_MASK index of visible device d for a child with env's ZE_FLAT_DEVICE_HIERARCHY:
 * its card's index (COMPOSITE; a tile is then written N.M) or its FLAT device index. */
int ze_mask_index(const coh_inventory *inv, const coh_vis_env *env, const coh_visible_device *d);
int ze_is_flat(const coh_vis_env *env);
coh_status visible_rocm(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v);
coh_status visible_hpu(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v);
coh_status visible_mps(const coh_inventory *inv, coh_visible *v);

#endif
