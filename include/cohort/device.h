/* device.h: what accelerators the machine has, which of them a program will see and in what
 * order, device specs (--accelerator/--devices), picking free devices and reserving them.
 * Thread safety: the functions keep no global state (errors go to the calling thread's
 * message), so they may be called from several threads on distinct objects; an object
 * (inventory, visible set, result) may be read by several threads at once. */
#ifndef COHORT_DEVICE_H
#define COHORT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COH_DEV_NAME_MAX 96  /* bytes, with the NUL */
#define COH_DEV_UUID_MAX 96
#define COH_DEV_BUSID_MAX 32
#define COH_DEV_NOTE_MAX 512
#define COH_INVENTORY_MAX_BYTES (16 << 20) /* an inventory file is read up to this size */

/* ---- inventory: what the machine has ------------------------------------------------------- */

/* HABANA: Intel Gaudi (HPU); APPLE: the one Metal (MPS) device of an Apple silicon Mac. */
typedef enum coh_vendor {
    COH_VENDOR_NVIDIA,
    COH_VENDOR_INTEL,
    COH_VENDOR_AMD,
    COH_VENDOR_HABANA,
    COH_VENDOR_APPLE
} coh_vendor;
#define COH_VENDOR_COUNT 5

typedef enum coh_compute_mode {
    COH_COMPUTE_DEFAULT,
    COH_COMPUTE_EXCLUSIVE_PROCESS,
    COH_COMPUTE_PROHIBITED
} coh_compute_mode;

/* One MIG instance of an NVIDIA GPU. */
typedef struct coh_mig {
    char uuid[COH_DEV_UUID_MAX]; /* "MIG-..." */
    int gpu_instance;
    int compute_instance;
    uint64_t memory_total_mib;
    uint64_t memory_used_mib;
    int processes;
} coh_mig;

/* One physical accelerator. */
typedef struct coh_gpu {
    coh_vendor vendor;
    int physical_index;             /* position among this vendor's devices in PCI bus order:
                                       the nvidia-smi index for NVIDIA */
    char name[COH_DEV_NAME_MAX];
    char uuid[COH_DEV_UUID_MAX];    /* "GPU-..." for NVIDIA */
    char pci_bus_id[COH_DEV_BUSID_MAX]; /* "00000000:07:00.0"; "" when unknown */
    uint64_t memory_total_mib;
    uint64_t memory_used_mib;
    int utilization_pct;            /* 0..100 */
    coh_compute_mode compute_mode;
    int processes;                  /* running compute processes */
    char owners[128];               /* "alice,bob": owners of those processes where visible */
    int cc_major, cc_minor;         /* CUDA compute capability; 0.0 when unknown */
    int multiprocessors;
    int clock_mhz;                  /* max SM clock */
    int tiles;                      /* Intel: sub-devices (>= 1); 1 for others */
    int module_id;                  /* Gaudi: the module id HABANA_VISIBLE_MODULES names
                                       (hl-smi module_id, not its index); -1 for others */
    int nmig;                       /* MIG instances (NVIDIA with MIG mode enabled) */
    coh_mig *mig;
} coh_gpu;

/* The CPU side of the machine. */
typedef struct coh_cpu_info {
    int cores_online;      /* logical CPUs online on the machine */
    int numa_nodes;        /* >= 1 */
    int affinity_cores;    /* CPUs in this process's affinity mask */
    double cgroup_limit;   /* CPUs allowed by the cgroup quota (cpu.max / cfs_quota); 0 = none */
    int cores_available;   /* min(affinity_cores, ceil(cgroup_limit)), >= 1 */
} coh_cpu_info;

/* A link of an inventory file's "links" (docs/inventory.md), one way, per device: what the
 * planner prices communication with. Device selection does not use it, but the file is checked
 * whole, so every command that reads it refuses the same bad link. gbytes_per_s 0: not given. */
typedef struct coh_inventory_link {
    double gbytes_per_s; /* 1e-6 to 1e6 when given */
    double latency_us;   /* 0 to 1e7 */
} coh_inventory_link;

typedef struct coh_inventory {
    coh_cpu_info cpu;
    int ngpus;
    coh_gpu *gpus;         /* per vendor in PCI bus order (the order of an inventory file) */
    char source[COH_DEV_NOTE_MAX]; /* "nvml", "inventory file <path>", "probe" */
    char note[COH_DEV_NOTE_MAX];   /* one-line note, e.g. that no NVIDIA driver was found; "" */
    coh_inventory_link intra_node, inter_node; /* an inventory file's "links"; a probe: none */
} coh_inventory;

