/* shm.c: the shared-memory transport for ranks on one node: one segment per communicator,
 * created mode 0600 under a name holding the user and the job id, and unlinked as soon as
 * every rank has mapped it, so nothing is left in /dev/shm when ranks are killed after that.
 * One left by ranks killed before all had joined is removed by their launcher
 * (coh_shm_remove_launch), by the next creator of the user (seg_sweep: its creator's lock is
 * gone), or replaced by the next run of the job id. */
#define _GNU_SOURCE /* process_vm_readv */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/size.h"
#include "comm/transport/shm_int.h"
#include "util/proc.h"
#include "util/strutil.h"

#define CHAN_BYTES (64u << 10)

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Offsets inside the segment; every rank computes the same from (n, half, arena). */
static size_t off_slots(void) { return align_up(sizeof(shm_ctl), 4096); }
static size_t off_chans(int n) { return off_slots() + sizeof(shm_slot) * (size_t)n; }
static size_t off_stage(int n)
{
    return align_up(off_chans(n) + sizeof(shm_chan) * (size_t)n * (size_t)n, 4096);
}
static size_t off_chanbuf(int n, size_t half) { return off_stage(n) + 2 * half * (size_t)n; }
static size_t off_arena(int n, size_t half)
{
    return off_chanbuf(n, half) + (size_t)CHAN_BYTES * (size_t)n * (size_t)n;
}

shm_slot *shm_slot_of(shm *s, int r) { return (shm_slot *)(s->base + off_slots()) + r; }
shm_chan *shm_chan_of(shm *s, int from, int to)
{
    return (shm_chan *)(s->base + off_chans(s->n)) + from * s->n + to;
}
char *shm_chan_buf(shm *s, int from, int to)
{
    return s->base + off_chanbuf(s->n, s->ctl->half) + (size_t)CHAN_BYTES * (size_t)(from * s->n + to);
}
char *shm_stage(shm *s, int r)
{
    return s->base + off_stage(s->n) + s->ctl->half * (2 * (size_t)r + (s->round & 1));
}
void shm_next_round(shm *s) { s->round++; }
void shm_undo_round(shm *s) { s->round--; }
char *shm_arena(shm *s, int r)
{
    return s->base + off_arena(s->n, s->ctl->half) + s->ctl->arena_bytes * (size_t)r;
}

uint64_t shm_arena_off(shm *s, const void *p, size_t bytes)
{
    const char *a = shm_arena(s, s->rank), *q = p;
    if (q < a || q + bytes > a + s->ctl->arena_bytes || q + bytes < q)
        return SHM_NONE;
    return (uint64_t)(q - a);
}

size_t shm_piece(shm *s, size_t esz, int blocks)
{
    size_t w = s->ctl->half / (size_t)blocks / esz;
    return w > 64 ? w / 64 * 64 : (w ? w : 1);
}

/* ---- sizes from the environment ------------------------------------------------------------ */

/* One size variable: `dflt` when unset; else at least `lo` and at most `mem` (the machine's
 * memory), so that the segment's size, a sum of products of it by at most 256 ranks, cannot
 * wrap around and map a segment smaller than its offsets reach. */
static coh_status env_bytes(const char *name, const char *v, uint64_t dflt, uint64_t lo,
                            uint64_t mem, uint64_t *out)
{
    *out = dflt;
    if (!v)
        return COH_OK;
    if (coh_size_parse(v, out) || *out < lo)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%s': expected a size of at least %llu "
                        "bytes, such as 1MiB", name, v, (unsigned long long)lo);
    if (*out > mem)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%s': %llu bytes for each rank is more "
                        "than this machine's memory (%llu bytes)", name, v,
                        (unsigned long long)*out, (unsigned long long)mem);
    *out = align_up(*out, 4096);
    return COH_OK;
}

