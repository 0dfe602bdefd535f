/* test_launch_control.c: node 0's side of the control channel, fed authenticated lines through a
 * socket pair as another node's launcher sends them: which failure becomes the job's root cause
 * when several nodes report one, what of a remote worker's failure (stderr tail, error report)
 * node 0 keeps for its summary, and what it decides after the attempt: a static job that lost a
 * node is not restarted, whatever failed first, nor a job whose launcher (node 0's or another's)
 * was interrupted during a failed attempt's teardown. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "launch/agent.h"

/* Node 0 of a two-node job with one peer (node 1) on one end of a socket pair; *other is the
 * end node 1's launcher would write to. */
typedef struct fixture {
    coh_launch_opts o;
    agent a;
    peer node1;
    int other;
    unsigned long seq; /* node 1's next sequence number */
} fixture;

static int fixture_init(fixture *x)
{
    int sv[2];
    memset(x, 0, sizeof *x);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return -1;
    coh_launch_opts_init(&x->o);
    x->a.o = &x->o;
    x->a.node_rank = 0;
    x->a.nnodes = 2;
    x->a.lfd = -1;
    x->a.peers = &x->node1;
    x->a.npeers = 1;
    x->node1.fd = sv[0];
    x->node1.node_rank = 1;
    x->node1.active = 1;
    memset(x->node1.skey, 7, sizeof x->node1.skey);
    x->other = sv[1];
    return 0;
}

static void fixture_free(fixture *x)
{
    if (x->node1.fd >= 0)
        close(x->node1.fd);
    if (x->other >= 0)
        close(x->other);
}

/* Send payload from node 1, framed as its launcher frames it ("PAYLOAD MAC", the MAC under the
 * session key over direction "n" and the sequence number). */
static void node1_says(fixture *x, const char *payload)
{
    char seq[24], mac[CTL_MAC_HEX + 1], line[1300];
    snprintf(seq, sizeof seq, "%lu", x->seq++);
    auth_mac_hex(x->node1.skey, sizeof x->node1.skey, "n", seq, payload, mac);
    snprintf(line, sizeof line, "%s %s\n", payload, mac);
    CHECK_INT(write(x->other, line, strlen(line)), (long long)strlen(line));
}

/* Node 0 handles everything node 1 sent (a read takes at most a buffer's worth). */
static void node0_reads(fixture *x)
{
    struct pollfd p = {.fd = x->node1.fd, .events = POLLIN};
    while (x->node1.fd >= 0 && poll(&p, 1, 0) > 0)
        ctl_handle(&x->a, &p, 1);
}

/* Node 0's own worker failure, recorded at wall-clock time when. */
static void local_failure(fixture *x, double when)
{
    failure *f = &x->a.fail;
    memset(f, 0, sizeof *f);
    f->valid = f->restartable = 1;
    f->rank = 0;
    f->node_rank = 0;
    f->code = f->exit_code = 1;
    f->sig = 0;
    f->when = when;
    snprintf(f->host, sizeof f->host, "node0host");
}

/* Node 1's rank 1 exited with code 4 at when (its launcher's clock). */
static void node1_fails(fixture *x, double when)
{
    char fail[200];
    node1_says(x, "TAIL node one dies");
    node1_says(x, "REPORT RuntimeError: remote bad batch");
    node1_says(x, "REPORT second line");
    snprintf(fail, sizeof fail, "FAIL 4 1 1 0 1 4242 4 0 %.3f node1host ", when);
    node1_says(x, fail);
    node0_reads(x);
}

/* A worker failure on node 1 reaches node 0 with its stderr tail and error report. */
static void test_remote_report(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    node1_fails(&x, 1000.2);
    CHECK_INT(x.a.fail.valid, 1);
    CHECK_INT(x.a.fail.rank, 1);
    CHECK_INT(x.a.fail.exit_code, 4);
    CHECK_STR(x.a.fail.host, "node1host");
    CHECK_INT(x.a.fail.ntail, 1);
    CHECK_STR(x.a.fail.tail[0], "node one dies");
    CHECK_INT(x.a.fail.nerror, 2);
    CHECK_STR(x.a.fail.error[0], "RuntimeError: remote bad batch");
    CHECK_STR(x.a.fail.error[1], "second line");
    CHECK_INT(x.a.remote_stop, 1);
    fixture_free(&x);
}