/* Probe the CPU: cores online and NUMA nodes from /sys, the affinity mask, and the cgroup v2
 * (cpu.max) or v1 (cpu.cfs_quota_us / cpu.cfs_period_us) limit of this process.
 * Errors: none in practice; missing /sys files fall back to sysconf and "no limit". */
coh_status coh_cpu_probe(coh_cpu_info *out);

/* Probe the machine: the CPU and NVIDIA GPUs through NVML, loaded at run time with
 * dlopen("libnvidia-ml.so.1") (env COHORT_NVML_LIB names another file, for tests). No library
 * or no driver is not an error: zero GPUs and inv->note says why. A GPU whose basic queries
 * fail (no permission, fallen off the bus) is left out and the note names it, the function
 * and nvmlErrorString. Errors: COH_ERR_NOMEM; COH_ERR_SYSTEM when nvmlDeviceGetCount_v2 fails
 * after a successful init. Ownership: *out is the caller's, free with coh_inventory_destroy. */
coh_status coh_inventory_probe(coh_inventory **out);

/* Parse an inventory document (schema in docs/inventory.md); `name` prefixes every error, as
 * in "inventory.json: gpus[1].compute_mode: 'shared' is not one of default,
 * exclusive_process, prohibited". Without a "cpu" block the CPU is probed.
 * Errors: COH_ERR_INVALID naming the JSON path and the bad value; COH_ERR_NOMEM. */
coh_status coh_inventory_parse(const char *text, size_t len, const char *name,
                               coh_inventory **out);

/* Read and parse an inventory file of at most COH_INVENTORY_MAX_BYTES. Errors: as
 * coh_inventory_parse, plus COH_ERR_INVALID for a larger file or a directory,
 * COH_ERR_IO / COH_ERR_NOT_FOUND naming the path. */
coh_status coh_inventory_load(const char *path, coh_inventory **out);

/* The inventory a command should use: the file `path` when not NULL, else the file named by
 * env COHORT_INVENTORY when set and non-empty, else coh_inventory_probe. */
coh_status coh_inventory_open(const char *path, coh_inventory **out);

/* NULL-safe. */
void coh_inventory_destroy(coh_inventory *inv);

/* ---- visibility and order ------------------------------------------------------------------ */

/* The kinds of device a program can be asked to use. */
typedef enum coh_accel {
    COH_ACCEL_AUTO,  /* Lightning's order: hpu, then mps, then cuda if any such device is
                        visible; then xpu, then rocm; else cpu */
    COH_ACCEL_CPU,
    COH_ACCEL_CUDA,
    COH_ACCEL_XPU,   /* Intel, Level Zero */
    COH_ACCEL_ROCM,  /* AMD, HIP */
    COH_ACCEL_HPU,   /* Intel Gaudi, HABANA_VISIBLE_MODULES */
    COH_ACCEL_MPS,   /* Apple silicon, one device, no visibility variable */
    COH_ACCEL_GPU    /* Lightning's "gpu": mps when an MPS device is there, else cuda */
} coh_accel;

/* Parse "auto", "cpu", "cuda", "gpu", "xpu", "rocm", "hpu" or "mps".
 * Errors: COH_ERR_INVALID "invalid accelerator 'tpu': expected one of auto, cpu, cuda, gpu,
 * mps, hpu, xpu, rocm". */
coh_status coh_accel_parse(const char *text, coh_accel *out);
const char *coh_accel_name(coh_accel a); /* "cuda", ...; never NULL */

/* The environment variables that decide visibility; NULL means unset (which differs from ""). */
typedef struct coh_vis_env {
    const char *cuda_visible_devices;
    const char *cuda_device_order;
    const char *ze_affinity_mask;
    const char *ze_enable_pci_id_device_order;
    const char *ze_flat_device_hierarchy;
    const char *rocr_visible_devices;
    const char *hip_visible_devices;
    const char *habana_visible_modules;
    int one_device_per_worker; /* 0: what one process sees, which holds at most one MIG
                                  instance (NVIDIA: "a single CUDA process can only enumerate a
                                  single MIG device"); 1: the devices a job hands out one per
                                  worker (cohort pick, --bind-devices): every MIG instance
                                  listed stays */
} coh_vis_env;

/* Fill *env from this process's environment (getenv; the pointers stay owned by it);
 * one_device_per_worker is 0. */
