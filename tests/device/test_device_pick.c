/* test_device_pick.c: pick on busy, exclusive, prohibited and full devices, the preference
 * order, the limits; reservations: concurrent processes never get the same device, a MIG
 * instance and its whole GPU exclude each other, locks go away with their holder. */
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "dev_test.h"

static coh_inventory *busy;
static coh_visible busy_vis;

/* Picked devices as physical indices "0,7", or "fail" with the message kept in last[]. */
static char last[2048];
static const char *pick(int n, uint64_t min_free, int max_util, int shared)
{
    static char buf[256];
    coh_pick_opts o;
    coh_pick_opts_init(&o);
    o.n = n;
    o.min_free_mib = min_free;
    o.max_utilization_pct = max_util;
    o.allow_shared = shared;
    coh_pick_result r;
    coh_status st = coh_pick(busy, &busy_vis, &o, &r);
    snprintf(last, sizeof last, "%s", coh_last_error());
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < r.npicked; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "",
                                busy->gpus[busy_vis.dev[r.picked[i]].gpu].physical_index);
    coh_pick_result_release(&r);
    return st == COH_OK ? buf : st == COH_ERR_NOT_FOUND ? "fail" : "error";
}

static void rules_and_order(void)
{
    /* usable: 0 (81920 free, 0%), 7 (idle exclusive, 81920, 0%), 6 (81920, 10%), 5 (40960) */
    CHECK_STR(pick(1, 0, 100, 0), "0");
    CHECK_STR(pick(2, 0, 100, 0), "0,7");
    CHECK_STR(pick(3, 0, 100, 0), "0,7,6");
    CHECK_STR(pick(4, 0, 100, 0), "0,7,6,5");
    CHECK_STR(pick(5, 0, 100, 0), "fail");
    CHECK(strstr(last, "5 cuda devices requested but 4 are usable"));
    CHECK(strstr(last, "cuda:1 (GPU-11111111-0000-0000-0000-000000000000): compute mode is "
                       "prohibited"));
    CHECK(strstr(last, "cuda:2 (GPU-22222222-0000-0000-0000-000000000000): compute mode is "
                       "exclusive_process and 1 process is already on it (owners: alice)"));
    CHECK(strstr(last, "cuda:3 (GPU-33333333-0000-0000-0000-000000000000): busy: 2 compute "
                       "processes (owners: bob,carol)"));
    CHECK(strstr(last, "cuda:4 (GPU-44444444-0000-0000-0000-000000000000): memory full: 0 MiB free"));
}

static void limits(void)
{
    /* Shared devices count when allowed, but never an exclusive one with a process. */
    CHECK_STR(pick(5, 0, 100, 1), "0,7,6,3,5");
    CHECK_STR(pick(6, 0, 100, 1), "fail");
    CHECK(strstr(last, "cuda:2") && !strstr(last, "cuda:3"));
    CHECK_STR(pick(3, 50000, 100, 0), "0,7,6");
    CHECK_STR(pick(4, 50000, 100, 0), "fail");
    CHECK(strstr(last, "cuda:5 (GPU-55555555-0000-0000-0000-000000000000): 40960 MiB free, "
                       "below the 50000 MiB required"));
    CHECK_STR(pick(2, 0, 5, 0), "0,7");
    CHECK_STR(pick(3, 0, 5, 0), "fail");
    CHECK(strstr(last, "cuda:6 (GPU-66666666-0000-0000-0000-000000000000): utilization 10% is "
                       "above the 5% allowed"));
    coh_pick_opts o;
    coh_pick_opts_init(&o);
    o.n = 0;
    coh_pick_result r;
    CHECK_FAILS(coh_pick(busy, &busy_vis, &o, &r), COH_ERR_INVALID, "invalid device count 0");
}