/* More REPORT lines than node 0 keeps, and one longer than a line it keeps: both bounded. */
static void test_report_bounds(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    char longline[1100];
    memset(longline, 'y', sizeof longline);
    memcpy(longline, "REPORT ", 7);
    longline[sizeof longline - 1] = '\0';
    for (int i = 0; i < LAUNCH_ERROR_LINES + 3; i++)
        node1_says(&x, longline);
    node1_says(&x, "FAIL 4 1 1 0 1 4242 4 0 1000.000 node1host ");
    node0_reads(&x);
    CHECK_INT(x.a.fail.nerror, LAUNCH_ERROR_LINES);
    CHECK_INT(strlen(x.a.fail.error[LAUNCH_ERROR_LINES - 1]), LAUNCH_TAIL_WIDTH - 1);
    fixture_free(&x);
}

/* Node 1's worker failed before node 0's (its failure's time is earlier), but its FAIL arrived
 * after node 0 had reaped its own worker, which failed of it: node 1's is the root cause, as
 * torchrun puts the failure with the earliest timestamp first. */
static void test_earlier_remote_failure_is_root_cause(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    local_failure(&x, 1000.5);
    node1_fails(&x, 1000.2);
    CHECK_INT(x.a.fail.rank, 1);
    CHECK_INT(x.a.fail.node_rank, 1);
    CHECK_INT(x.a.fail.exit_code, 4);
    CHECK_INT(x.a.fail.nerror, 2);
    CHECK_STR(x.a.fail.tail[0], "node one dies");
    fixture_free(&x);
}

/* A later remote failure (one that node 0's own caused) leaves node 0's as the root cause. */
static void test_later_remote_failure_is_not(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    local_failure(&x, 1000.5);
    node1_fails(&x, 1000.9);
    CHECK_INT(x.a.fail.rank, 0);
    CHECK_INT(x.a.fail.exit_code, 1);
    CHECK_STR(x.a.fail.host, "node0host");
    CHECK_INT(x.a.remote_stop, 1);
    fixture_free(&x);
}

/* An interruption of node 0's launcher stays the cause even when a worker elsewhere failed
 * earlier: an interrupted job is not restarted, and its exit code is the signal's. */
static void test_interruption_stays(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    agent_fail_other(&x.a, 130, "the launcher on node0host (node 0) was interrupted by SIGINT");
    x.a.fail.when = 1000.5;
    node1_fails(&x, 1000.2);
    CHECK_INT(x.a.fail.rank, -1);
    CHECK_INT(x.a.fail.exit_code, 130);
    CHECK_INT(x.a.fail.restartable, 0);
    fixture_free(&x);
}

/* After a worker failure (restartable), node 1's launcher goes away: a static job is not
 * restarted with a world that counts it; the worker failure stays the root cause and the loss is
 * why the job ends. */
static void test_lost_node_ends_static_job(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    x.o.max_restarts = 2;
    local_failure(&x, 1000.5);
    close(x.other);
    x.other = -1;
    node0_reads(&x);
    CHECK_INT(x.node1.fd, -1);
    int restart = -1, code = -1;
    CHECK_INT(ctl_after_attempt(&x.a, &restart, &code), COH_OK);
    CHECK_INT(restart, 0);
    CHECK_INT(code, 1);
    CHECK_INT(x.a.fail.rank, 0);
    CHECK(strstr(x.a.final_why, "node 1's launcher") != NULL);
    CHECK_INT(x.a.attempt, 0);
    fixture_free(&x);
}

/* The same with a node that node 0 gave up on (no END within the grace period + 5 s). */
static void test_given_up_node_ends_static_job(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    x.o.max_restarts = 2;
    local_failure(&x, 1000.5);
    x.a.settle_by = 1; /* long past */
    CHECK_INT(ctl_settled(&x.a, 1), 1);
    CHECK_INT(x.node1.fd, -1);
    int restart = -1, code = -1;
    CHECK_INT(ctl_after_attempt(&x.a, &restart, &code), COH_OK);
    CHECK_INT(restart, 0);
    CHECK_INT(code, 1);
    CHECK(strstr(x.a.final_why, "node 1's launcher") != NULL);
    fixture_free(&x);
}