void coh_vis_env_from_process(coh_vis_env *env);

/* The list a HIP program reads after ROCR_VISIBLE_DEVICES (ROCm CLR): HIP_VISIBLE_DEVICES
 * when set and not empty, else CUDA_VISIBLE_DEVICES when set and not empty (*var names
 * which), else NULL: every device ROCR leaves. */
const char *coh_hip_visible_value(const coh_vis_env *env, const char **var);

/* Why a visibility list was cut (the runtime stops reading it there). */
typedef enum coh_cut_reason {
    COH_CUT_NONE,
    COH_CUT_MALFORMED,    /* not an index, GPU-<uuid> or MIG-<uuid> (or N / N.M for ZE) */
    COH_CUT_NEGATIVE,     /* a negative index such as -1, the usual way to hide the rest */
    COH_CUT_OUT_OF_RANGE, /* an index past the number of devices */
    COH_CUT_NO_MATCH,     /* a uuid (prefix) that matches no device */
    COH_CUT_AMBIGUOUS,    /* a uuid prefix that matches several devices */
    COH_CUT_EMPTY_ENTRY,  /* "0,,1" or a trailing comma */
    COH_CUT_DUPLICATE,    /* a device listed twice: CUDA then shows no device at all */
    COH_CUT_SPACED_ID     /* " GPU-..." or "MIG-... ": CUDA reads the spaces as part of the
                             uuid (PyTorch's parser, checked against NVIDIA's driver) */
} coh_cut_reason;

/* One device as a program will see it, at its logical index. */
typedef struct coh_visible_device {
    int gpu;   /* index into inv->gpus */
    int mig;   /* index into gpus[gpu].mig, or -1 for the whole device */
    int tile;  /* Intel sub-device, or -1 for the whole device */
} coh_visible_device;

typedef struct coh_visible {
    coh_accel accel;
    int count;
    coh_visible_device *dev;    /* count entries, logical order: dev[i] is cuda:i (xpu:i, ...) */
    coh_cut_reason cut;         /* COH_CUT_NONE when the whole variable was used */
    int cut_entry;              /* 1-based position of the entry where the list was cut */
    char cut_note[COH_DEV_NOTE_MAX]; /* "CUDA_VISIBLE_DEVICES='0,2,-1,1': entry 3 '-1' is
                                        negative; the runtime ignores it and every entry
                                        after it (visible: 0,2)"; "" when not cut */
    int order_differs;          /* CUDA: CUDA_DEVICE_ORDER unset and FASTEST_FIRST order
                                   differs from PCI (nvidia-smi) order */
    char order_note[COH_DEV_NOTE_MAX]; /* warning text for order_differs, or an unknown
                                          CUDA_DEVICE_ORDER value */
    char note[COH_DEV_NOTE_MAX]; /* a warning that is not a cut, "" when none. CUDA, one
                                    process: the MIG instances the variable lists after the
                                    first, which that process cannot use and which are left
                                    out of dev. Level Zero: ZE_FLAT_DEVICE_HIERARCHY is unset
                                    on a machine with multi-tile devices, and FLAT is assumed */
} coh_visible;

/* The devices of kind `accel` (CUDA, XPU, ROCM, HPU or MPS; AUTO and GPU resolve as
 * documented above; CPU yields count 0) a program started with `env` sees, in logical order,
 * with the rules of
 * docs/devices.md: CUDA_VISIBLE_DEVICES with CUDA_DEVICE_ORDER (FASTEST_FIRST default:
 * compute capability, then multiprocessors x clock, then PCI bus id - an approximation of
 * CUDA's unpublished heuristic; or PCI_BUS_ID; one MIG instance per process unless
 * env->one_device_per_worker), ZE_AFFINITY_MASK (selects, never reorders) over the devices
 * ZE_FLAT_DEVICE_HIERARCHY makes (FLAT, COMBINED and unset: each tile; COMPOSITE: each card)
 * with ZE_ENABLE_PCI_ID_DEVICE_ORDER, ROCR_VISIBLE_DEVICES then HIP_VISIBLE_DEVICES (or
 * CUDA_VISIBLE_DEVICES, see coh_hip_visible_value; HIP skips a repeated device),
 * HABANA_VISIBLE_MODULES (module ids; local rank N uses the N-th; unset: all modules by id).
 * A list the runtime would cut is not an error: out->cut says where and why.
 * Errors: COH_ERR_INVALID for a HABANA_VISIBLE_MODULES value the Gaudi runtime refuses (see
 * coh_hpu_modules_parse); COH_ERR_NOMEM. Ownership: release *out with coh_visible_release. */