/* Only visible devices are candidates, numbered as the program sees them. */
static void visibility(void)
{
    coh_vis_env e = {0};
    e.cuda_visible_devices = "6,1,0";
    e.cuda_device_order = "PCI_BUS_ID";
    coh_visible v;
    CHECK_OK(coh_visible_compute(busy, COH_ACCEL_CUDA, &e, &v));
    coh_pick_opts o;
    coh_pick_opts_init(&o);
    o.n = 2;
    coh_pick_result r;
    CHECK_OK(coh_pick(busy, &v, &o, &r));
    CHECK_INT(r.npicked, 2);
    CHECK_INT(r.picked[0], 2); /* physical 0: free, 0% */
    CHECK_INT(r.picked[1], 0); /* physical 6: free, 10% */
    const char *var;
    char value[64];
    CHECK_OK(coh_child_env(busy, &v, &e, r.picked, r.npicked, COH_ID_INDEX, &var, value,
                           sizeof value));
    CHECK_STR(var, "CUDA_VISIBLE_DEVICES");
    CHECK_STR(value, "0,6");
    coh_pick_result_release(&r);
    coh_visible_release(&v);
}

static char lockdir[64];

/* In a child: reserve one device of four_a100 after `go` is readable, report its uuid on
 * `out`, then hold it until `hold` closes. */
static void child_reserve(int go, int out, int hold)
{
    coh_inventory *inv = load_inv("four_a100.json");
    coh_vis_env e = {0};
    coh_visible v;
    char c;
    if (coh_visible_compute(inv, COH_ACCEL_CUDA, &e, &v) != COH_OK || read(go, &c, 1) != 1)
        _exit(3);
    coh_pick_opts o;
    coh_pick_opts_init(&o);
    coh_pick_result r;
    coh_reservation *res;
    coh_status st = coh_pick_reserve(inv, &v, &o, lockdir, &r, &res);
    char msg[128] = "BUSY\n";
    if (st == COH_OK)
        snprintf(msg, sizeof msg, "%s\n", inv->gpus[v.dev[r.picked[0]].gpu].uuid);
    if (write(out, msg, strlen(msg)) < 0)
        _exit(4);
    while (read(hold, &c, 1) > 0) {
    }
    coh_reservation_destroy(res);
    _exit(st == COH_OK ? 0 : 5);
}

/* Five processes start at once for four devices: four distinct devices, one BUSY. */
static void concurrent_reservations(void)
{
    int go[2], out[2], hold[2];
    CHECK(pipe(go) == 0 && pipe(out) == 0 && pipe(hold) == 0);
    pid_t pids[5];
    for (int i = 0; i < 5; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(go[1]);
            close(out[0]);
            close(hold[1]);
            child_reserve(go[0], out[1], hold[0]);
        }
    }
    close(go[0]);
    close(out[1]);
    close(hold[0]);
    CHECK(write(go[1], "xxxxx", 5) == 5); /* release all five at once */
    char text[1024] = "";
    size_t len = 0;
    ssize_t got;
    int lines = 0;
    while (lines < 5 && (got = read(out[0], text + len, sizeof text - 1 - len)) > 0) {
        len += (size_t)got;
        text[len] = '\0';
        lines = 0;
        for (char *p = text; (p = strchr(p, '\n')); p++)
            lines++;
    }
    close(hold[1]);
    int ok = 0, busy_exits = 0;
    for (int i = 0; i < 5; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
        busy_exits += WIFEXITED(status) && WEXITSTATUS(status) == 5;
    }
    CHECK_INT(ok, 4);
    CHECK_INT(busy_exits, 1);
    const char *uuids[] = {"GPU-8932f937", "GPU-1a2b3c4d", "GPU-1a2b9999", "GPU-77777777"};
    for (int i = 0; i < 4; i++) {
        const char *a = strstr(text, uuids[i]);
        CHECK(a != NULL && strstr(a + 1, uuids[i]) == NULL); /* each device exactly once */
    }
    CHECK(strstr(text, "BUSY") != NULL);
    close(go[1]);
    close(out[0]);
}

