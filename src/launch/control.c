/* control.c: the link between the launchers of a static multi-node job. Node 0's launcher
 * listens; the others connect and say HELLO; node 0 answers START (world size, rank base, job
 * id, attempt). A node whose worker fails sends its stderr tail and FAIL; node 0 sends STOP to
 * all; each node answers END when its workers are down; node 0 then sends START again
 * (restart) or EXIT with the root cause. A lost connection counts as a failure, so no node's
 * workers outlive another node's launcher. One text line per message. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "launch/agent.h"

static int is_master(const agent *a) { return a->node_rank == 0; }

static void send_or_lose(agent *a, peer *p, const char *line)
{
    if (p->fd >= 0 && net_send_line(p->fd, line) < 0) {
        close(p->fd);
        p->fd = -1;
    }
    (void)a;
}

static void broadcast(agent *a, const char *line)
{
    for (int i = 0; i < a->npeers; i++)
        send_or_lose(a, &a->peers[i], line);
}

/* Read what arrived; returns 0 open, -1 closed. Lines are handled by the caller. */
static int peer_read(peer *p)
{
    if (p->len >= sizeof p->buf - 1)
        p->len = 0; /* a line this long is not ours: drop it */
    ssize_t r = recv(p->fd, p->buf + p->len, sizeof p->buf - 1 - p->len, 0);
    if (r < 0 && errno == EINTR)
        return 0;
    if (r <= 0) {
        close(p->fd);
        p->fd = -1;
        return -1;
    }
    p->len += (size_t)r;
    return 0;
}

/* Next complete line from p's buffer into line (without '\n'); 0 when none. */
static int peer_line(peer *p, char *line, size_t n)
{
    char *nl = memchr(p->buf, '\n', p->len);
    if (!nl)
        return 0;
    size_t len = (size_t)(nl - p->buf);
    snprintf(line, n, "%.*s", (int)len, p->buf);
    memmove(p->buf, nl + 1, p->len - len - 1);
    p->len -= len + 1;
    return 1;
}

/* ---- joining ---- */

static coh_status master_accept(agent *a, int lfd, double deadline)
{
    int joined = 0;
    while (joined < a->npeers) {
        struct pollfd p[2 + 4096];
        int n = 0, idx[4096];
        p[n++] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
        p[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < a->npeers && n < 2 + 4096; i++)
            if (a->peers[i].fd >= 0 && a->peers[i].node_rank < 0) {
                idx[n] = i;
                p[n++] = (struct pollfd){.fd = a->peers[i].fd, .events = POLLIN};
            }
        double left = deadline - coh_now_s();
        if (left <= 0)
            return coh_errf(COH_ERR_TIMEOUT, "only %d of %d other node(s) joined within %g s", joined, a->npeers, a->o->join_timeout_s);
        if (poll(p, (nfds_t)n, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            return coh_errf(COH_ERR_SYSTEM, "poll: %s", strerror(errno));
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo != SIGCHLD)
                return coh_errf(COH_ERR_SYSTEM, "interrupted by signal %u while waiting for the other nodes", si.ssi_signo);
        }
        if (p[1].revents) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            int slot = -1;
            for (int i = 0; i < a->npeers && slot < 0; i++)
                if (a->peers[i].fd < 0 && a->peers[i].node_rank < 0)
                    slot = i;
            if (fd >= 0 && slot < 0)
                close(fd);
            else if (fd >= 0)
                a->peers[slot].fd = fd, a->peers[slot].len = 0;
        }
        for (int j = 2; j < n; j++) {
            if (!p[j].revents)
                continue;
            peer *q = &a->peers[idx[j]];
            if (peer_read(q) < 0)
                continue; /* went away before saying hello: the slot is free again */
            char line[512];
            int nr, nn, np;
            char host[128];
            if (!peer_line(q, line, sizeof line))
                continue;
            if (sscanf(line, "HELLO %d %d %d %127s", &nr, &nn, &np, host) != 4 || np < 1 || np > 4096) {
                coh_warn("ignoring a connection to the control port that is not a cohort launcher ('%.40s')", line);
                close(q->fd);
                q->fd = -1;
                q->len = 0;
                continue;
            }
            if (nn != a->nnodes || nr < 1 || nr >= a->nnodes) {
                char msg[200];
                snprintf(msg, sizeof msg, "EXIT 2 -1 node %d joined with --nnodes %d but node 0 has --nnodes %d\n", nr, nn, a->nnodes);
                send_or_lose(a, q, msg);
                return coh_errf(COH_ERR_INVALID, "invalid node '%d' with --nnodes %d: node 0 has --nnodes %d (node ranks 1..%d)", nr, nn, a->nnodes, a->nnodes - 1);
            }
            for (int i = 0; i < a->npeers; i++)
                if (a->peers[i].node_rank == nr) {
                    send_or_lose(a, q, "EXIT 2 -1 another launcher already has this --node-rank\n");
                    return coh_errf(COH_ERR_INVALID, "two launchers claim node rank '%d'", nr);
                }
            q->node_rank = nr;
            q->nproc = np;
            snprintf(q->host, sizeof q->host, "%s", host);
            joined++;
        }
    }
    return COH_OK;
}

