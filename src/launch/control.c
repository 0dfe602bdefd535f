/* control.c: the link between the launchers of a static multi-node job. Node 0's launcher
 * listens; every connection first proves it knows the job secret (CHAL nonce from node 0; HELLO
 * with the node's nonce and an HMAC over both; WELCOME with node 0's HMAC, so each side knows
 * the other), within HANDSHAKE_S, or it is closed and logged with its address: only an
 * authenticated HELLO takes a node's place. Node 0 then answers START (world size, rank base,
 * job id, attempt); each node says CANWAIT after the handshake, and one that joined an elastic
 * job during a round is then told WAIT: it waits for its START (the next restart) or EXIT
 * without its join deadline (a node of an older cohort says no CANWAIT, is not told, and keeps
 * its deadline). A node whose worker fails sends its stderr tail (TAIL lines), the first lines
 * of the worker's error report (REPORT lines, when it wrote one) and FAIL; node 0 sends STOP to
 * all; each node answers END when its workers are down; node 0 then sends START again (restart)
 * or EXIT with the root cause. A launcher interrupted after its node's or another's failure
 * sends a FAIL of its own before its END (no worker's: rank -1, not restartable): node 0 keeps
 * its root cause and does not restart, as it does not once a node of a static job is lost. A
 * launcher ignores a line of a kind it does not know, so the protocol grows by new kinds of
 * lines, never by new fields of an existing one: an older node 0 skips the REPORT lines of a
 * newer node, and a newer node 0 shows an older node's failure without a report. Node 0 keeps at
 * most LAUNCH_TAIL_LINES TAIL and LAUNCH_ERROR_LINES REPORT lines per node and attempt, each cut
 * to LAUNCH_TAIL_WIDTH. A lost connection counts as a failure, so no node's workers outlive
 * another node's launcher; one that vanishes without a word (machine or link gone) is lost after
 * COHORT_CONTROL_TIMEOUT, by TCP keepalive (net_keepalive). One text line per message; after the
 * handshake each line ends in an HMAC under the connection's session key over its direction and
 * sequence number, so a line cannot be forged, replayed or reordered. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "launch/agent.h"

#define HANDSHAKE_S 5.0  /* a connection to node 0 must have said a valid HELLO by then */
#define PENDING_MAX CTL_PENDING_MAX
#define HANDSHAKE_LINE CTL_HANDSHAKE_LINE
#define SETTLE_S 2.0     /* elastic: after MIN nodes joined, how long more may still come */
#define CTL_TIMEOUT_S 15.0 /* default of COHORT_CONTROL_TIMEOUT: a silent launcher is lost */

static int is_master(const agent *a) { return a->node_rank == 0; }

/* A signal (not SIGCHLD) ended a wait of the launchers outside an attempt (joining, or waiting
 * for node 0's word after one): this launcher then exits 128 + it, as an interrupted job does. */
static coh_status interrupted_while(agent *a, int sig, const char *during)
{
    const char *abbr = sigabbrev_np(sig);
    a->interrupted = sig;
    return coh_errf(COH_ERR_SYSTEM, "interrupted by SIG%s while %s", abbr ? abbr : "?", during);
}

/* One authenticated line: "PAYLOAD MAC"; line is the payload, with or without its '\n'. */
static void send_or_lose(agent *a, peer *p, const char *line)
{
    if (p->fd < 0)
        return;
    char payload[1200], seq[24], mac[CTL_MAC_HEX + 1], out[1300];
    snprintf(payload, sizeof payload, "%.*s", (int)strcspn(line, "\n"), line);
    snprintf(seq, sizeof seq, "%lu", p->send_seq++);
    auth_mac_hex(p->skey, sizeof p->skey, is_master(a) ? "m" : "n", seq, payload, mac);
    snprintf(out, sizeof out, "%s %s\n", payload, mac);
    if (net_send_line(p->fd, out) < 0) {
        p->lost_errno = errno;
        close(p->fd);
        p->fd = -1;
        p->send_lost = 1; /* no longer polled: ctl_handle takes it as lost */
    }
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
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (r <= 0) {
        p->lost_errno = r < 0 ? errno : 0;
        close(p->fd);
        p->fd = -1;
        return -1;
    }
    p->len += (size_t)r;
    return 0;
}

/* Next complete line of buf into line (without '\n'); 0 when none. */
static int raw_line(char *buf, size_t *len, char *line, size_t n)
{
    char *nl = memchr(buf, '\n', *len);
    if (!nl)
        return 0;
    size_t l = (size_t)(nl - buf);
    snprintf(line, n, "%.*s", (int)l, buf);
    memmove(buf, nl + 1, *len - l - 1);
    *len -= l + 1;
    return 1;
}

/* Next authenticated line from p: 1 (line is its payload), 0 none yet, -1 a line whose MAC
 * does not verify (forged, replayed or reordered). */
