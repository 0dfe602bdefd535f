/* tcp_open.c: the TCP transport's world: rendezvous at rank 0 (MASTER_ADDR, COHORT_COMM_PORT
 * or MASTER_PORT + 2), the table of every rank's listening address, and the full mesh of
 * authenticated connections that the ops and every split use. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "comm/transport/tcp_int.h"
#include "util/strutil.h"

tcp *tcp_new(int rank, int size, uint64_t gid, double timeout)
{
    tcp *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->rank = rank;
    t->size = size;
    t->gid = gid;
    t->timeout = timeout;
    t->fd = malloc(sizeof *t->fd * (size_t)size);
    for (int r = 0; t->fd && r < size; r++)
        t->fd[r] = -1;
    t->world = calloc((size_t)size, sizeof *t->world);
    t->addr = calloc((size_t)size, sizeof *t->addr);
    t->fps = calloc((size_t)size, sizeof *t->fps);
    t->src = calloc((size_t)size, sizeof *t->src);
    if (!t->fd || !t->world || !t->addr || !t->fps || !t->src) {
        tcp_free(t);
        return NULL;
    }
    return t;
}

void tcp_free(tcp *t)
{
    if (!t)
        return;
    for (int r = 0; t->fd && r < t->size; r++)
        if (t->fd[r] >= 0)
            close(t->fd[r]);
    free(t->fd);
    free(t->world);
    free(t->addr);
    free(t->fps);
    free(t->src);
    free(t->tmp);
    free(t);
}

coh_status tcp_mesh(tcp *t, double deadline)
{
    coh_status st = COH_OK;
    for (int j = 0; j < t->rank && !st; j++) {
        if (t->fd[j] >= 0)
            continue;
        char who[32];
        snprintf(who, sizeof who, "rank %d", t->world[j]);
        st = tcp_connect(&t->addr[j], deadline, who, &t->fd[j]);
        if (!st)
            st = tcp_handshake_out(t->fd[j], t->gid, t->rank, j, t->world[j], deadline);
    }
    char *want = calloc((size_t)t->size, 1);
    if (!want)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (int k = t->rank + 1; k < t->size; k++)
        want[k] = t->fd[k] < 0;
    if (!st)
        st = tcp_accept_group(t->gid, want, t->size, t->fd, t->world, deadline);
    free(want);
    for (int r = 0; r < t->size && !st; r++)
        if (r != t->rank)
            tcp_sock_setup(t->fd[r], t->timeout);
    return st;
}

static coh_status resolve(const char *host, uint32_t *ip)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc || !res)
        return coh_errf(COH_ERR_INVALID, "tcp transport: cannot resolve MASTER_ADDR '%s' to an "
                        "IPv4 address: %s", host, rc ? gai_strerror(rc) : "no address");
    *ip = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
    return COH_OK;
}

/* Where rank 0 listens: MASTER_ADDR, and COHORT_COMM_PORT (set by cohort run) or
 * MASTER_PORT + 2 (MASTER_PORT is torch's store, + 1 cohort run's control channel). */
static coh_status master_of(tcp_addr *m)
{
    const char *host = getenv("MASTER_ADDR"), *ps = getenv("COHORT_COMM_PORT");
    const char *mp = getenv("MASTER_PORT"), *var = ps ? "COHORT_COMM_PORT" : "MASTER_PORT";
    if (!host || !*host)
        return coh_errf(COH_ERR_INVALID, "tcp transport: MASTER_ADDR is not set: start the job "
                        "with 'cohort run' or torchrun, or set MASTER_ADDR and MASTER_PORT");
    const char *s = ps ? ps : mp;
    long port;
    if (!coh_str_uint(s, 65535 - (ps ? 0 : TCP_PORT_OFFSET), &port) || port < 1)
        return coh_errf(COH_ERR_INVALID, "tcp transport: invalid %s '%s': expected a port "
                        "1..%d", var, s ? s : "(unset)", 65535 - (ps ? 0 : TCP_PORT_OFFSET));
    m->port = htons((uint16_t)(port + (ps ? 0 : TCP_PORT_OFFSET)));
    return resolve(host, &m->ip);
}

/* Rank 0 gave up waiting: the ranks that did join learn who never did (a table header with
 * n = -1 - that rank) instead of waiting out their own deadline. */
static void abort_joined(tcp *t)
{
    int32_t hdr[2] = {(int32_t)TCP_MAGIC, -1};
    for (int r = 1; r < t->size; r++)
        if (t->fd[r] < 0 && hdr[1] == -1)
            hdr[1] = -1 - r;
    for (int r = 1; r < t->size; r++)
        if (t->fd[r] >= 0)
            (void)tcp_io_full(t->fd[r], hdr, sizeof hdr, 1, coh_now_s() + 1);
}