static void master_send_start(agent *a)
{
    for (int i = 0; i < a->npeers; i++) {
        peer *q = &a->peers[i];
        int base = a->nproc;
        for (int j = 0; j < a->npeers; j++)
            if (a->peers[j].node_rank < q->node_rank)
                base += a->peers[j].nproc;
        char msg[256];
        snprintf(msg, sizeof msg, "START %d %d %d %s\n", a->attempt, a->world, base, a->run_id);
        q->ended = 0;
        q->ntail = 0;
        send_or_lose(a, q, msg);
    }
}

/* Others: wait (bounded) for node 0's next word after HELLO or END. */
static coh_status node_wait_cmd(agent *a, double deadline)
{
    peer *m = &a->peers[0];
    char line[512];
    for (;;) {
        if (peer_line(m, line, sizeof line)) {
            if (!strcmp(line, "STOP"))
                continue; /* a late STOP: our workers are down already */
            break;
        }
        if (m->fd < 0)
            return coh_errf(COH_ERR_PEER_LOST, "node 0's launcher closed the connection");
        struct pollfd p[2] = {{.fd = a->sigfd, .events = POLLIN}, {.fd = m->fd, .events = POLLIN}};
        double left = deadline - coh_now_s();
        if (left <= 0)
            return coh_errf(COH_ERR_TIMEOUT, "node 0's launcher did not start the job within %g s", a->o->join_timeout_s);
        poll(p, 2, (int)(left * 1000) + 1);
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo != SIGCHLD)
                return coh_errf(COH_ERR_SYSTEM, "interrupted by signal %u while waiting for node 0", si.ssi_signo);
        }
        if (p[1].revents)
            peer_read(m);
    }
    int att, world, base, code, root;
    char id[128];
    if (sscanf(line, "START %d %d %d %127s", &att, &world, &base, id) == 4) {
        a->attempt = att, a->world = world, a->base = base;
        snprintf(a->run_id, sizeof a->run_id, "%s", id);
        a->next_cmd = 1;
        return COH_OK;
    }
    if (sscanf(line, "EXIT %d %d", &code, &root) == 2) {
        const char *desc = strchr(strchr(line + 5, ' ') + 1, ' ');
        snprintf(a->exit_desc, sizeof a->exit_desc, "%s", desc ? desc + 1 : "");
        a->exit_from_master = code;
        a->exit_root_node = root;
        a->next_cmd = 2;
        return root == -1 && code == 2 ? coh_errf(COH_ERR_INVALID, "node 0 refused this launcher: %s", a->exit_desc) : COH_OK;
    }
    return coh_errf(COH_ERR_INVALID, "node 0's launcher sent an unexpected message '%.60s'", line);
}

coh_status ctl_join(agent *a)
{
    a->base = 0;
    a->world = a->nproc;
    if (a->o->run_id)
        snprintf(a->run_id, sizeof a->run_id, "%s", a->o->run_id);
    else
        launch_new_run_id(a->run_id, sizeof a->run_id);
    a->npeers = a->nnodes == 1 ? 0 : is_master(a) ? a->nnodes - 1 : 1;
    if (a->npeers == 0)
        return COH_OK;
    a->peers = calloc((size_t)a->npeers, sizeof *a->peers);
    if (!a->peers)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    for (int i = 0; i < a->npeers; i++)
        a->peers[i].fd = -1, a->peers[i].node_rank = -1;
    int port = a->o->control_port > 0 ? a->o->control_port : a->master_port + 1;
    double deadline = coh_now_s() + a->o->join_timeout_s;
    coh_status st;
    if (is_master(a)) {
        int lfd;
        if ((st = net_listen(port, &lfd)))
            return st;
        coh_info("node 0: waiting for %d other node(s) on control port %d", a->npeers, port);
        st = master_accept(a, lfd, deadline);
        close(lfd);
        if (st)
            return st;
        for (int i = 0; i < a->npeers; i++)
            a->world += a->peers[i].nproc;
        master_send_start(a);
        return COH_OK;
    }
    peer *m = &a->peers[0];
    m->node_rank = 0;
    if ((st = net_connect_retry(a->o->master_addr, port, deadline, &m->fd)))
        return st;
    char hello[300];
    snprintf(hello, sizeof hello, "HELLO %d %d %d %s\n", a->node_rank, a->nnodes, a->nproc, a->host);
    if (net_send_line(m->fd, hello) < 0)
        return coh_errf(COH_ERR_PEER_LOST, "lost node 0's launcher while joining");
    if ((st = node_wait_cmd(a, deadline)))
        return st;
    if (a->next_cmd != 1)
        return coh_errf(COH_ERR_PEER_LOST, "node 0 ended the job before it started: %s", a->exit_desc);
    a->next_cmd = 0;
    return COH_OK;
}