static int peer_line(agent *a, peer *p, char *line, size_t n)
{
    if (!raw_line(p->buf, &p->len, line, n))
        return 0;
    const char *mac;
    char seq[24], want[CTL_MAC_HEX + 1];
    if (!ctl_split_mac(line, &mac))
        return -1;
    snprintf(seq, sizeof seq, "%lu", p->recv_seq);
    auth_mac_hex(p->skey, sizeof p->skey, is_master(a) ? "n" : "m", seq, line, want);
    if (!auth_mac_equal(mac, want))
        return -1;
    p->recv_seq++;
    return 1;
}

static void session_key(const agent *a, const char *nonce_m, const char *nonce_n, peer *p)
{
    auth_mac(a->key.k, a->key.len, "session", nonce_m, nonce_n, p->skey);
    p->send_seq = p->recv_seq = 0;
}

/* ---- joining: node 0 ---- */

static void drop(pending *pd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void drop(pending *pd, const char *fmt, ...)
{
    char why[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    coh_warn("closed a connection to the control port from %s: %s", pd->addr, why);
    close(pd->fd);
    pd->fd = -1;
}

static void accept_one(agent *a, int lfd, pending *pend, int *np)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    pending pd = {.fd = fd, .deadline = coh_now_s() + HANDSHAKE_S};
    net_peer_name(fd, pd.addr, sizeof pd.addr);
    if (*np >= PENDING_MAX) {
        drop(&pd, "%d connections are in their handshake already", PENDING_MAX);
        return;
    }
    char chal[CTL_NONCE_HEX + 8];
    if (auth_nonce(pd.nonce) != COH_OK) {
        drop(&pd, "%s", coh_last_error());
        return;
    }
    snprintf(chal, sizeof chal, "CHAL %s\n", pd.nonce);
    if (net_send_line(fd, chal) < 0) {
        drop(&pd, "it went away before the handshake");
        return;
    }
    (void)a;
    pend[(*np)++] = pd;
}

/* An authenticated node: checks that only a launcher of this job can fail (its --nnodes, its
 * rank), then its place: in the round being formed, or (elastic, during a round) waiting for
 * the next restart. */
static coh_status admit(agent *a, peer *q, const ctl_hello *h, int *joined)
{
    int n = a->o->nnodes;
    if (h->nnodes != n || h->node_rank < 1 || h->node_rank >= n) {
        char msg[200];
        snprintf(msg, sizeof msg, "EXIT 2 -1 node %d joined with --nnodes %d but node 0 has --nnodes %d\n", h->node_rank, h->nnodes, n);
        send_or_lose(a, q, msg);
        return coh_errf(COH_ERR_INVALID, "invalid node '%d' with --nnodes %d: node 0 has --nnodes %d (node ranks 1..%d)", h->node_rank, h->nnodes, n, n - 1);
    }
    for (int i = 0; i < a->npeers && !a->elastic; i++) /* elastic: node 0 numbers the nodes */
        if (a->peers[i].node_rank == h->node_rank) {
            send_or_lose(a, q, "EXIT 2 -1 another launcher already has this --node-rank\n");
            return coh_errf(COH_ERR_INVALID, "two launchers claim node rank '%d'", h->node_rank);
        }
    q->node_rank = h->node_rank;
    q->nproc = h->nproc;
    q->active = joined != NULL;
    snprintf(q->host, sizeof q->host, "%s", h->host);
    if (joined) {
        (*joined)++;
        return COH_OK;
    }
    /* its CANWAIT, when it comes, gets WAIT (on_line) */
    coh_info("a node joined from %s (host %s, %d process(es)): it enters at the next restart", q->addr, q->host, q->nproc);
    return COH_OK;
}

/* A line from a connection in its handshake: a HELLO that proves the secret takes a free place;
 * anything else closes the connection, logged with its address. */
static coh_status on_hello(agent *a, pending *pd, const char *line, int *joined)
{
    ctl_hello h;
    if (!ctl_parse_hello(line, &h)) {
        drop(pd, "it sent '%.40s' instead of a cohort launcher's HELLO", line);
        return COH_OK;
    }
    char body[HANDSHAKE_LINE], want[CTL_MAC_HEX + 1];
    snprintf(body, sizeof body, "%.*s", (int)h.body_len, line);
    auth_mac_hex(a->key.k, a->key.len, "hello", pd->nonce, body, want);
    if (!auth_mac_equal(h.mac, want)) {
        a->refused++;
        snprintf(a->refused_desc, sizeof a->refused_desc, "node rank %d, host %.64s, from %s", h.node_rank, h.host, pd->addr);
        net_send_line(pd->fd, "DENY the job secrets differ\n");
        drop(pd, "its HELLO (node rank %d, host %.64s) does not prove this job's secret: a stranger, or a launcher given another --job-token", h.node_rank, h.host);
        return COH_OK;
    }
    peer *q = NULL;
    for (int i = 0; i < a->npeers && !q; i++)
        if (a->peers[i].fd < 0 && a->peers[i].node_rank < 0)
            q = &a->peers[i];
    if (!q) {
        drop(pd, "every node's place is taken");
        return COH_OK;
    }
    char mac[CTL_MAC_HEX + 1], welcome[CTL_MAC_HEX + 16];
    auth_mac_hex(a->key.k, a->key.len, "welcome", pd->nonce, h.nonce, mac);
    snprintf(welcome, sizeof welcome, "WELCOME %s\n", mac);
    q->fd = pd->fd;
    pd->fd = -1;
    fcntl(q->fd, F_SETFL, fcntl(q->fd, F_GETFL) & ~O_NONBLOCK); /* whole lines from now on */
    if (net_keepalive(q->fd, a->ctl_timeout_s) != COH_OK)
        coh_warn("%s: a lost node may go unnoticed", coh_last_error());
    q->len = 0;
    q->lost_errno = 0;
    snprintf(q->addr, sizeof q->addr, "%s", pd->addr);
    session_key(a, pd->nonce, h.nonce, q);
    if (net_send_line(q->fd, welcome) < 0) {
        close(q->fd);
        q->fd = -1;
        return COH_OK;
    }
    return admit(a, q, &h, joined);
}

/* What arrived on a connection in its handshake. */
static coh_status pending_input(agent *a, pending *pd, int *joined)
{
    ssize_t r = recv(pd->fd, pd->buf + pd->len, sizeof pd->buf - pd->len, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return COH_OK;
    if (r <= 0) {
        close(pd->fd); /* went away before its handshake: nothing to log */
        pd->fd = -1;
        return COH_OK;
    }
    pd->len += (size_t)r;
    char line[HANDSHAKE_LINE];
    if (raw_line(pd->buf, &pd->len, line, sizeof line))
        return on_hello(a, pd, line, joined);
    if (pd->len >= sizeof pd->buf)
        drop(pd, "a line longer than %d bytes", HANDSHAKE_LINE);
    return COH_OK;
}

static coh_status join_timeout(const agent *a, int joined)
{
    if (a->refused)
        return coh_errf(COH_ERR_INVALID, "only %d of %d other node(s) joined within %g s, and %d launcher(s) were refused because their job secret differs (last: %s): give every node the same --job-token or COHORT_JOB_TOKEN", joined, a->npeers, a->o->join_timeout_s, a->refused, a->refused_desc);
    return coh_errf(COH_ERR_TIMEOUT, "only %d of %d other node(s) joined within %g s", joined, a->npeers, a->o->join_timeout_s);
}

static int poll_ms(double until)
{
    double left = until - coh_now_s();
    /* an hour at most: a wait without a deadline (INFINITY) polls again after it */
    return left <= 0 ? 0 : left > 3600 ? 3600 * 1000 : (int)(left * 1000) + 1;
}

static coh_status master_accept(agent *a, int lfd, double deadline)
{
    pending pend[PENDING_MAX];
    int np = 0, joined = 0, need = a->elastic ? a->o->nnodes_min - 1 : a->npeers;
    double settle = 0; /* elastic: when the nodes that came by then start */
    coh_status st = COH_OK;
    while (joined < a->npeers && st == COH_OK) {
        struct pollfd p[2 + PENDING_MAX];
        if (joined >= need && settle == 0)
            settle = coh_now_s() + SETTLE_S;
        if (settle > 0 && coh_now_s() >= settle)
            break;
        double until = settle > 0 ? settle : deadline;
        p[0] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
        p[1] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < np; i++) {
            p[2 + i] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
            if (pend[i].deadline < until)
                until = pend[i].deadline;
        }
        if (settle == 0 && coh_now_s() >= deadline) {
            st = join_timeout(a, joined);
            break;
        }
        if (poll(p, (nfds_t)(2 + np), poll_ms(until)) < 0 && errno != EINTR) {
            st = coh_errf(COH_ERR_SYSTEM, "poll: %s", strerror(errno));
            break;
        }
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo != SIGCHLD)
                st = interrupted_while(a, (int)si.ssi_signo, "waiting for the other nodes");
        }
        for (int i = 0; i < np && st == COH_OK; i++) {
            if (p[2 + i].revents)
                st = pending_input(a, &pend[i], &joined);
            else if (coh_now_s() >= pend[i].deadline)
                drop(&pend[i], "no HELLO within %g s", HANDSHAKE_S);
        }
        int k = 0; /* keep the connections still in their handshake */
        for (int i = 0; i < np; i++)
            if (pend[i].fd >= 0)
                pend[k++] = pend[i];
        np = k;
        if (p[1].revents && st == COH_OK)
            accept_one(a, lfd, pend, &np);
    }
    for (int i = 0; i < np; i++)
        drop(&pend[i], "%s", st == COH_OK ? "every node has joined" : "the job ends");
    return st;
}