coh_status shm_env_parse(const char *stage, const char *arena, const char *spin, uint64_t mem,
                         shm_env *out)
{
    /* 256 TiB, more than any machine holds, also bounds a memory size unknown or misread */
    const uint64_t most = (uint64_t)1 << 48, cap = mem && mem < most ? mem : most;
    coh_status st;
    if ((st = env_bytes("COHORT_SHM_STAGE", stage, 256u << 10, 4096, cap, &out->half)) ||
        (st = env_bytes("COHORT_SHM_ARENA", arena, 256u << 20, 4096, cap, &out->arena)))
        return st;
    out->spin_set = spin != NULL;
    out->spin_s = 1e-3;
    if (spin) {
        /* digits only: atoi read "1ms" as 1 us and "fast" as 0 without a word */
        long us = -1;
        if (*spin && strspn(spin, "0123456789") == strlen(spin) && strlen(spin) <= 8)
            us = strtol(spin, NULL, 10);
        if (us < 0 || us > SHM_SPIN_MAX_US)
            return coh_errf(COH_ERR_INVALID, "invalid COHORT_SHM_SPIN '%s': expected "
                            "microseconds from 0 to %d", spin, SHM_SPIN_MAX_US);
        out->spin_s = (double)us * 1e-6;
    }
    return COH_OK;
}

/* ---- segment lifetime ---------------------------------------------------------------------- */

static void seg_name(char *buf, size_t n, const char *job, const char *suffix)
{
    struct passwd pwbuf, *pw = NULL;
    char strings[1024], user[64];
    if (getpwuid_r(geteuid(), &pwbuf, strings, sizeof strings, &pw) == 0 && pw &&
        strlen(pw->pw_name) < sizeof user && !strchr(pw->pw_name, '/'))
        snprintf(user, sizeof user, "%s", pw->pw_name);
    else
        snprintf(user, sizeof user, "uid%d", (int)geteuid());
    snprintf(buf, n, "/cohort-%s-%s%s", user, job, suffix);
}

static int seg_live(const shm_ctl *ctl);
static coh_status seg_taken(const shm *s, int creator);

/* The creator of the segment under the name when that creator still runs (another live job
 * given the same job id), else 0: a crashed run's segment, or one too short to tell. */
static int seg_live_creator(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0), creator = 0;
    struct stat st;
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(shm_ctl)) {
        shm_ctl *ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (ctl != MAP_FAILED) {
            creator = seg_live(ctl) ? atomic_load(&ctl->creator_pid) : 0;
            munmap(ctl, sizeof *ctl);
        }
    }
    close(fd);
    return creator;
}

/* ---- leftovers: names that no rank will unlink ------------------------------------------- */

/* A segment's creator takes a shared flock(2) on it at once and keeps it until the name is
 * unlinked; the kernel drops it when the creator dies. A named segment whose lock anyone can
 * take exclusively has no live creator: ranks killed before all had joined left it. Locks are
 * the file's, so this holds across pid namespaces that share /dev/shm, and reads no clock. */
#define UNMARKED_LEFT_S 10 /* a segment with no magic and no lock this old is a killed one's */

typedef enum { SWEEP_LAUNCH, SWEEP_ALL } sweep_kind;

/* Whether the segment open on fd (st: its fstat) is left by a killed run: no live creator
 * holds its lock, and it is of `launch` (SWEEP_LAUNCH) or of anyone (SWEEP_ALL, where one whose
 * creator died before writing its header counts once UNMARKED_LEFT_S old). */
static int seg_left(int fd, const struct stat *st, sweep_kind kind, const char *launch)
{
    if ((size_t)st->st_size < sizeof(shm_ctl))
        return 0;
    const shm_ctl *ctl = mmap(NULL, sizeof *ctl, PROT_READ, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED)
        return 0;
    int ours = 0;
    if (atomic_load(&ctl->magic) == SHM_MAGIC)
        ours = ctl->creator_locks == 1 &&
               (kind == SWEEP_ALL || !strncmp(ctl->launch, launch, sizeof ctl->launch));
    else
        ours = kind == SWEEP_ALL && time(NULL) - st->st_ctime > UNMARKED_LEFT_S;
    munmap((void *)ctl, sizeof *ctl);
    return ours && flock(fd, LOCK_EX | LOCK_NB) == 0;
}

/* Unlinks this user's segments that seg_left finds left; returns how many. Only regular files
 * the user owns are opened, and without blocking (anyone may put a FIFO in /dev/shm), and a
 * name is unlinked only while it still names the file that was judged. */
