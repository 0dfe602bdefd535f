/* output.c: workers' stdout/stderr: whole lines only (or a progress line ended by '\r'), each
 * prefixed, to the console and/or per-rank log files; the last stderr lines are kept for the
 * failure summary. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch/launch_int.h"

coh_status make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return coh_errf(COH_ERR_INVALID, "invalid log directory '%.60s...': path too long", path);
    for (char *p = buf + 1;; p++) {
        char c = *p;
        if (c != '/' && c != '\0')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) < 0 && errno != EEXIST)
            return coh_errf(COH_ERR_IO, "cannot create log directory '%s': %s", buf, strerror(errno));
        *p = c;
        if (!c)
            return COH_OK;
    }
}

coh_status stream_init(stream *s, int fd, int console, int log_fd, const char *prefix,
                       int keep_tail)
{
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->console = console;
    s->log_fd = log_fd;
    snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
    s->buf = malloc(LAUNCH_LINE_MAX);
    if (keep_tail)
        s->tail = calloc(LAUNCH_TAIL_LINES, sizeof *s->tail);
    if (!s->buf || (keep_tail && !s->tail)) {
        stream_free(s);
        return coh_errf(COH_ERR_NOMEM, "out of memory for worker output buffers");
    }
    return COH_OK;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* console gone: the job goes on, its logs are best effort */
        p += w;
        n -= (size_t)w;
    }
}

static void remember(stream *s, const char *line, size_t len)
{
    if (!s->tail)
        return;
    size_t n = len < LAUNCH_TAIL_WIDTH - 1 ? len : LAUNCH_TAIL_WIDTH - 1;
    memcpy(s->tail[s->tail_next], line, n);
    s->tail[s->tail_next][n] = '\0';
    s->tail_next = (s->tail_next + 1) % LAUNCH_TAIL_LINES;
    if (s->tail_count < LAUNCH_TAIL_LINES)
        s->tail_count++;
}

/* The end of the segment starting at p: a '\n', or a '\r' not followed by '\n' (a progress line
 * redrawn in place, passed on as it comes); NULL when data[p..end) has neither. */
static const char *segment_end(const char *p, const char *end)
{
    for (; p < end; p++)
        if (*p == '\n' || (*p == '\r' && (p + 1 == end || p[1] != '\n')))
            return p;
    return NULL;
}

/* Emit complete segments: buf[0..len) ends in '\n' or '\r' after each. One write per batch, so
 * the console never sees half a line of one worker next to another's. Segments ended by '\r'
 * (progress redrawn in place) are not kept for the failure summary. */
static void emit(stream *s, const char *data, size_t len)
{
    if (s->log_fd >= 0)
        write_all(s->log_fd, data, len);
    size_t plen = strlen(s->prefix), lines = 0;
    const char *p = data, *end = data + len;
    while (p < end) {
        const char *nl = segment_end(p, end);
        if (*nl == '\n')
            remember(s, p, (size_t)(nl - p));
        lines++;
        p = nl + 1;
    }
    if (!s->console)
        return;
    char stackbuf[8192];
    size_t need = len + lines * plen;
    char *out = need <= sizeof stackbuf ? stackbuf : malloc(need);
    if (!out) { /* no memory: still whole lines, just one write each */
        for (p = data; p < end;) {
            const char *nl = segment_end(p, end);
            write_all(s->console, p, (size_t)(nl - p) + 1);
            p = nl + 1;
        }
        return;
    }
    size_t o = 0;
    for (p = data; p < end;) {
        const char *nl = segment_end(p, end);
        memcpy(out + o, s->prefix, plen);
        o += plen;
        memcpy(out + o, p, (size_t)(nl - p) + 1);
        o += (size_t)(nl - p) + 1;
        p = nl + 1;
    }
    write_all(s->console, out, o);
    if (out != stackbuf)
        free(out);
}

int stream_pump(stream *s)
{
    if (s->fd < 0)
        return 1;
    ssize_t r = read(s->fd, s->buf + s->len, LAUNCH_LINE_MAX - 1 - s->len);
    if (r < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -1;
    if (r == 0) {
        stream_close(s);
        return 1;
    }
    s->len += (size_t)r;
    char *last = NULL;
    for (char *p = s->buf + s->len; p > s->buf; p--)
        if (p[-1] == '\n' || p[-1] == '\r') {
            last = p;
            break;
        }
    if (!last && s->len >= LAUNCH_LINE_MAX - 1) { /* a giant line: cut it here */
        s->buf[s->len++] = '\n';
        last = s->buf + s->len;
    }
    if (last) {
        size_t done = (size_t)(last - s->buf);
        emit(s, s->buf, done);
        memmove(s->buf, last, s->len - done);
        s->len -= done;
    }
    return 0;
}

void stream_close(stream *s)
{
    if (s->len > 0 && s->buf) { /* a last line without its newline */
        s->buf[s->len++] = '\n';
        emit(s, s->buf, s->len);
        s->len = 0;
    }
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (s->log_fd >= 0)
        close(s->log_fd);
    s->log_fd = -1;
}

void stream_free(stream *s)
{
    stream_close(s);
    free(s->buf);
    free(s->tail);
    s->buf = NULL;
    s->tail = NULL;
}

int stream_tail(const stream *s, char (*out)[LAUNCH_TAIL_WIDTH], int cap)
{
    int n = 0;
    if (!s->tail)
        return 0;
    int start = (s->tail_next - s->tail_count + LAUNCH_TAIL_LINES) % LAUNCH_TAIL_LINES;
    for (int i = 0; i < s->tail_count && n < cap; i++)
        memcpy(out[n++], s->tail[(start + i) % LAUNCH_TAIL_LINES], LAUNCH_TAIL_WIDTH);
    return n;
}