coh_status coh_visible_compute(const coh_inventory *inv, coh_accel accel,
                               const coh_vis_env *env, coh_visible *out);
void coh_visible_release(coh_visible *v); /* NULL-safe; leaves *v empty */

/* Parse a HABANA_VISIBLE_MODULES value against the module ids present (ids[0..nids)): writes
 * the listed ids, in order, to out[] (cap entries) and their count to *n. Habana documents a
 * comma-separated list of unique module ids of this machine, one per local rank; the runtime
 * refuses an id that is not there, and cohort refuses what the documentation leaves open
 * (empty value or entry, repeated id, spaces inside a number, signs) instead of guessing.
 * Errors: COH_ERR_INVALID naming the value, the entry and the valid ids. */
coh_status coh_hpu_modules_parse(const char *value, const int *ids, int nids, int *out, int cap,
                                 int *n);

/* The device order CUDA enumerates with (before CUDA_VISIBLE_DEVICES): writes up to cap
 * indices into inv->gpus to order[] and returns how many NVIDIA GPUs there are. */
int coh_cuda_order(const coh_inventory *inv, const coh_vis_env *env, int *order, int cap);

/* ---- device specs (Lightning's --devices rules) -------------------------------------------- */

typedef enum coh_spec_kind {
    COH_SPEC_COUNT, /* "3": the first three */
    COH_SPEC_ALL,   /* "-1", "auto": all visible */
    COH_SPEC_LIST   /* "1, 3", "[1,3]", "3,": those logical indices, in that order */
} coh_spec_kind;

typedef struct coh_device_spec {
    coh_spec_kind kind;
    int count;          /* COH_SPEC_COUNT (0 for "0") */
    int n;              /* COH_SPEC_LIST: entries in indices (0 for "[]") */
    int indices[64];
} coh_device_spec;

/* Parse a --devices value. Errors: COH_ERR_INVALID naming the text, the bad entry and what is
 * valid ("invalid device spec '1,,3': empty entry at position 2", negative values other than
 * -1, duplicates, more than 64 entries). "0" and "[]" parse (they select nothing); resolving
 * them for a GPU accelerator is the error. */
coh_status coh_device_spec_parse(const char *text, coh_device_spec *out);

/* What a spec selects, as logical indices 0..available-1 written to out[] (cap >= available;
 * a smaller cap keeps the first cap of them). For COH_ACCEL_CPU the spec is a number of
 * processes: *n_out is that number, "-1"/"auto" meaning `available` (pass the available
 * cores), and out[] gets 0..n-1.
 * Errors: COH_ERR_INVALID naming the spec and the valid range: nothing selected for a GPU
 * accelerator, a count above `available`, an index >= available, a list for cpu;
 * COH_ERR_NOT_FOUND when a GPU accelerator has no visible device at all. */
coh_status coh_device_spec_resolve(const coh_device_spec *spec, const char *text,
                                   coh_accel accel, int available, int *out, int cap,
                                   int *n_out);

/* ---- what a child process must be given ------------------------------------------------------ */

typedef enum coh_id_format { COH_ID_INDEX, COH_ID_UUID } coh_id_format;

/* The variable (CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK, HIP_VISIBLE_DEVICES or
 * HABANA_VISIBLE_MODULES: the module ids in the chosen order) and its value
 * that make a child process, which inherits the rest of `env`, see exactly the visible devices
 * vis->dev[logical[0..n-1]] in that order (ZE cannot reorder: the child sees them in
 * enumeration order). CUDA values refer to the order CUDA_DEVICE_ORDER gives the child; MIG
 * instances are always written as their UUID; HIP values index into what
 * ROCR_VISIBLE_DEVICES leaves. *var is a static string; MPS has no variable: *var = NULL and
 * value "" (there is one device).
 * Errors: COH_ERR_INVALID (bad logical index, CPU), COH_ERR_NOMEM when cap is too small. */
coh_status coh_child_env(const coh_inventory *inv, const coh_visible *vis, const coh_vis_env *env,
                         const int *logical, int n, coh_id_format fmt, const char **var,
                         char *value, size_t cap);

/* ---- one call for a launcher ---------------------------------------------------------------- */