static int seg_sweep(sweep_kind kind, const char *launch)
{
    char prefix[240];
    seg_name(prefix, sizeof prefix, "", ""); /* "/cohort-USER-" */
    size_t plen = strlen(prefix + 1);
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char name[300];
        struct stat st, now;
        if (strncmp(e->d_name, prefix + 1, plen) ||
            snprintf(name, sizeof name, "/%s", e->d_name) >= (int)sizeof name ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        int fd = shm_open(name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, 0);
        if (fd < 0)
            continue;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            seg_left(fd, &st, kind, launch) &&
            fstatat(dirfd(d), e->d_name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
            now.st_ino == st.st_ino && now.st_dev == st.st_dev && shm_unlink(name) == 0)
            removed++;
        close(fd); /* and with it the lock seg_left took */
    }
    closedir(d);
    return removed;
}

int coh_shm_remove_launch(const char *launch)
{
    return launch && *launch ? seg_sweep(SWEEP_LAUNCH, launch) : 0;
}

/* Take the creator's shared lock on the segment just created (fd), kept in s until its name is
 * unlinked (seg_unlock). A sweeper that opened the file in the meantime holds it only for a
 * moment. */
static void seg_lock(shm *s, int fd)
{
    while (flock(fd, LOCK_SH) != 0 && errno == EINTR)
        ;
    s->lock_fd = fd;
}

static void seg_unlock(shm *s)
{
    if (s->lock_fd >= 0)
        close(s->lock_fd);
    s->lock_fd = -1;
}

static coh_status seg_create(shm *s, size_t bytes)
{
    const char *name = s->name;
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
        /* another job running with the same job id: replacing its segment would hand this
         * job's ranks to it; a crashed run's is replaced */
        int creator = seg_live_creator(name);
        if (creator)
            return seg_taken(s, creator);
        shm_unlink(name);
        fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    if (fd < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot create shared memory '%s': %s", name,
                        strerror(errno));
    seg_lock(s, fd);
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        shm_unlink(name);
        seg_unlock(s);
        return coh_errf(COH_ERR_SYSTEM, "cannot size shared memory '%s' to %zu bytes: %s",
                        name, bytes, strerror(e));
    }
    /* what killed runs of this user left under other names (this one's is held) */
    seg_sweep(SWEEP_ALL, NULL);
    return COH_OK;
}

/* Whether the segment's creator is still the process that made it: a killed run of the same
 * job id leaves a segment whose header looks valid, and this run's rank 0 replaces it. */
static int seg_live(const shm_ctl *ctl)
{
    pid_t pid = atomic_load(&ctl->creator_pid);
    return pid > 0 && !coh_pid_dead(pid) && coh_proc_start_time(pid) == ctl->creator_start;
}

/* The name is in use by another live job given the same job id (its creator still runs). */
static coh_status seg_taken(const shm *s, int creator)
{
    return coh_errf(COH_ERR_INVALID, "shared memory '%s' belongs to another job running with "
                    "the same job id '%s' (its rank 0 is pid %d): two jobs that run at once "
                    "need different job ids (COHORT_JOB_ID, cohort run --run-id)", s->name,
                    s->job, creator);
}

/* The segment is another launch's (a live job given the same job id): leave it alone, as
 * refusing it (seg_refuse, on a size or count that differs) would fail that job too. */
static int other_launch(const shm *s, const shm_ctl *ctl)
{
    return s->launch[0] && ctl->launch[0] && strncmp(s->launch, ctl->launch, sizeof ctl->launch);
}

static coh_status seg_disagree(const shm *s, const shm_ctl *ctl, size_t bytes)
{
    return coh_errf(COH_ERR_MISMATCH, "shared memory '%s' holds %u ranks and %llu bytes but "
                    "this rank expects %d and %zu: ranks disagree on WORLD_SIZE or COHORT_SHM_*",
                    s->name, ctl->n, (unsigned long long)ctl->bytes, s->n, bytes);
}

/* This rank expects another rank count or size than the live creator made: refuse the segment,
 * and say so in it, so that the creator fails at once too instead of waiting for this rank. */
static coh_status seg_refuse(const shm *s, shm_ctl *ctl, size_t bytes)
{
    ctl->refused_n = (uint32_t)s->n;
    ctl->refused_bytes = bytes;
    atomic_store(&ctl->refused, s->rank + 1);
    return seg_disagree(s, ctl, bytes);
}