/* A MIG instance and its whole GPU exclude each other; release frees the device. */
static void mig_and_whole(void)
{
    coh_inventory *inv = load_inv("mig.json");
    coh_vis_env em = {0}, ew = {0};
    em.cuda_visible_devices = "MIG-11111111";
    ew.cuda_visible_devices = "0";
    coh_visible vm, vw;
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &em, &vm));
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &ew, &vw));
    coh_pick_opts o;
    coh_pick_opts_init(&o);
    coh_pick_result r1, r2;
    coh_reservation *a = NULL, *b = NULL;
    CHECK_OK(coh_pick_reserve(inv, &vm, &o, lockdir, &r1, &a));
    char want[64];
    snprintf(want, sizeof want, "reserved by another process (pid %d)", (int)getpid());
    CHECK_FAILS(coh_pick_reserve(inv, &vw, &o, lockdir, &r2, &b), COH_ERR_BUSY,
                "1 cuda device requested but 0 are usable and free of reservations");
    CHECK(strstr(r2.cand[0].reason, "reserved by another process") != NULL);
    coh_pick_result_release(&r2);
    /* The other MIG instance is still free. */
    coh_vis_env e2 = {0};
    e2.cuda_visible_devices = "MIG-11119999";
    coh_visible v2;
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &e2, &v2));
    coh_reservation *c = NULL;
    CHECK_OK(coh_pick_reserve(inv, &v2, &o, lockdir, &r2, &c));
    coh_pick_result_release(&r2);
    coh_reservation_destroy(a);
    coh_reservation_destroy(c);
    coh_pick_result_release(&r1);
    CHECK_OK(coh_pick_reserve(inv, &vw, &o, lockdir, &r2, &b));
    CHECK_FAILS(coh_pick_reserve(inv, &vm, &o, lockdir, &r1, &a), COH_ERR_BUSY, want);
    coh_pick_result_release(&r1);
    coh_pick_result_release(&r2);
    coh_reservation_destroy(b);
    coh_visible_release(&vm);
    coh_visible_release(&vw);
    coh_visible_release(&v2);
    coh_inventory_destroy(inv);
}

static void lock_dir_choice(void)
{
    char buf[512];
    setenv("COHORT_LOCK_DIR", "/x/y", 1);
    CHECK_STR(coh_lock_dir(buf, sizeof buf), "/x/y");
    unsetenv("COHORT_LOCK_DIR");
    setenv("XDG_RUNTIME_DIR", "/run/user/5", 1);
    CHECK_STR(coh_lock_dir(buf, sizeof buf), "/run/user/5/cohort-locks");
    unsetenv("XDG_RUNTIME_DIR");
    char want[64];
    snprintf(want, sizeof want, "/tmp/cohort-locks-%u", (unsigned)getuid());
    CHECK_STR(coh_lock_dir(buf, sizeof buf), want);
}

/* A per-user default directory created by someone else is refused (needs root to fake). */
static void foreign_lock_dir(void)
{
    if (getuid() != 0) {
        printf("note: foreign_lock_dir needs root to chown; only the default-path case ran\n");
        return;
    }
    char xdg[128], dir[160];
    snprintf(xdg, sizeof xdg, "%s-xdg", lockdir);
    snprintf(dir, sizeof dir, "%s/cohort-locks", xdg);
    CHECK(mkdir(xdg, 0700) == 0 && mkdir(dir, 0700) == 0 && chown(dir, 12345, 12345) == 0);
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    unsetenv("COHORT_LOCK_DIR");
    coh_pick_opts o;
    coh_pick_opts_init(&o);
    coh_pick_result r;
    coh_reservation *res = NULL;
    CHECK_FAILS(coh_pick_reserve(busy, &busy_vis, &o, NULL, &r, &res), COH_ERR_SYSTEM,
                "belongs to uid 12345, not to this user (set COHORT_LOCK_DIR)");
    CHECK(res == NULL);
    coh_pick_result_release(&r);
    unsetenv("XDG_RUNTIME_DIR");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", xdg);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    busy = load_inv("busy.json");
    coh_vis_env e = {0};
    if (coh_visible_compute(busy, COH_ACCEL_CUDA, &e, &busy_vis) != COH_OK)
        return 1;
    snprintf(lockdir, sizeof lockdir, "/tmp/cohort-test-locks-%d", (int)getpid());
    RUN(rules_and_order);
    RUN(limits);
    RUN(visibility);
    RUN(concurrent_reservations);
    RUN(mig_and_whole);
    RUN(lock_dir_choice);
    RUN(foreign_lock_dir);
    coh_visible_release(&busy_vis);
    coh_inventory_destroy(busy);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", lockdir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", lockdir);
    return CHECK_REPORT();
}