/* Rank 0: every rank's join, then the table to each. */
static coh_status rendezvous_root(tcp *t, const tcp_addr *master, int spans, double deadline)
{
    tcp_addr me;
    /* a host name that resolves to loopback here (Debian's 127.0.1.1) but to this machine's
     * address elsewhere: listen on every interface */
    int loop = (ntohl(master->ip) >> 24) == 127;
    coh_status st = tcp_listener(loop && spans ? htonl(INADDR_ANY) : master->ip,
                                 ntohs(master->port), &me);
    char *want = calloc((size_t)t->size, 1);
    if (!want)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    memset(want + 1, 1, (size_t)t->size - 1);
    if (!st)
        st = tcp_accept_group(t->gid, want, t->size, t->fd, t->world, deadline);
    free(want);
    if (st == COH_ERR_TIMEOUT)
        abort_joined(t);
    struct sockaddr_in sa; /* where rank 1 reached this rank: others reach it there too */
    socklen_t sl = sizeof sa;
    if (!st && getsockname(t->fd[1], (struct sockaddr *)&sa, &sl) == 0)
        me.ip = sa.sin_addr.s_addr;
    t->addr[0] = me;
    for (int r = 1; r < t->size && !st; r++) {
        tcp_join j;
        int rc = tcp_io_full(t->fd[r], &j, sizeof j, 0, deadline);
        if (rc)
            return coh_errf(rc == -2 ? COH_ERR_TIMEOUT : COH_ERR_PEER_LOST, "tcp transport: "
                            "rank %d %s before it said where it listens", r,
                            rc == -2 ? "went silent" : "died");
        if (j.magic != TCP_MAGIC || j.world != t->size)
            return coh_errf(COH_ERR_INVALID, "tcp transport: rank %d thinks the world has %d "
                            "ranks, rank 0 has %d", r, (int)j.world, t->size);
        t->addr[r] = j.addr;
    }
    size_t bytes = tcp_table_bytes(t->size);
    char *tab = malloc(bytes);
    if (!st && !tab)
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    if (!st)
        tcp_table_write(tab, t->addr, t->size);
    for (int r = 1; r < t->size && !st; r++)
        if (tcp_io_full(t->fd[r], tab, bytes, 1, deadline))
            st = coh_errf(COH_ERR_PEER_LOST, "tcp transport: rank %d died during the "
                          "rendezvous", r);
    free(tab);
    return st;
}

/* Other ranks: call rank 0, listen on the address that reaches it, learn the table. */
static coh_status rendezvous_rank(tcp *t, const tcp_addr *master, double deadline)
{
    coh_status st = tcp_connect(master, deadline, "rank 0 (MASTER_ADDR)", &t->fd[0]);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    tcp_join j = {TCP_MAGIC, t->size, {0, 0, 0}};
    if (!st && getsockname(t->fd[0], (struct sockaddr *)&sa, &sl) != 0)
        st = coh_errf(COH_ERR_SYSTEM, "tcp transport: getsockname failed");
    if (!st)
        st = tcp_listener(sa.sin_addr.s_addr, 0, &j.addr);
    if (!st)
        st = tcp_handshake_out(t->fd[0], t->gid, t->rank, 0, 0, deadline);
    if (st)
        return st;
    size_t bytes = tcp_table_bytes(t->size);
    char *tab = malloc(bytes), why[96];
    if (!tab)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int rc = tcp_io_full(t->fd[0], &j, sizeof j, 1, deadline);
    int32_t hdr[2] = {0, 0};
    if (!rc) /* rank 0 gives up at the same deadline: its word comes first */
        rc = tcp_io_full(t->fd[0], hdr, sizeof hdr, 0, deadline + 5);
    if (!rc && hdr[1] < 0 && hdr[1] >= -TCP_TABLE_MAX)
        st = coh_errf(COH_ERR_TIMEOUT, "tcp transport: rank %d never joined (rank 0 waited "
                      "%g s)", -1 - hdr[1], t->timeout);
    memcpy(tab, hdr, sizeof hdr);
    if (!rc && !st)
        rc = tcp_io_full(t->fd[0], tab + sizeof hdr, bytes - sizeof hdr, 0, deadline + 5);
    if (!st && rc)
        st = coh_errf(rc == -2 ? COH_ERR_TIMEOUT : COH_ERR_PEER_LOST, "tcp transport: rank 0 "
                      "%s before it sent the table of addresses",
                      rc == -2 ? "went silent" : "died");
    else if (!st && tcp_table_parse(tab, bytes, t->size, t->addr, why, sizeof why))
        st = coh_errf(COH_ERR_INVALID, "tcp transport: bad table of addresses from rank 0: %s",
                      why);
    free(tab);
    return st;
}

coh_status coh_tcp_open(const coh_comm_env *env, void **self)
{
    tcp_addr master;
    coh_status st = tcp_key_init();
    if (!st)
        st = master_of(&master);
    if (st)
        return st;
    char id[160];
    snprintf(id, sizeof id, "%s|%s|%u", env->job, getenv("MASTER_ADDR"),
             (unsigned)ntohs(master.port));
    tcp *t = tcp_new(env->rank, env->size, tcp_gid_of_text(id), env->timeout_s);
    if (!t)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (int r = 0; r < t->size; r++)
        t->world[r] = r;
    double deadline = coh_now_s() + env->timeout_s;
    int spans = env->nnodes > 1 || env->local_size != env->size;
    st = t->rank == 0 ? rendezvous_root(t, &master, spans, deadline)
                      : rendezvous_rank(t, &master, deadline);
    if (!st)
        st = tcp_mesh(t, deadline);
    if (st) {
        tcp_free(t);
        return st;
    }
    *self = t;
    return COH_OK;
}