/* A rank's slot was claimed twice: two processes of that rank, so two jobs share the name. */
static coh_status seg_doubled(const shm *s)
{
    int32_t r = atomic_load(&s->ctl->doubled) - 1;
    return coh_errf(COH_ERR_INVALID, "shared memory '%s' was joined twice as rank %d (pids %d "
                    "and %d): two jobs run with the same job id '%s'; jobs that run at once "
                    "need different job ids (COHORT_JOB_ID, cohort run --run-id)", s->name, r,
                    (int)s->ctl->doubled_pids[0], (int)s->ctl->doubled_pids[1], s->job);
}

/* A segment of another size under the name: this run's (its live creator chose another size:
 * refused at once), or a killed run's, or one still being sized (waited for). */
static coh_status seg_other_size(const shm *s, int fd, size_t size, size_t bytes)
{
    if (size < sizeof(shm_ctl))
        return COH_OK;
    shm_ctl *ctl = mmap(NULL, sizeof *ctl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ctl == MAP_FAILED)
        return COH_OK;
    coh_status st = COH_OK;
    if (atomic_load(&ctl->magic) == SHM_MAGIC && seg_live(ctl))
        st = other_launch(s, ctl) ? seg_taken(s, atomic_load(&ctl->creator_pid))
                                  : seg_refuse(s, ctl, bytes);
    munmap(ctl, sizeof *ctl);
    return st;
}

/* Map the segment once it exists at full size; ranks may get here before its creator. */
static coh_status seg_map(shm *s, size_t bytes, double deadline)
{
    for (;;) {
        int fd = shm_open(s->name, O_RDWR, 0);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == bytes) {
            void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (p == MAP_FAILED)
                return coh_errf(COH_ERR_SYSTEM, "cannot map shared memory '%s': %s", s->name,
                                strerror(errno));
            s->base = p;
            s->bytes = bytes;
            s->ctl = p;
            return COH_OK;
        }
        if (fd >= 0) {
            coh_status other = seg_other_size(s, fd, (size_t)st.st_size, bytes);
            close(fd);
            if (other)
                return other;
        }
        if (coh_now_s() > deadline)
            return coh_errf(COH_ERR_TIMEOUT, "shared memory '%s' did not appear within %g s: "
                            "rank 0 never created it", s->name, s->timeout);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

/* Yama's ptrace scope (/proc/sys/kernel/yama/ptrace_scope; -1 without Yama, or
 * COHORT_SHM_PTRACE_SCOPE for tests): at 1, Ubuntu's default, a process may read another's memory
 * only as its ancestor or when the target names it, or an ancestor of it, with PR_SET_PTRACER;
 * at 2 and 3 not at all. */
static int ptrace_scope(void)
{
    const char *e = getenv("COHORT_SHM_PTRACE_SCOPE");
    if (e)
        return atoi(e);
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
    int scope = -1;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1)
            scope = -1;
        fclose(f);
    }
    return scope;
}

/* Whether peers may read this rank's buffers with cross-memory attach. Under Yama scope 1 the
 * rank names its parent as its ptracer: the launcher that started this node's ranks (cohort run's
 * agent, mpirun's daemon, srun's step daemon), whose descendants, the rank's siblings, may then
 * read it. Ranks of one node started by different launchers need COHORT_SHM_NO_CMA=1 there. */
static int cma_allowed(void)
{
    int scope = ptrace_scope();
    if (scope >= 2)
        return 0;
    if (scope == 1 && prctl(PR_SET_PTRACER, (unsigned long)getppid(), 0, 0, 0) != 0)
        return 0;
    return 1;
}

/* Cross-memory attach may be forbidden (seccomp, ptrace rules): try it on ourselves. */
static int cma_works(void)
{
    char a[8] = "cohort", b[8] = "";
    struct iovec local = {b, sizeof b}, remote = {a, sizeof a};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)sizeof a &&
           !memcmp(a, b, sizeof a);
}

/* Every rank: map, wait for the creator's magic, register, and unlink when last. A segment
 * whose creator is gone is a killed run's: it is let go and the name mapped again, until this
 * run's rank 0 has replaced it. */