/* ---- during an attempt ---- */

int ctl_fill(agent *a, struct pollfd *p)
{
    int n = 0;
    for (int i = 0; i < a->npeers; i++)
        if (a->peers[i].fd >= 0)
            p[n++] = (struct pollfd){.fd = a->peers[i].fd, .events = POLLIN};
    return n;
}

static void fail_line(agent *a, char *msg, size_t n)
{
    const failure *f = &a->fail;
    snprintf(msg, n, "FAIL %d %d %d %d %d %ld %d %d %.3f %s %s\n", f->exit_code, f->restartable,
             f->rank, f->local_rank, f->node_rank, f->pid, f->code, f->sig, f->when,
             f->host[0] ? f->host : a->host, f->what);
}

void ctl_local_failure(agent *a)
{
    if (a->npeers == 0)
        return;
    if (is_master(a)) {
        broadcast(a, "STOP\n");
        return;
    }
    char msg[1024];
    for (int i = 0; i < a->fail.ntail; i++) {
        snprintf(msg, sizeof msg, "TAIL %s\n", a->fail.tail[i]);
        send_or_lose(a, &a->peers[0], msg);
    }
    fail_line(a, msg, sizeof msg);
    send_or_lose(a, &a->peers[0], msg);
}

/* Node 0 got FAIL from a peer: adopt it as the root cause if it is the first. */
static void master_on_fail(agent *a, peer *q, const char *line)
{
    failure f = {0};
    int n = 0;
    if (sscanf(line, "FAIL %d %d %d %d %d %ld %d %d %lf %255s %n", &f.exit_code, &f.restartable, &f.rank,
               &f.local_rank, &f.node_rank, &f.pid, &f.code, &f.sig, &f.when, f.host, &n) < 10)
        return;
    if (!a->fail.valid) {
        f.valid = 1;
        if (n > 0)
            snprintf(f.what, sizeof f.what, "%s", line + n);
        memcpy(f.tail, q->tail, sizeof f.tail);
        f.ntail = q->ntail;
        a->fail = f;
        a->fail_mono = coh_now_s();
    }
    a->remote_stop = 1;
    broadcast(a, "STOP\n");
}

static void on_line(agent *a, peer *q, const char *line)
{
    if (!strncmp(line, "TAIL ", 5) && q->ntail < LAUNCH_TAIL_LINES)
        snprintf(q->tail[q->ntail++], LAUNCH_TAIL_WIDTH, "%.*s", LAUNCH_TAIL_WIDTH - 1, line + 5);
    else if (!strncmp(line, "FAIL ", 5) && is_master(a))
        master_on_fail(a, q, line);
    else if (!strncmp(line, "END", 3) && is_master(a))
        q->ended = 1;
    else if (!strcmp(line, "STOP"))
        a->remote_stop = 1;
    else if (!strncmp(line, "START ", 6) || !strncmp(line, "EXIT ", 5)) {
        /* keep it for node_wait_cmd: put the line back in front of the buffer */
        size_t len = strlen(line);
        if (len + 1 + q->len < sizeof q->buf) {
            memmove(q->buf + len + 1, q->buf, q->len);
            memcpy(q->buf, line, len);
            q->buf[len] = '\n';
            q->len += len + 1;
            a->next_cmd = line[0] == 'S' ? 1 : 2;
        }
    }
}

