/* net.c: the launcher's TCP plumbing: free ports, "is this port taken", and the control
 * connection between the launchers of a multi-node job. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "launch/launch_int.h"

/* A socket bound to the port on all interfaces; SO_REUSEADDR as PyTorch's store uses, so that
 * only a live listener (not TIME_WAIT leftovers) makes the port "in use". */
static int bind_any(int port, int *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

coh_status net_free_port(int *port)
{
    int err = 0, fd = bind_any(0, &err);
    if (fd < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot find a free port: %s", strerror(err));
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        err = errno;
        close(fd);
        return coh_errf(COH_ERR_SYSTEM, "cannot find a free port: %s", strerror(err));
    }
    *port = ntohs(a.sin_port);
    close(fd);
    return COH_OK;
}

coh_status net_check_port(int port, const char *what)
{
    int err = 0, fd = bind_any(port, &err);
    if (fd < 0 && err == EADDRINUSE)
        return coh_errf(COH_ERR_BUSY, "%s '%d' is already in use on this machine (choose another with --master-port, or 0 for a free one)", what, port);
    if (fd < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot use %s '%d': %s", what, port, strerror(err));
    close(fd);
    return COH_OK;
}

/* A socket bound to host's IPv4 address at port; -1 with *err (EADDRNOTAVAIL when the address
 * is not this machine's, or host does not resolve to an IPv4 address). */
static int bind_host(const char *host, int port, int *err)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (!host || getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
        *err = EADDRNOTAVAIL;
        return -1;
    }
    struct sockaddr_in a = *(struct sockaddr_in *)res->ai_addr;
    freeaddrinfo(res);
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

coh_status net_listen(const char *host, int port, int *out)
{
    int err = 0, fd = bind_host(host, port, &err);
    if (fd < 0 && err == EADDRNOTAVAIL) {
        coh_info("master address '%s' is not an address of this machine: the control port "
                 "listens on every interface", host ? host : "");
        fd = bind_any(port, &err);
    }
    if (fd < 0 && err == EADDRINUSE)
        return coh_errf(COH_ERR_BUSY, "control port '%d' is already in use on this machine (choose another with --control-port)", port);
    if (fd < 0 || listen(fd, 128) < 0) {
        if (fd >= 0) {
            err = errno;
            close(fd);
        }
        return coh_errf(COH_ERR_SYSTEM, "cannot listen on control port '%d': %s", port, strerror(err));
    }
    *out = fd;
    return COH_OK;
}

void net_peer_name(int fd, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, n, "%s:%d", host, port);
}

/* A signal other than SIGCHLD waiting on sigfd (taken): its number, else 0. SIGCHLD is read and
 * dropped: no worker runs while the launchers join. */
static int take_signal(int sigfd)
{
    struct signalfd_siginfo si;
    while (sigfd >= 0 && read(sigfd, &si, sizeof si) == (ssize_t)sizeof si)
        if (si.ssi_signo != SIGCHLD)
            return (int)si.ssi_signo;
    return 0;
}

/* Wait until fd (-1: none) is writable, a signal comes on sigfd, or the deadline: 1 writable, 0
 * deadline, -1 a signal (*sig). */
static int wait_writable(int fd, int sigfd, double deadline, int *sig)
{
    for (;;) {
        double left = deadline - coh_now_s();
        if (left <= 0)
            return 0;
        struct pollfd p[2] = {{.fd = sigfd, .events = POLLIN}, {.fd = fd, .events = POLLOUT}};
        int r = poll(p, 2, (int)(left * 1000) + 1);
        if (r < 0 && errno != EINTR)
            return 0;
        if (r > 0 && p[0].revents && (*sig = take_signal(sigfd)))
            return -1;
        if (r > 0 && p[1].revents)
            return 1;
    }
}

/* One connect to each address of host:port in turn, non-blocking: a SYN that is never answered
 * (dropped by a firewall, or by node 0's kernel while its accept queue is full) would otherwise
 * hold a blocking connect() for the kernel's SYN retries (about 127 s), past the deadline, and
 * deaf to SIGTERM and SIGINT, which the launcher blocks to read them from sigfd. A connected fd
 * (blocking again); -1 failed (*err), -2 host does not resolve (*err: getaddrinfo's), -3 a
 * signal (*sig). */
static int connect_once(const char *host, int port, double deadline, int sigfd, int *sig, int *err)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0) {
        *err = -rc;
        return -2;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0)
            continue;
        int w = 1, e = 0; /* 1 connected, 0 failed (e), -1 a signal */
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
            socklen_t len = sizeof e;
            if (errno != EINPROGRESS)
                w = 0, e = errno;
            else if ((w = wait_writable(fd, sigfd, deadline, sig)) == 0)
                e = ETIMEDOUT; /* no answer by the deadline */
            else if (w > 0 && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0 || e != 0))
                w = 0, e = e ? e : errno;
        }
        if (w > 0)
            break;
        close(fd);
        fd = w < 0 ? -3 : -1;
        if (w < 0)
            break;
        *err = e;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* whole lines from now on */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

coh_status net_connect_retry(const char *host, int port, double deadline, int sigfd, int *sig, int *out)
{
    int err = ETIMEDOUT;
    *sig = 0;
    for (;;) {
        int fd = connect_once(host, port, deadline, sigfd, sig, &err);
        if (fd >= 0) {
            *out = fd;
            return COH_OK;
        }
        if (fd == -2)
            return coh_errf(COH_ERR_INVALID, "invalid master address '%s': %s", host, gai_strerror(-err));
        /* the master may not be up yet: again in 0.1 s, a signal ending the wait */
        double next = coh_now_s() + 0.1;
        if (fd == -1 && coh_now_s() < deadline && wait_writable(-1, sigfd, next < deadline ? next : deadline, sig) < 0)
            fd = -3;
        if (fd == -3) {
            const char *abbr = sigabbrev_np(*sig);
            return coh_errf(COH_ERR_SYSTEM, "interrupted by SIG%s while connecting to node 0's launcher at %s:%d", abbr ? abbr : "?", host, port);
        }
        if (coh_now_s() >= deadline)
            return coh_errf(COH_ERR_TIMEOUT, "node 0's launcher at %s:%d did not answer in time (last error: %s)", host, port, strerror(err));
    }
}

/* The kernel ends a connection whose other end stops answering (its machine or link gone, no FIN
 * or RST ever coming): keepalive probes once it is idle for a third of the timeout, then one a
 * second, and TCP_USER_TIMEOUT aborts it (ETIMEDOUT) when nothing has been acknowledged for
 * the whole timeout, idle or with data in flight. Detection then takes at most timeout + 1 s
 * after the last word from the other end, instead of the kernel's default of two hours (idle)
 * or about fifteen minutes (unacknowledged data). */
coh_status net_keepalive(int fd, double timeout_s)
{
    int one = 1, idle = (int)(timeout_s / 3), intvl = 1, cnt = 127;
    unsigned int ms = (unsigned int)(timeout_s * 1000);
    if (idle < 1)
        idle = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot set TCP keepalive on the control connection: %s", strerror(errno));
    return COH_OK;
}

int net_send_line(int fd, const char *s)
{
    size_t len = strlen(s), off = 0;
    while (off < len) {
        ssize_t w = send(fd, s + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}