/* Node 0: START for every node of the round. Elastic rounds number their nodes 1.. in the
 * order of their places and count the world anew. */
static void master_send_start(agent *a)
{
    int k = 1;
    a->world = a->nproc;
    for (int i = 0; i < a->npeers; i++)
        if (a->peers[i].active) {
            if (a->elastic)
                a->peers[i].node_rank = k;
            k++;
            a->world += a->peers[i].nproc;
        }
    if (a->elastic)
        a->nnodes = k;
    for (int i = 0; i < a->npeers; i++) {
        peer *q = &a->peers[i];
        if (!q->active)
            continue;
        int base = a->nproc;
        for (int j = 0; j < a->npeers; j++)
            if (a->peers[j].active && a->peers[j].node_rank < q->node_rank)
                base += a->peers[j].nproc;
        char msg[256];
        snprintf(msg, sizeof msg, "START %d %d %d %s %d %d\n", a->attempt, a->world, base, a->run_id, q->node_rank, a->nnodes);
        q->ended = 0;
        q->ntail = q->nerror = 0;
        send_or_lose(a, q, msg);
    }
}

/* ---- joining: the other nodes ---- */

/* Others: the next line from node 0 before the deadline: 1 raw, 0 timeout/closed. With auth,
 * an authenticated line; -1 when one fails authentication. */
