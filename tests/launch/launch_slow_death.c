/* launch_slow_death.c: a worker that dies the way a large multi-threaded process killed by a
 * signal does on a loaded machine: its main thread ends first (a zombie its peers can see),
 * its last thread only after DELAY_MS milliseconds, with SIGKILL, so that its parent can reap
 * it only then. Writes its pid to the file named by its argument before that. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define DELAY_MS 1000

static void *last_thread(void *arg)
{
    (void)arg;
    struct timespec ts = {DELAY_MS / 1000, (DELAY_MS % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    kill(getpid(), SIGKILL);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: launch_slow_death PIDFILE\n");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, last_thread, NULL) != 0) {
        fprintf(stderr, "launch_slow_death: pthread_create failed\n");
        return 1;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0) {
        fprintf(stderr, "launch_slow_death: cannot write '%s'\n", argv[1]);
        return 1;
    }
    pthread_exit(NULL); /* the main thread ends; the process lives on in last_thread */
}