/* An elastic job goes on without the lost node: the worker failure is restarted. */
static void test_lost_node_elastic_restarts(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    x.o.max_restarts = 2;
    x.o.nnodes = 2;
    x.o.nnodes_min = 1;
    x.a.elastic = 1;
    local_failure(&x, 1000.5);
    close(x.other);
    x.other = -1;
    node0_reads(&x);
    int restart = -1, code = -1;
    CHECK_INT(ctl_after_attempt(&x.a, &restart, &code), COH_OK);
    CHECK_INT(restart, 1);
    CHECK_INT(x.a.attempt, 1);
    CHECK_STR(x.a.final_why, "");
    fixture_free(&x);
}

/* Node 1's launcher, interrupted during the teardown of node 0's worker failure, says so: */
static void node1_interrupted(fixture *x)
{
    node1_says(x, "FAIL 143 0 -1 0 1 0 0 0 1001.000 node1host the launcher on node1host (node 1) was interrupted by SIGTERM");
    node0_reads(x);
}

/* node 0 keeps its worker failure as the root cause and does not restart the job. */
static void test_remote_interruption_ends_job(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    x.o.max_restarts = 2;
    local_failure(&x, 1000.5);
    node1_interrupted(&x);
    CHECK_INT(x.a.fail.rank, 0);
    CHECK(strstr(x.a.final_why, "(node 1) was interrupted by SIGTERM") != NULL);
    int restart = -1, code = -1;
    CHECK_INT(ctl_after_attempt(&x.a, &restart, &code), COH_OK);
    CHECK_INT(restart, 0);
    CHECK_INT(code, 1);
    fixture_free(&x);
}

/* An earlier worker failure heard after the interruption becomes the root cause, and the job
 * still ends: what ended it is kept apart from the root cause. */
static void test_interruption_outlives_new_root_cause(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    x.o.max_restarts = 2;
    local_failure(&x, 1000.5);
    node1_interrupted(&x);
    node1_fails(&x, 1000.2);
    CHECK_INT(x.a.fail.rank, 1);
    CHECK_INT(x.a.fail.restartable, 1);
    int restart = -1, code = -1;
    CHECK_INT(ctl_after_attempt(&x.a, &restart, &code), COH_OK);
    CHECK_INT(restart, 0);
    CHECK_INT(code, 4);
    fixture_free(&x);
}

/* Node 0's own launcher interrupted after its worker failed: it exits 128 + the signal, and tells
 * node 1 the root cause's exit code. */
static void test_own_interruption_ends_job(void)
{
    fixture x;
    CHECK_INT(fixture_init(&x), 0);
    x.o.max_restarts = 2;
    local_failure(&x, 1000.5);
    x.a.interrupted = 15;
    CHECK_INT(agent_fail_final(&x.a, 143, "the launcher on node0host (node 0) was interrupted by SIGTERM"), 0);
    CHECK_INT(x.a.fail.rank, 0);
    int restart = -1, code = -1;
    CHECK_INT(ctl_after_attempt(&x.a, &restart, &code), COH_OK);
    CHECK_INT(restart, 0);
    CHECK_INT(code, 143);
    char got[1300] = "";
    CHECK(read(x.other, got, sizeof got - 1) > 0);
    CHECK(strncmp(got, "EXIT 1 0 rank 0 ", 16) == 0);
    CHECK(strstr(got, "; then the launcher on node0host (node 0) was interrupted by SIGTERM") != NULL);
    fixture_free(&x);
}

int main(void)
{
    RUN(test_remote_report);
    RUN(test_report_bounds);
    RUN(test_earlier_remote_failure_is_root_cause);
    RUN(test_later_remote_failure_is_not);
    RUN(test_interruption_stays);
    RUN(test_lost_node_ends_static_job);
    RUN(test_given_up_node_ends_static_job);
    RUN(test_lost_node_elastic_restarts);
    RUN(test_remote_interruption_ends_job);
    RUN(test_interruption_outlives_new_root_cause);
    RUN(test_own_interruption_ends_job);
    return CHECK_REPORT();
}