static int node_next_line(agent *a, int auth, char *line, size_t n, double deadline, coh_status *st)
{
    peer *m = &a->peers[0];
    *st = COH_OK;
    for (;;) {
        int got = auth ? peer_line(a, m, line, n) : raw_line(m->buf, &m->len, line, n);
        if (got != 0)
            return got;
        if (m->fd < 0)
            return 0;
        struct pollfd p[2] = {{.fd = a->sigfd, .events = POLLIN}, {.fd = m->fd, .events = POLLIN}};
        if (coh_now_s() >= deadline)
            return 0;
        poll(p, 2, poll_ms(deadline));
        if (p[0].revents) {
            struct signalfd_siginfo si;
            if (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si && si.ssi_signo != SIGCHLD) {
                *st = interrupted_while(a, (int)si.ssi_signo, "waiting for node 0's launcher");
                return 0;
            }
        }
        if (p[1].revents)
            peer_read(m);
    }
}

/* A connection that ended because the other end stopped answering (keepalive or unacknowledged
 * data timed out, or its network became unreachable), not by a close. */
static int silent(const peer *p)
{
    return p->lost_errno == ETIMEDOUT || p->lost_errno == EHOSTUNREACH ||
           p->lost_errno == ENETUNREACH;
}

/* Others: wait (bounded) for node 0's next word after HELLO or END. */
static coh_status node_wait_cmd(agent *a, double deadline)
{
    peer *m = &a->peers[0];
    char line[512];
    coh_status st = COH_OK;
    if (a->cmd_line[0]) { /* read already, during the attempt */
        snprintf(line, sizeof line, "%s", a->cmd_line);
        a->cmd_line[0] = '\0';
    } else {
        for (;;) {
            int got = node_next_line(a, 1, line, sizeof line, deadline, &st);
            if (st)
                return st;
            if (got < 0)
                return coh_errf(COH_ERR_PEER_LOST, "a message from node 0's launcher failed authentication: closing the connection");
            if (got == 0 && m->fd < 0 && silent(m))
                return coh_errf(COH_ERR_PEER_LOST, "node 0's launcher at %s stopped answering for %g s (%s): its machine or the link to it is gone", a->o->master_addr, a->ctl_timeout_s, strerror(m->lost_errno));
            if (got == 0 && m->fd < 0)
                return coh_errf(COH_ERR_PEER_LOST, "node 0's launcher closed the connection");
            if (got == 0)
                return coh_errf(COH_ERR_TIMEOUT, "node 0's launcher did not start the job within %g s", a->o->join_timeout_s);
            if (!strcmp(line, "WAIT")) {
                /* Node 0 took this node in during a round: it enters at the next restart, however
                 * long the round lasts. What still ends the wait: node 0's launcher gone (its
                 * connection closed, or silent for COHORT_CONTROL_TIMEOUT: keepalive), a signal,
                 * or the job's end (EXIT). */
                coh_info("node 0 is running a round of the job: this node waits for the next round and enters at the next restart");
                deadline = INFINITY;
                continue;
            }
            if (strcmp(line, "STOP"))
                break; /* a late STOP: our workers are down already */
        }
    }
    int att, world, base, code, root, nr, nn;
    const char *desc;
    char id[128];
    if (ctl_parse_start(line, &att, &world, &base, id, sizeof id, &nr, &nn)) {
        a->attempt = att, a->world = world, a->base = base, a->node_rank = nr, a->nnodes = nn;
        snprintf(a->run_id, sizeof a->run_id, "%s", id);
        a->next_cmd = 1;
        return COH_OK;
    }
    if (ctl_parse_exit(line, &code, &root, &desc)) {
        snprintf(a->exit_desc, sizeof a->exit_desc, "%s", desc);
        a->exit_from_master = code;
        a->exit_root_node = root;
        a->next_cmd = 2;
        return root == -1 && code == 2 ? coh_errf(COH_ERR_INVALID, "node 0 refused this launcher: %s", a->exit_desc) : COH_OK;
    }
    return coh_errf(COH_ERR_INVALID, "node 0's launcher sent an unexpected message '%.60s'", line);
}

