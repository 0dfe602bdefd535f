/* options.c: the launcher's option values: defaults, parsers of what users type (ranks
 * filters, prefix templates, cpu-bind modes), and the checks made before any worker starts. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cohort/launch.h"
#include "launch/agent.h"
#include "util/strutil.h"

coh_status coh_cpu_bind_parse(const char *s, coh_cpu_bind *out)
{
    static const char *names[] = {"none", "cores", "numa"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) {
            *out = (coh_cpu_bind)i;
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID, "invalid cpu binding '%s': expected none, cores or numa",
                    s ? s : "");
}

coh_status coh_launch_parse_ranks(const char *s, int n, unsigned char *mask)
{
    if (mask)
        memset(mask, 0, (size_t)(n > 0 ? n : 0));
    if (!s || !*s)
        return coh_errf(COH_ERR_INVALID, "invalid ranks filter '': expected ranks like '0,3' or '0-2'");
    const char *p = s;
    for (int pos = 1;; pos++) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0)
            return coh_errf(COH_ERR_INVALID, "invalid ranks filter '%s': empty entry at position %d", s, pos);
        if (len >= sizeof item)
            return coh_errf(COH_ERR_INVALID, "invalid ranks filter '%s': entry %d is too long", s, pos);
        memcpy(item, p, len);
        item[len] = '\0';
        char *dash = strchr(item, '-');
        long lo, hi;
        if (dash)
            *dash = '\0';
        if (!coh_str_uint(item, INT_MAX, &lo) || (dash && !coh_str_uint(dash + 1, INT_MAX, &hi)))
            return coh_errf(COH_ERR_INVALID, "invalid ranks filter '%s': entry %d is not a rank or a range 'a-b'", s, pos);
        if (!dash)
            hi = lo;
        if (hi < lo)
            return coh_errf(COH_ERR_INVALID, "invalid ranks filter '%s': range at position %d is reversed", s, pos);
        if (hi >= n)
            return coh_errf(COH_ERR_INVALID, "invalid ranks filter '%s': local rank %ld does not exist (ranks are 0..%d)", s, hi, n - 1);
        for (long r = lo; mask && r <= hi; r++)
            mask[r] = 1;
        if (!comma)
            return COH_OK;
        p = comma + 1;
    }
}

static const char *prefix_fields[] = {"rank", "local_rank", "node_rank", "role", "host",
                                      "pid", "attempt", "stream"};
enum { NFIELDS = sizeof prefix_fields / sizeof prefix_fields[0] };

/* Index of the field named at p (after '{'), its length in *len; -1 if none. */
static int field_at(const char *p, size_t *len)
{
    const char *end = strchr(p, '}');
    if (!end)
        return -1;
    *len = (size_t)(end - p);
    for (int i = 0; i < (int)NFIELDS; i++)
        if (strlen(prefix_fields[i]) == *len && !strncmp(p, prefix_fields[i], *len))
            return i;
    return -1;
}

coh_status coh_launch_check_prefix(const char *t)
{
    if (!t)
        return COH_OK;
    if (strlen(t) > 128)
        return coh_errf(COH_ERR_INVALID, "invalid prefix template '%.40s...': longer than 128 characters", t);
    for (const char *p = t; *p; p++) {
        if ((p[0] == '{' && p[1] == '{') || (p[0] == '}' && p[1] == '}')) {
            p++;
            continue;
        }
        if (*p == '}')
            return coh_errf(COH_ERR_INVALID, "invalid prefix template '%s': unmatched '}' at position %d (write '}}' for a brace)", t, (int)(p - t) + 1);
        if (*p != '{')
            continue;
        size_t len;
        if (field_at(p + 1, &len) < 0)
            return coh_errf(COH_ERR_INVALID, "invalid prefix template '%s': unknown field at position %d (valid: {rank}, {local_rank}, {node_rank}, {role}, {host}, {pid}, {attempt}, {stream})", t, (int)(p - t) + 1);
        p += len + 1;
    }
    return COH_OK;
}