static coh_status seg_join(shm *s, size_t bytes)
{
    double deadline = coh_now_s() + s->timeout;
    for (;;) {
        coh_status st = seg_map(s, bytes, deadline);
        if (st)
            return st;
        int stale = 0;
        while (atomic_load(&s->ctl->magic) != SHM_MAGIC &&
               !(stale = atomic_load(&s->ctl->creator_pid) && !seg_live(s->ctl))) {
            if (coh_now_s() > deadline)
                return coh_errf(COH_ERR_TIMEOUT, "shared memory '%s' was never initialised",
                                s->name);
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        if (!stale && seg_live(s->ctl))
            break;
        int creator = atomic_load(&s->ctl->creator_pid);
        munmap(s->base, s->bytes);
        s->base = NULL;
        s->ctl = NULL;
        if (coh_now_s() > deadline)
            return coh_errf(COH_ERR_TIMEOUT, "shared memory '%s' is left by a run that ended "
                            "(its creator, pid %d, is gone) and rank 0 did not replace it within "
                            "%g s", s->name, creator, s->timeout);
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (other_launch(s, s->ctl))
        return seg_taken(s, atomic_load(&s->ctl->creator_pid));
    if (s->ctl->n != (uint32_t)s->n || s->ctl->bytes != bytes)
        return seg_refuse(s, s->ctl, bytes);
    /* The slot is claimed, not just written: a second process with this rank means two jobs
     * share the name, and every rank of it must fail rather than mix with the other job. */
    int32_t holder = 0;
    if (!atomic_compare_exchange_strong(&shm_slot_of(s, s->rank)->pid, &holder,
                                        (int32_t)getpid())) {
        s->ctl->doubled_pids[0] = holder;
        s->ctl->doubled_pids[1] = (int32_t)getpid();
        atomic_store(&s->ctl->doubled, s->rank + 1);
        return seg_doubled(s);
    }
    shm_slot_of(s, s->rank)->cma = !getenv("COHORT_SHM_NO_CMA") && cma_works() && cma_allowed();
    if (atomic_fetch_add(&s->ctl->mapped, 1) + 1 == (uint32_t)s->n)
        shm_unlink(s->name);
    return COH_OK;
}

/* The world's ranks wait until all have mapped the segment (and so it is unlinked); when one
 * never comes, the name is removed here so that nothing is left behind. */
static coh_status seg_wait_all(shm *s)
{
    double deadline = coh_now_s() + s->timeout;
    while (atomic_load(&s->ctl->mapped) < (uint32_t)s->n) {
        if (atomic_load(&s->ctl->doubled)) {
            shm_unlink(s->name);
            return seg_doubled(s);
        }
        int32_t refused = atomic_load(&s->ctl->refused);
        if (refused) {
            shm_unlink(s->name);
            return coh_errf(COH_ERR_MISMATCH, "shared memory '%s' holds %u ranks and %llu bytes "
                            "but rank %d expects %u and %llu: ranks disagree on WORLD_SIZE or "
                            "COHORT_SHM_*", s->name, s->ctl->n,
                            (unsigned long long)s->ctl->bytes, refused - 1, s->ctl->refused_n,
                            (unsigned long long)s->ctl->refused_bytes);
        }
        if (coh_now_s() > deadline) {
            shm_unlink(s->name);
            char missing[256] = "";
            size_t k = 0;
            for (int r = 0; r < s->n && k < sizeof missing - 12; r++)
                if (!atomic_load(&shm_slot_of(s, r)->pid))
                    coh_str_append(missing, sizeof missing, &k, "%s%d", k ? ", " : "", r);
            return coh_errf(COH_ERR_TIMEOUT, "rank %s never joined shared memory '%s' within %g s",
                            missing, s->name, s->timeout);
        }
        nanosleep(&(struct timespec){0, 200000}, NULL);
    }
    return COH_OK;
}

static coh_status shm_new(int rank, int n, double timeout, const char *name, const char *job,
                          const char *launch, int create, int wait_all, shm **out)
{
    coh_status st;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    shm_env env;
    if ((st = shm_env_parse(getenv("COHORT_SHM_STAGE"), getenv("COHORT_SHM_ARENA"),
                            getenv("COHORT_SHM_SPIN"),
                            pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0, &env)))
        return st;
    uint64_t half = env.half, arena = env.arena;
    if (n > 256)
        return coh_errf(COH_ERR_UNSUPPORTED, "shared memory serves at most 256 ranks, not '%d'",
                        n);
    size_t bytes = off_arena(n, half) + arena * (size_t)n;
    shm *s = calloc(1, sizeof *s);
    if (!s)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    s->rank = rank;
    s->n = n;
    s->lock_fd = -1;
    s->timeout = timeout;
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->job, sizeof s->job, "%s", job);
    snprintf(s->launch, sizeof s->launch, "%s", launch);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* Oversubscribed, a waiter yields at every turn so that the peer it awaits can run, and
     * sleeps after 100 turns; otherwise it spins up to 1 ms (COHORT_SHM_SPIN, shm_wait.c). */
    s->oversubscribed = n > cpus;
    s->spin_turns = 100;
    s->spin_s = 1e-3;
    s->pure_s = 20e-6;
    if (env.spin_set)
        s->spin_s = env.spin_s;
    if (create && (st = seg_create(s, bytes))) {
        free(s);
        return st;
    }
    if (create) {
        if ((st = seg_map(s, bytes, coh_now_s() + timeout))) {
            shm_unlink(name);
            seg_unlock(s);
            free(s);
            return st;
        }
        s->ctl->creator_start = coh_proc_start_time(getpid());
        atomic_store(&s->ctl->creator_pid, (int32_t)getpid());
        s->ctl->bytes = bytes;
        s->ctl->half = half;
        s->ctl->chan_bytes = CHAN_BYTES;
        s->ctl->arena_bytes = arena;
        s->ctl->small_gather = s->oversubscribed ? half : SHM_SMALL_GATHER;
        s->ctl->one_phase = s->oversubscribed ? SHM_ONE_PHASE_OVER : SHM_ONE_PHASE;
        s->ctl->n = (uint32_t)n;
        memcpy(s->ctl->launch, s->launch, sizeof s->ctl->launch);
        s->ctl->creator_locks = 1; /* seg_lock */
        atomic_store(&s->ctl->magic, SHM_MAGIC);
    }
    if ((st = seg_join(s, bytes)) || (wait_all && (st = seg_wait_all(s)))) {
        if (s->base)
            munmap(s->base, s->bytes);
        if (create)
            shm_unlink(name);
        seg_unlock(s);
        free(s);
        return st;
    }
    if (wait_all) /* every rank mapped it: the last one unlinked the name */
        seg_unlock(s);
    *out = s;
    return COH_OK;
}

static void shm_free_all(shm *s)
{
    seg_unlock(s);
    if (s->base)
        munmap(s->base, s->bytes);
    free(s->ext);
    free(s);
}

coh_status coh_shm_open(const coh_comm_env *env, void **self)
{
    char name[240];
    seg_name(name, sizeof name, env->job, "");
    shm *s;
    char job[128]; /* the job id as given, without the "-r<restart>" env_job added */
    snprintf(job, sizeof job, "%s", env->job);
    char *restart = strrchr(job, '-');
    if (restart && restart[1] == 'r' && strspn(restart + 2, "0123456789") == strlen(restart + 2))
        *restart = '\0';
    coh_status st = shm_new(env->rank, env->size, env->timeout_s, name, job, env->launch,
                            env->rank == 0, 1, &s);
    if (st)
        return coh_err_prefix(st, "cannot join the job's shared memory as rank %d of %d",
                              env->rank, env->size);
    *self = s;
    return COH_OK;
}

static void shm_destroy(void *self)
{
    shm_free_all(self);
}

/* ---- the arena: first fit over this rank's part, bookkeeping kept private ------------------ */

static void *shm_alloc(void *self, size_t bytes)
{
    shm *s = self;
    size_t want = align_up(bytes ? bytes : 1, 64);
    if (!s->ext) {
        s->ext = malloc(sizeof *s->ext * 16);
        if (!s->ext)
            return NULL;
        s->cap_ext = 16;
        s->next_ext = 1;
        s->ext[0] = (shm_extent){0, s->ctl->arena_bytes, 0};
    }
    for (size_t i = 0; i < s->next_ext; i++) {
        shm_extent *e = &s->ext[i];
        if (e->used || e->size < want)
            continue;
        if (e->size > want) { /* split: the rest becomes a free extent after this one */
            if (s->next_ext == s->cap_ext) {
                shm_extent *m = realloc(s->ext, sizeof *m * s->cap_ext * 2);
                if (!m)
                    return NULL;
                s->ext = m;
                s->cap_ext *= 2;
                e = &s->ext[i];
            }
            memmove(e + 2, e + 1, sizeof *e * (s->next_ext - i - 1));
            e[1] = (shm_extent){e->off + want, e->size - want, 0};
            e->size = want;
            s->next_ext++;
        }
        e->used = 1;
        return shm_arena(s, s->rank) + e->off;
    }
    return NULL;
}

static void shm_free(void *self, void *p)
{
    shm *s = self;
    uint64_t off = shm_arena_off(s, p, 0);
    for (size_t i = 0; i < s->next_ext; i++) {
        if (s->ext[i].off != off || !s->ext[i].used)
            continue;
        s->ext[i].used = 0;
        if (i + 1 < s->next_ext && !s->ext[i + 1].used) { /* merge with the next */
            s->ext[i].size += s->ext[i + 1].size;
            memmove(&s->ext[i + 1], &s->ext[i + 2], sizeof *s->ext * (s->next_ext - i - 2));
            s->next_ext--;
        }
        if (i > 0 && !s->ext[i - 1].used) { /* and with the previous */
            s->ext[i - 1].size += s->ext[i].size;
            memmove(&s->ext[i], &s->ext[i + 1], sizeof *s->ext * (s->next_ext - i - 1));
            s->next_ext--;
        }
        return;
    }
}

/* ---- ops ----------------------------------------------------------------------------------- */

static coh_status shm_run(void *self, const coh_op *op)
{
    shm *s = self;
    s->op = op;
    s->deadline = coh_now_s() + s->timeout;
    s->next_check = 0;
    switch (op->kind) {
    case COH_OP_ALLREDUCE: return shm_allreduce(s, op);
    case COH_OP_REDUCE: return shm_reduce(s, op);
    case COH_OP_BROADCAST: return shm_broadcast(s, op);
    case COH_OP_ALLGATHER: return shm_allgather(s, op);
    case COH_OP_REDUCE_SCATTER: return shm_reduce_scatter(s, op);
    case COH_OP_ALLTOALL: return shm_alltoall(s, op);
    case COH_OP_BARRIER: return shm_sync_first(s, op, NULL, NULL, 0, 0);
    case COH_OP_SEND: return shm_send(s, op);
    case COH_OP_RECV: return shm_recv(s, op);
    }
    return coh_errf(COH_ERR_INTERNAL, "unknown op %d", (int)op->kind);
}

/* The group's first member creates its segment between two syncs of the parent, every member
 * maps it, and after the second sync (all mapped) the creator unlinks it. */
static coh_status shm_split(void *self, int color, int key, const int *members, int nmembers,
                            int new_rank, uint64_t tag, void **out)
{
    shm *p = self;
    *out = NULL;
    coh_op op = {.kind = COH_OP_BARRIER, .root = -1, .seq = tag};
    p->op = &op;
    p->deadline = coh_now_s() + p->timeout;
    char name[320];
    snprintf(name, sizeof name, "%.240s-s%llu-c%d", p->name, (unsigned long long)tag, color);
    int leader = color >= 0 && members[0] == p->rank;
    coh_status st = COH_OK, sync_st;
    shm *s = NULL;
    if (leader)
        st = shm_new(0, nmembers, p->timeout, name, p->job, p->launch, 1, 0, &s);
    if ((sync_st = shm_sync(p))) {
        if (s) {
            shm_unlink(name);
            shm_free_all(s);
        }
        return sync_st;
    }
    if (!st && color >= 0 && !leader)
        st = shm_new(new_rank, nmembers, p->timeout, name, p->job, p->launch, 0, 0, &s);
    if ((sync_st = shm_sync(p)))
        st = sync_st;
    if (leader) {
        shm_unlink(name); /* normally gone already: the last member to map unlinked it */
        if (s)
            seg_unlock(s);
    }
    if (st) {
        if (s)
            shm_free_all(s);
        return coh_err_prefix(st, "split (color %d, key %d)", color, key);
    }
    *out = s;
    return COH_OK;
}

const coh_transport_ops coh_shm_ops = {"shm", shm_run, shm_split, shm_alloc, shm_free,
                                       shm_destroy};