/* Others: the handshake with node 0 (CHAL, HELLO, WELCOME); both sides prove the secret. */
static coh_status node_handshake(agent *a, int port, double deadline)
{
    peer *m = &a->peers[0];
    char line[HANDSHAKE_LINE], nonce_m[CTL_NONCE_HEX + 1], nonce_n[CTL_NONCE_HEX + 1];
    char mac[CTL_MAC_HEX + 1], want[CTL_MAC_HEX + 1], body[400], hello[480];
    coh_status st;
    int got = node_next_line(a, 0, line, sizeof line, deadline, &st);
    if (st)
        return st;
    if (got <= 0 || !ctl_parse_chal(line, nonce_m))
        return coh_errf(COH_ERR_INVALID, "the control port %s:%d did not answer as a cohort launcher (%s)", a->o->master_addr, port, got <= 0 ? "no challenge" : "unexpected first line");
    if ((st = auth_nonce(nonce_n)))
        return st;
    snprintf(body, sizeof body, "HELLO %d %d %d %.127s %s", a->node_rank, a->nnodes, a->nproc, a->host, nonce_n);
    auth_mac_hex(a->key.k, a->key.len, "hello", nonce_m, body, mac);
    snprintf(hello, sizeof hello, "%s %s\n", body, mac);
    if (net_send_line(m->fd, hello) < 0)
        return coh_errf(COH_ERR_PEER_LOST, "lost node 0's launcher while joining");
    got = node_next_line(a, 0, line, sizeof line, deadline, &st);
    if (st)
        return st;
    if (got > 0 && !strncmp(line, "DENY", 4))
        return coh_errf(COH_ERR_INVALID, "node 0's launcher at %s:%d refused this launcher: the job secrets differ (give every node the same --job-token or COHORT_JOB_TOKEN)", a->o->master_addr, port);
    if (got <= 0 || !ctl_parse_welcome(line, mac))
        return coh_errf(COH_ERR_PEER_LOST, "node 0's launcher at %s:%d ended the handshake", a->o->master_addr, port);
    auth_mac_hex(a->key.k, a->key.len, "welcome", nonce_m, nonce_n, want);
    if (!auth_mac_equal(mac, want))
        return coh_errf(COH_ERR_INVALID, "the launcher at %s:%d does not prove this job's secret: the job secrets differ (give every node the same --job-token or COHORT_JOB_TOKEN)", a->o->master_addr, port);
    session_key(a, nonce_m, nonce_n, m);
    return COH_OK;
}

/* COHORT_CONTROL_TIMEOUT: seconds without an answer after which another launcher is lost. */
static coh_status control_timeout(agent *a)
{
    const char *s = getenv("COHORT_CONTROL_TIMEOUT");
    char *end = NULL;
    a->ctl_timeout_s = CTL_TIMEOUT_S;
    if (!s)
        return COH_OK;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !(v >= 2 && v <= 3600))
        return coh_errf(COH_ERR_INVALID, "invalid COHORT_CONTROL_TIMEOUT '%s': expected seconds from 2 to 3600", s);
    a->ctl_timeout_s = v;
    return COH_OK;
}

static coh_status load_key(agent *a, int npeers, int port)
{
    coh_status st = auth_load_key(a->o->job_token, getenv("COHORT_JOB_TOKEN"), &a->key);
    if (st == COH_OK && !a->key.given && npeers > 0)
        coh_warn("no job secret (--job-token FILE or COHORT_JOB_TOKEN): any program that reaches control port %d can join or stop this job; use it only on a trusted network", port);
    return st;
}