typedef struct coh_selection {
    coh_accel accel;      /* resolved: never COH_ACCEL_AUTO */
    int n;                /* devices selected; for cpu the number of processes */
    int *logical;         /* n logical indices into the visible devices (none for cpu) */
    const char *var;      /* variable to set in the child; NULL for cpu and mps */
    char *value;          /* its value ("" for cpu and mps) */
    coh_visible vis;      /* the visible devices of `accel` */
} coh_selection;

/* Resolve `accel` (AUTO as documented at coh_accel), compute what is visible under env,
 * apply the --devices spec (NULL = "auto") and format the child's variable with COH_ID_INDEX.
 * Errors: those of coh_device_spec_parse / coh_device_spec_resolve / coh_visible_compute.
 * Ownership: release with coh_selection_release. */
coh_status coh_devices_select(const coh_inventory *inv, const coh_vis_env *env, coh_accel accel,
                              const char *spec, coh_selection *out);
void coh_selection_release(coh_selection *s); /* NULL-safe */

/* ---- pick: devices that are free right now ------------------------------------------------- */

typedef struct coh_pick_opts {
    int n;                    /* devices wanted, >= 1 */
    uint64_t min_free_mib;    /* 0 = no requirement */
    int max_utilization_pct;  /* 100 = no requirement */
    int allow_shared;         /* devices with compute processes count as usable */
} coh_pick_opts;

/* Defaults: n = 1, no memory or utilization requirement, busy devices rejected. */
void coh_pick_opts_init(coh_pick_opts *o);

typedef struct coh_pick_candidate {
    int logical;              /* index into vis->dev */
    int usable;
    char reason[160];         /* why not usable: "compute mode is prohibited", ... */
    uint64_t free_mib;
    int utilization_pct;
} coh_pick_candidate;

typedef struct coh_pick_result {
    int npicked;
    int picked[64];           /* logical indices, best first */
    int ncand;
    coh_pick_candidate *cand; /* every visible device, in logical order */
} coh_pick_result;

/* Choose o->n usable devices among vis (rules in docs/devices.md): visible, not prohibited,
 * not exclusive_process with a process on it, enough free memory, utilization at most the
 * limit, no compute process unless allow_shared, not reserved by another process (a lock
 * coh_pick_reserve holds, except this process's parent's); prefer most free memory, then least
 * utilization, then lower logical index.
 * Errors: COH_ERR_NOT_FOUND when fewer than n are usable (res is still filled and the message
 * names each rejected device and why); COH_ERR_INVALID for n < 1 or n > 64; COH_ERR_NOMEM.
 * Ownership: release res with coh_pick_result_release. */
coh_status coh_pick(const coh_inventory *inv, const coh_visible *vis, const coh_pick_opts *o,
                    coh_pick_result *res);
void coh_pick_result_release(coh_pick_result *res); /* NULL-safe */

/* ---- reservations: advisory locks so concurrent jobs never share a device ------------------- */

typedef struct coh_reservation coh_reservation;

/* Directory of the lock files: env COHORT_LOCK_DIR, else $XDG_RUNTIME_DIR/cohort-locks, else
 * /tmp/cohort-locks-<uid>. Created (mode 0700) on first use. Returns buf. */
char *coh_lock_dir(char *buf, size_t cap);

/* Like coh_pick, then lock the picked devices: walks the usable devices in preference order
 * and takes an exclusive flock() on each one's lock file (a MIG instance or Intel tile also
 * takes a shared lock on its parent, so a whole-device reservation excludes it), skipping
 * devices another process holds, until o->n are held (on failure res->npicked says how many
 * were free, none of them stays locked). The locks are released by
 * coh_reservation_destroy or when the process exits; the files are opened O_CLOEXEC, so
 * children do not inherit them. res->picked holds the reserved devices.
 * lock_dir NULL = coh_lock_dir(). Errors: COH_ERR_BUSY when fewer than n usable devices are
 * free of locks (nothing stays locked; the message names each device and why it was
 * skipped, with the pid holding it); plus coh_pick's errors; COH_ERR_SYSTEM / COH_ERR_IO for
 * the lock directory. Ownership: *out is the caller's. Thread safety: one reservation per
 * thread at a time. */
coh_status coh_pick_reserve(const coh_inventory *inv, const coh_visible *vis,
                            const coh_pick_opts *o, const char *lock_dir, coh_pick_result *res,
                            coh_reservation **out);

/* Release the locks. NULL-safe. */
void coh_reservation_destroy(coh_reservation *r);

#ifdef __cplusplus
}
#endif
#endif