void launch_render_prefix(const char *t, char *buf, size_t n, int rank, int local_rank,
                          int node_rank, const char *role, const char *host, long pid,
                          int attempt, const char *stream_name)
{
    size_t o = 0;
    buf[0] = '\0';
    for (const char *p = t; *p && o + 1 < n; p++) {
        size_t len;
        int f = *p == '{' && p[1] != '{' ? field_at(p + 1, &len) : -1;
        if (f < 0) {
            buf[o++] = *p;
            if ((*p == '{' || *p == '}') && p[1] == *p)
                p++;
            buf[o] = '\0';
            continue;
        }
        long nums[] = {rank, local_rank, node_rank, 0, 0, pid, attempt, 0};
        const char *strs[] = {NULL, NULL, NULL, role, host, NULL, NULL, stream_name};
        int w = strs[f] ? snprintf(buf + o, n - o, "%s", strs[f])
                        : snprintf(buf + o, n - o, "%ld", nums[f]);
        o += (w > 0 && (size_t)w < n - o) ? (size_t)w : n - o - 1;
        p += len + 1;
    }
    buf[o] = '\0';
}

int launch_parse_cpulist(const char *s, int *cpus, int cap)
{
    int count = 0;
    const char *p = s;
    while (*p && *p != '\n') {
        char *end;
        errno = 0;
        long lo = strtol(p, &end, 10), hi;
        if (end == p || lo < 0 || lo > 65535 || errno)
            return -1;
        hi = lo;
        if (*end == '-') {
            const char *q = end + 1;
            hi = strtol(q, &end, 10);
            if (end == q || hi < lo || hi > 65535)
                return -1;
        }
        for (long c = lo; c <= hi; c++) {
            if (count >= cap)
                return -1;
            cpus[count++] = (int)c;
        }
        if (*end == ',')
            end++;
        else if (*end && *end != '\n')
            return -1;
        p = end;
    }
    return count;
}

void launch_new_run_id(char *buf, size_t n)
{
    unsigned long long r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        r = ((unsigned long long)ts.tv_nsec << 20) ^ (unsigned long long)ts.tv_sec ^ (unsigned long long)getpid();
    }
    snprintf(buf, n, "cohort-%016llx", r);
}

int launch_comm_port(int master_port, int control_port)
{
    int ctl = control_port > 0 ? control_port : master_port + 1;
    int p = master_port + 2;
    if (p == ctl)
        p++;
    return p <= 65535 ? p : 0;
}

void coh_launch_opts_init(coh_launch_opts *o)
{
    memset(o, 0, sizeof *o);
    o->nproc_per_node = 1;
    o->nnodes = 1;
    o->master_addr = "127.0.0.1";
    o->master_port = 29500;
    o->control_port = -1;
    o->grace_s = 5;
    o->join_timeout_s = 300;
}

static coh_status check_numbers(const coh_launch_opts *o)
{
    if (o->nproc_per_node < 1 || o->nproc_per_node > 4096)
        return coh_errf(COH_ERR_INVALID, "invalid number of processes per node '%d': expected 1..4096", o->nproc_per_node);
    if (o->nnodes < 1 || o->nnodes > 4096)
        return coh_errf(COH_ERR_INVALID, "invalid number of nodes '%d': expected 1..4096", o->nnodes);
    if (o->nnodes_min != 0 && (o->nnodes_min < 1 || o->nnodes_min > o->nnodes))
        return coh_errf(COH_ERR_INVALID, "invalid elastic range '%d:%d': expected MIN:MAX with 1 <= MIN <= MAX", o->nnodes_min, o->nnodes);
    if (o->node_rank < 0 || o->node_rank >= o->nnodes)
        return coh_errf(COH_ERR_INVALID, "invalid node rank '%d': expected 0..%d for %d node(s)", o->node_rank, o->nnodes - 1, o->nnodes);
    if (o->master_port < 0 || o->master_port > 65535)
        return coh_errf(COH_ERR_INVALID, "invalid master port '%d': expected 0..65535", o->master_port);
    if (o->master_port == 0 && o->nnodes > 1)
        return coh_errf(COH_ERR_INVALID, "invalid master port '0' with %d nodes: the other nodes must know the port; give one", o->nnodes);
    if (o->control_port == 0 || o->control_port > 65535 || o->control_port < -1)
        return coh_errf(COH_ERR_INVALID, "invalid control port '%d': expected 1..65535", o->control_port);
    if (o->control_port == o->master_port) /* rank 0's store and node 0's launcher would both bind it */
        return coh_errf(COH_ERR_INVALID, "invalid control port '%d': it is the master port '%d' too; they must differ", o->control_port, o->master_port);
    if (o->master_port > 0 && o->control_port == -1 && o->nnodes > 1 && o->master_port == 65535)
        return coh_errf(COH_ERR_INVALID, "master port '%d' leaves no room for the control port (master port + 1): give --control-port, or a lower master port", o->master_port);
    if (o->master_port > 0 && launch_comm_port(o->master_port, o->control_port) == 0)
        return coh_errf(COH_ERR_INVALID, "master port '%d' leaves no room for the port of cohort's tcp transport (master port + 2, + 3 if that is the control port): choose a lower master port", o->master_port);
    if (!(o->grace_s >= 0 && o->grace_s <= 3600))
        return coh_errf(COH_ERR_INVALID, "invalid grace period '%g': expected 0..3600 seconds", o->grace_s);
    if (!(o->join_timeout_s > 0 && o->join_timeout_s <= 86400))
        return coh_errf(COH_ERR_INVALID, "invalid join timeout '%g': expected more than 0, up to 86400 seconds", o->join_timeout_s);
    if (o->max_restarts < 0 || o->max_restarts > 1000000)
        return coh_errf(COH_ERR_INVALID, "invalid max restarts '%d': expected 0..1000000", o->max_restarts);
    return COH_OK;
}