coh_status ctl_join(agent *a)
{
    a->base = 0;
    a->world = a->nproc;
    if (a->o->run_id)
        snprintf(a->run_id, sizeof a->run_id, "%s", a->o->run_id);
    else
        launch_new_run_id(a->run_id, sizeof a->run_id);
    int npeers = a->nnodes == 1 ? 0 : is_master(a) ? a->nnodes - 1 : 1;
    a->elastic = a->o->nnodes_min > 0;
    a->lfd = -1;
    int port = a->o->control_port > 0 ? a->o->control_port : a->master_port + 1;
    coh_status st = control_timeout(a);
    if (st == COH_OK)
        st = load_key(a, npeers, port);
    if (st || npeers == 0)
        return st;
    a->peers = calloc((size_t)npeers, sizeof *a->peers);
    if (!a->peers)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    a->npeers = npeers;
    for (int i = 0; i < a->npeers; i++)
        a->peers[i].fd = -1, a->peers[i].node_rank = -1;
    double deadline = coh_now_s() + a->o->join_timeout_s;
    if (is_master(a)) {
        int lfd;
        if ((st = net_listen(a->o->master_addr, port, &lfd)))
            return st;
        coh_info("node 0: waiting for %d other node(s) on control port %d", a->npeers, port);
        st = master_accept(a, lfd, deadline);
        if (st || !a->elastic)
            close(lfd);
        else
            a->lfd = lfd;
        if (st == COH_OK && a->elastic && !(a->pend = calloc(PENDING_MAX, sizeof *a->pend)))
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
        if (st == COH_OK)
            master_send_start(a);
        return st;
    }
    peer *m = &a->peers[0];
    m->node_rank = 0;
    int sig = 0;
    if ((st = net_connect_retry(a->o->master_addr, port, deadline, a->sigfd, &sig, &m->fd)))
        a->interrupted = sig; /* a signal during the connect: exit 128 + it */
    if (st || (st = net_keepalive(m->fd, a->ctl_timeout_s)) || (st = node_handshake(a, port, deadline)))
        return st;
    /* this launcher understands WAIT (node 0 sends it only then); an older node 0 ignores the line */
    send_or_lose(a, m, "CANWAIT\n");
    if ((st = node_wait_cmd(a, deadline)))
        return st;
    if (a->next_cmd == 2) { /* the job ended while this node waited to enter it: run.c exits with its code */
        coh_info("the job ended before this node entered it: %s", a->exit_desc);
        return COH_OK;
    }
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
    if (a->lfd >= 0)
        p[n++] = (struct pollfd){.fd = a->lfd, .events = POLLIN};
    for (int i = 0; i < a->npend; i++)
        p[n++] = (struct pollfd){.fd = a->pend[i].fd, .events = POLLIN};
    return n;
}

double ctl_deadline(const agent *a)
{
    double t = 0;
    for (int i = 0; i < a->npend; i++)
        if (t == 0 || a->pend[i].deadline < t)
            t = a->pend[i].deadline;
    return t;
}

/* Elastic node 0 during a round: late nodes and strangers at the control port. A late node
 * waits for the next restart; nothing here can end the round but an authenticated launcher
 * of another job shape (its --nnodes), as at the start. */
static void handle_port(agent *a, struct pollfd *p, int n)
{
    for (int j = 0; j < n; j++) {
        if (!p[j].revents)
            continue;
        for (int i = 0; i < a->npend; i++)
            if (a->pend[i].fd == p[j].fd && pending_input(a, &a->pend[i], NULL) != COH_OK) {
                agent_fail_other(a, 2, "%s", coh_last_error());
                a->remote_stop = 1;
                broadcast(a, "STOP\n");
            }
    }
    double now = coh_now_s();
    int k = 0;
    for (int i = 0; i < a->npend; i++) {
        if (a->pend[i].fd >= 0 && now >= a->pend[i].deadline)
            drop(&a->pend[i], "no HELLO within %g s", HANDSHAKE_S);
        if (a->pend[i].fd >= 0)
            a->pend[k++] = a->pend[i];
    }
    a->npend = k;
    for (int j = 0; j < n; j++)
        if (p[j].revents && p[j].fd == a->lfd)
            accept_one(a, a->lfd, a->pend, &a->npend);
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
    for (int i = 0; i < a->fail.nerror; i++) {
        snprintf(msg, sizeof msg, "REPORT %s\n", a->fail.error[i]);
        send_or_lose(a, &a->peers[0], msg);
    }
    fail_line(a, msg, sizeof msg);
    send_or_lose(a, &a->peers[0], msg);
}

