/* async.c: asynchronous collectives: a per-communicator progress thread runs queued ops in
 * call order, so DDP can overlap gradient all-reduce with backward compute. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_int.h"

struct coh_comm_req {
    coh_op op;
    coh_async *owner;
    coh_comm_req *next;
    int done;
    coh_status status;
    char msg[512];
};

struct coh_async {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* signalled on new work, on completion and on stop */
    coh_comm_req *head, *tail;
    int busy, stop;
    coh_comm *comm;
};

static void *progress_main(void *arg)
{
    coh_async *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->head && !a->stop)
            pthread_cond_wait(&a->cv, &a->mu);
        if (!a->head)
            break;
        coh_comm_req *r = a->head;
        a->head = r->next;
        if (!a->head)
            a->tail = NULL;
        a->busy = 1;
        pthread_mutex_unlock(&a->mu);
        coh_status st = coh_comm_run(a->comm, &r->op);
        pthread_mutex_lock(&a->mu);
        r->status = st;
        if (st)
            strncpy(r->msg, coh_last_error(), sizeof r->msg - 1);
        r->done = 1;
        a->busy = 0;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

static coh_status async_start(coh_comm *c)
{
    coh_async *a = calloc(1, sizeof *a);
    if (!a)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the progress thread");
    a->comm = c;
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    int e = pthread_create(&a->thread, NULL, progress_main, a);
    if (e) {
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        free(a);
        return coh_errf(COH_ERR_SYSTEM, "cannot start the progress thread: %s", strerror(e));
    }
    c->async = a;
    return COH_OK;
}

coh_status coh_async_submit(coh_comm *c, const coh_op *op, coh_comm_req **req)
{
    *req = NULL;
    coh_status st;
    if (!c->async && (st = async_start(c)))
        return st;
    coh_comm_req *r = calloc(1, sizeof *r);
    if (!r)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a request");
    r->op = *op;
    r->owner = c->async;
    coh_async *a = c->async;
    pthread_mutex_lock(&a->mu);
    if (a->tail)
        a->tail->next = r;
    else
        a->head = r;
    a->tail = r;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    *req = r;
    return COH_OK;
}

coh_status coh_async_drain(coh_comm *c)
{
    coh_async *a = c->async;
    if (!a)
        return COH_OK;
    pthread_mutex_lock(&a->mu);
    while (a->head || a->busy)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    return COH_OK;
}

void coh_async_stop(coh_comm *c)
{
    coh_async *a = c->async;
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->stop = 1;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    pthread_join(a->thread, NULL);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
    c->async = NULL;
}

coh_status coh_comm_wait(coh_comm_req *r)
{
    if (!r)
        return coh_errf(COH_ERR_INVALID, "wait: null request");
    coh_async *a = r->owner;
    pthread_mutex_lock(&a->mu);
    while (!r->done)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    coh_status st = r->status;
    if (st)
        coh_errf(st, "%s", r->msg);
    free(r);
    return st;
}

coh_status coh_comm_test(coh_comm_req *r, int *done)
{
    if (!r)
        return coh_errf(COH_ERR_INVALID, "test: null request");
    coh_async *a = r->owner;
    pthread_mutex_lock(&a->mu);
    *done = r->done;
    pthread_mutex_unlock(&a->mu);
    return COH_OK;
}