static void on_lost(agent *a, peer *q)
{
    q->ended = 1;
    if (is_master(a)) {
        agent_fail_other(a, 1, "node %d's launcher (host %s) was lost", q->node_rank, q->host);
        broadcast(a, "STOP\n");
    } else {
        agent_fail_other(a, 1, "lost the connection to node 0's launcher at %s", a->o->master_addr);
        a->next_cmd = 2;
        a->master_lost = 1;
    }
    a->remote_stop = 1;
}

void ctl_handle(agent *a, struct pollfd *p, int n)
{
    for (int j = 0; j < n; j++) {
        if (p[j].revents == 0)
            continue;
        peer *q = NULL;
        for (int i = 0; i < a->npeers && !q; i++) /* handling one may have closed another */
            if (a->peers[i].fd == p[j].fd && p[j].fd >= 0)
                q = &a->peers[i];
        if (!q)
            continue;
        if (peer_read(q) < 0) {
            on_lost(a, q);
            continue;
        }
        char line[4096];
        while (!a->next_cmd && peer_line(q, line, sizeof line))
            on_line(a, q, line);
    }
}

int ctl_settled(agent *a, int local_done)
{
    if (!local_done)
        return 0;
    if (a->npeers == 0)
        return 1;
    if (is_master(a)) {
        /* After a failure every node must answer within its grace period (+5 s slack);
         * one that does not is treated as lost, so node 0 never waits forever. */
        if (a->fail.valid && a->settle_by == 0)
            a->settle_by = coh_now_s() + a->o->grace_s + 5;
        int late = a->settle_by > 0 && coh_now_s() >= a->settle_by;
        for (int i = 0; i < a->npeers; i++) {
            peer *q = &a->peers[i];
            if (q->ended || q->fd < 0)
                continue;
            if (!late)
                return 0;
            coh_warn("node %d did not report its workers down in time: giving up on it", q->node_rank);
            close(q->fd);
            q->fd = -1;
            q->ended = 1;
        }
        return 1;
    }
    if (!a->end_sent) {
        int mine = a->fail.valid && a->fail.node_rank == a->node_rank;
        send_or_lose(a, &a->peers[0], mine ? "END failed\n" : a->remote_stop ? "END stopped\n" : "END ok\n");
        a->end_sent = 1;
    }
    if (a->peers[0].fd < 0 && a->next_cmd == 0)
        on_lost(a, &a->peers[0]);
    return a->next_cmd != 0;
}

/* One line naming the root cause, for the other nodes. */
static void describe(const agent *a, char *buf, size_t n)
{
    const failure *f = &a->fail;
    if (f->rank < 0)
        snprintf(buf, n, "%s", f->what);
    else if (f->sig > 0)
        snprintf(buf, n, "rank %d (node %d, host %.64s, pid %ld) was killed by signal %d", f->rank, f->node_rank, f->host, f->pid, f->sig);
    else
        snprintf(buf, n, "rank %d (node %d, host %.64s, pid %ld) exited with code %d", f->rank, f->node_rank, f->host, f->pid, f->code);
}

coh_status ctl_after_attempt(agent *a, int *restart, int *exit_code)
{
    *restart = 0;
    *exit_code = 0;
    if (a->npeers == 0 || is_master(a)) {
        if (a->fail.valid) {
            *exit_code = a->fail.exit_code;
            *restart = a->fail.restartable && a->attempt < a->o->max_restarts;
        }
        if (*restart)
            a->attempt++;
        if (a->npeers == 0)
            return COH_OK;
        if (*restart) {
            master_send_start(a);
            return COH_OK;
        }
        char desc[300], msg[400];
        if (a->fail.valid)
            describe(a, desc, sizeof desc);
        else
            snprintf(desc, sizeof desc, "every rank exited 0");
        snprintf(msg, sizeof msg, "EXIT %d %d %s\n", *exit_code, a->fail.valid ? a->fail.node_rank : 0, desc);
        broadcast(a, msg);
        return COH_OK;
    }
    if (a->master_lost) {
        *exit_code = a->fail.exit_code;
        return COH_OK;
    }
    coh_status st = node_wait_cmd(a, coh_now_s() + a->o->join_timeout_s);
    if (st)
        return st;
    if (a->next_cmd == 1)
        *restart = 1; /* node_wait_cmd stored the new attempt */
    else
        *exit_code = a->exit_from_master;
    a->next_cmd = 0;
    return COH_OK;
}

void ctl_close(agent *a)
{
    for (int i = 0; i < a->npeers; i++)
        if (a->peers[i].fd >= 0)
            close(a->peers[i].fd);
    free(a->peers);
    a->peers = NULL;
    a->npeers = 0;
}