void ctl_local_final(agent *a, int exit_code, const char *what)
{
    if (a->npeers == 0)
        return;
    if (is_master(a)) { /* node 0 decides: the others need only stop */
        broadcast(a, "STOP\n");
        return;
    }
    /* A FAIL of its own (no worker's: rank -1, not restartable) after the one node 0 has: node 0
     * keeps its root cause, and does not restart. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char msg[1024];
    snprintf(msg, sizeof msg, "FAIL %d 0 -1 0 %d 0 0 0 %.3f %s %s\n", exit_code, a->node_rank,
             (double)ts.tv_sec + ts.tv_nsec * 1e-9, a->host, what);
    send_or_lose(a, &a->peers[0], msg);
}

/* f, a worker's failure, happened before cur, the worker failure taken as the root cause so
 * far. Its FAIL can arrive later than cur was taken: node 0 reaps its own worker that failed of
 * another node's failure before that node's word crosses the network, and of two other nodes
 * the first to fail need not be the first heard. So failures are put in the order of their
 * times, as torchrun names the failure with the earliest timestamp its root cause (the nodes'
 * clocks, kept together by NTP). An interruption or a lost launcher, once taken, stays: the job
 * ends as it said (an interrupted job is not restarted). */
static int failed_before(const failure *f, const failure *cur)
{
    return f->rank >= 0 && cur->rank >= 0 && f->when < cur->when;
}

/* Node 0 got FAIL from a peer: the root cause when it is the first failure, or an earlier one. */
static void master_on_fail(agent *a, peer *q, const char *line)
{
    failure f;
    if (!ctl_parse_fail(line, &f))
        return;
    if (!a->fail.valid || failed_before(&f, &a->fail)) {
        double heard = a->fail.valid ? a->fail_mono : coh_now_s(); /* teardown counts from it */
        f.valid = 1;
        memcpy(f.tail, q->tail, sizeof f.tail);
        f.ntail = q->ntail;
        memcpy(f.error, q->error, sizeof f.error);
        f.nerror = q->nerror;
        a->fail = f;
        a->fail_mono = heard;
    } else if (!f.restartable && f.rank < 0) {
        /* that node's launcher was interrupted (or could not start a worker) after the root
         * cause: the root cause stays, and the job is not restarted */
        agent_fail_final(a, f.exit_code, "%s", f.what);
    }
    a->remote_stop = 1;
    broadcast(a, "STOP\n");
}

static void on_line(agent *a, peer *q, const char *line)
{
    if (!strncmp(line, "TAIL ", 5)) {
        if (q->ntail < LAUNCH_TAIL_LINES)
            ctl_parse_text(line, "TAIL", q->tail[q->ntail++], LAUNCH_TAIL_WIDTH);
    } else if (!strncmp(line, "REPORT ", 7)) {
        if (q->nerror < LAUNCH_ERROR_LINES)
            ctl_parse_text(line, "REPORT", q->error[q->nerror++], LAUNCH_TAIL_WIDTH);
    } else if (!strncmp(line, "FAIL ", 5) && is_master(a))
        master_on_fail(a, q, line);
    else if (!strncmp(line, "END", 3) && is_master(a))
        q->ended = 1;
    else if (!strcmp(line, "CANWAIT") && is_master(a) && !q->active && q->node_rank >= 0)
        /* a node taken in during a round that knows WAIT: it waits for the next round without
         * its --join-timeout, which this round may outlast (an older node, which says no
         * CANWAIT and would take WAIT for an error, keeps its deadline) */
        send_or_lose(a, q, "WAIT\n");
    else if (!strcmp(line, "STOP"))
        a->remote_stop = 1;
    else if (!strncmp(line, "START ", 6) || !strncmp(line, "EXIT ", 5)) {
        /* keep it for node_wait_cmd */
        snprintf(a->cmd_line, sizeof a->cmd_line, "%.*s", (int)sizeof a->cmd_line - 1, line);
        a->next_cmd = line[0] == 'S' ? 1 : 2;
    }
}

static void on_lost(agent *a, peer *q)
{
    q->ended = 1;
    if (is_master(a) && !q->active) { /* elastic: a node waiting for the next round left */
        coh_warn("node from %s (host %s), waiting for the next round, left", q->addr, q->host);
        q->node_rank = -1;
        return;
    }
    if (is_master(a)) {
        char what[300]; /* cut to fail.what when it is kept */
        if (silent(q))
            snprintf(what, sizeof what, "node %d's launcher (host %.64s, %s) stopped answering for %g s: its machine or link is gone", q->node_rank, q->host, q->addr, a->ctl_timeout_s);
        else
            snprintf(what, sizeof what, "node %d's launcher (host %.64s) was lost", q->node_rank, q->host);
        if (a->elastic) { /* the job goes on with the nodes that remain */
            int first = !a->fail.valid;
            agent_fail_other(a, 1, "%s", what);
            if (first)
                a->fail.restartable = 1;
        } else {
            /* A static job has no world without this node: even when a worker failure came
             * first (the root cause, restartable), the job ends here, and says why. */
            agent_fail_final(a, 1, "%s", what);
        }
        broadcast(a, "STOP\n");
    } else {
        if (silent(q))
            agent_fail_other(a, 1, "node 0's launcher at %s stopped answering for %g s: its machine or the link to it is gone", a->o->master_addr, a->ctl_timeout_s);
        else
            agent_fail_other(a, 1, "lost the connection to node 0's launcher at %s", a->o->master_addr);
        a->next_cmd = 2;
        a->master_lost = 1;
    }
    a->remote_stop = 1;
}

/* Peers whose connection a failed send closed: no longer polled, so taken as lost here (each
 * on_lost may broadcast STOP and lose another). */
static void take_send_losses(agent *a)
{
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < a->npeers; i++)
            if (a->peers[i].send_lost) {
                a->peers[i].send_lost = 0;
                on_lost(a, &a->peers[i]);
                again = 1;
            }
    }
}