static coh_status check_names(const coh_launch_opts *o)
{
    const char *id = o->run_id;
    if (id && (!*id || strlen(id) > 100 || strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != strlen(id) || id[0] == '.'))
        return coh_errf(COH_ERR_INVALID, "invalid run id '%s': expected 1..100 of letters, digits, '.', '_', '-', not starting with '.'", id);
    if (o->role && (!*o->role || strlen(o->role) > 64 || strchr(o->role, '\n')))
        return coh_errf(COH_ERR_INVALID, "invalid role '%s': expected 1..64 characters on one line", o->role);
    if (!o->master_addr || !*o->master_addr || strlen(o->master_addr) > 255)
        return coh_errf(COH_ERR_INVALID, "invalid master address '%s': expected a host name or address", o->master_addr ? o->master_addr : "");
    if (o->tee && !o->log_dir)
        return coh_errf(COH_ERR_INVALID, "invalid option '--tee': it needs '--log-dir'");
    if (o->ranks_filter)
        if (coh_launch_parse_ranks(o->ranks_filter, o->nproc_per_node, NULL) != COH_OK)
            return COH_ERR_INVALID;
    return coh_launch_check_prefix(o->prefix);
}

coh_status coh_launch_check(const coh_launch_opts *o)
{
    coh_status st;
    if ((st = check_numbers(o)) || (st = check_names(o)))
        return st;
    if (!o->argv || !o->argv[0] || !*o->argv[0])
        return coh_errf(COH_ERR_INVALID, "no program to run: give PROGRAM [ARGS...] after the options");
    char path[PATH_MAX];
    if ((st = find_program(o->argv[0], path, sizeof path)))
        return st;
    struct stat sb;
    if (o->log_dir && stat(o->log_dir, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return coh_errf(COH_ERR_INVALID, "invalid log directory '%s': it exists and is not a directory", o->log_dir);
    if (o->log_dir && (make_dirs(o->log_dir) != COH_OK || access(o->log_dir, W_OK) != 0))
        return coh_errf(COH_ERR_INVALID, "invalid log directory '%s': cannot create or write it", o->log_dir);
    ctl_key key; /* a token file others may read is refused before anything starts */
    st = auth_load_key(o->job_token, getenv("COHORT_JOB_TOKEN"), &key);
    memset(&key, 0, sizeof key);
    if (st)
        return st;
    if (o->node_rank == 0 && o->master_port > 0 && (st = net_check_port(o->master_port, "master port")))
        return st;
    if (o->node_rank == 0 && o->nnodes > 1) {
        int cp = o->control_port > 0 ? o->control_port : o->master_port + 1;
        if ((st = net_check_port(cp, "control port")))
            return st;
    }
    return COH_OK;
}