void ctl_handle(agent *a, struct pollfd *p, int n)
{
    take_send_losses(a);
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
        int got;
        while (!a->next_cmd && (got = peer_line(a, q, line, sizeof line)) != 0) {
            if (got < 0) {
                coh_warn("a message from %s failed authentication: closing the connection", q->addr[0] ? q->addr : a->o->master_addr);
                close(q->fd);
                q->fd = -1;
                on_lost(a, q);
                break;
            }
            on_line(a, q, line);
        }
    }
    /* after the peers: a connection that completes its handshake here becomes a peer whose
     * revents above were not its own */
    if (a->lfd >= 0)
        handle_port(a, p, n);
    take_send_losses(a);
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
            if (q->ended || q->fd < 0 || !q->active)
                continue;
            if (!late)
                return 0;
            coh_warn("node %d did not report its workers down in time: giving up on it", q->node_rank);
            close(q->fd);
            q->fd = -1;
            q->ended = 1;
            if (!a->elastic) /* as lost: a static job cannot start again without it */
                agent_fail_final(a, 1, "node %d's launcher (host %.64s) did not report its workers down within %g s of the failure", q->node_rank, q->host, a->o->grace_s + 5);
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

/* Elastic node 0 after a failed round: the nodes still connected (those that waited included)
 * form the next round if they are at least MIN; 1 then, else 0 (the job ends). */
static int elastic_next_round(agent *a)
{
    int nodes = 1;
    for (int i = 0; i < a->npeers; i++) {
        peer *q = &a->peers[i];
        q->active = q->fd >= 0 && q->node_rank >= 0;
        if (q->fd < 0)
            q->node_rank = -1; /* its place is free for a later node */
        nodes += q->active;
    }
    if (nodes >= a->o->nnodes_min) {
        coh_info("next round: %d node(s) of %d..%d", nodes, a->o->nnodes_min, a->o->nnodes);
        return 1;
    }
    coh_warn("only %d node(s) remain, below the --nnodes minimum of %d: the job ends", nodes, a->o->nnodes_min);
    return 0;
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
        take_send_losses(a);
        /* However a node was lost (a failed send, one given up on), a static job never starts
         * again without it; a job that ends anyway needs no second word of it. */
        for (int i = 0; i < a->npeers && !a->elastic; i++)
            if (a->peers[i].fd < 0 && (!a->fail.valid || a->fail.restartable))
                agent_fail_final(a, 1, "node %d's launcher (host %.64s) was lost", a->peers[i].node_rank, a->peers[i].host);
        int code = a->fail.valid ? a->fail.exit_code : 0; /* the root cause's: the job's */
        if (a->fail.valid)
            *restart = a->fail.restartable && !a->final_why[0] && a->attempt < a->o->max_restarts;
        /* an interrupted launcher exits 128 + its signal, whatever the root cause */
        *exit_code = a->interrupted ? 128 + a->interrupted : code;
        if (*restart && a->elastic)
            *restart = elastic_next_round(a);
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
        size_t dl = strlen(desc); /* what ended the job after its root cause: the others see it */
        if (a->final_why[0])
            snprintf(desc + dl, sizeof desc - dl, "; then %s", a->final_why);
        snprintf(msg, sizeof msg, "EXIT %d %d %s\n", code, a->fail.valid ? a->fail.node_rank : 0, desc);
        broadcast(a, msg);
        return COH_OK;
    }
    if (a->master_lost) {
        *exit_code = a->interrupted ? 128 + a->interrupted : a->fail.exit_code;
        return COH_OK;
    }
    coh_status st = node_wait_cmd(a, coh_now_s() + a->o->join_timeout_s);
    if (st)
        return st;
    if (a->next_cmd == 1 && a->interrupted) {
        /* node 0 decided before it heard of the interruption (or does not know it ends the job):
         * this launcher ends all the same, and node 0 finds this node lost */
        coh_warn("node 0 restarts the job, but this launcher was interrupted: it does not take part");
        snprintf(a->exit_desc, sizeof a->exit_desc, "%s", a->fail.valid && a->fail.rank < 0 ? a->fail.what : "this launcher was interrupted");
        a->exit_root_node = a->node_rank;
        a->exit_from_master = 128 + a->interrupted;
    }
    if (a->next_cmd == 1 && !a->interrupted)
        *restart = 1; /* node_wait_cmd stored the new attempt */
    else
        *exit_code = a->interrupted ? 128 + a->interrupted : a->exit_from_master;
    a->next_cmd = 0;
    return COH_OK;
}

void ctl_close(agent *a)
{
    for (int i = 0; i < a->npend; i++)
        close(a->pend[i].fd);
    free(a->pend);
    a->pend = NULL;
    a->npend = 0;
    if (a->lfd >= 0)
        close(a->lfd);
    a->lfd = -1;
    for (int i = 0; i < a->npeers; i++)
        if (a->peers[i].fd >= 0)
            close(a->peers[i].fd);
    free(a->peers);
    a->peers = NULL;
    a->npeers = 0;
}
