/*
 * Cheetah core with an event loop: contexts 0 and 1 exchange puts that ring the
 * peer's bell, each sleeping in poll(2) on Volley's wake-up descriptor until its bell
 * rings instead of spinning in cheetah_core_wait. A sleep of 10 s with a put on its
 * way is a lost wake-up. Argument: round trips (default 2000).
 *
 *   volley run -n 2 -- ./cheetah_sleep
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <cheetah_core.h>
#include <volley.h>

static volatile int landed;
static volatile int bell;

/* Polls until the bell reaches `n`, sleeping between polls that find nothing. How
 * many times it slept, or -1 for a lost wake-up or an error. */
static long await_bell(int n, int fd)
{
    long slept = 0;
    struct pollfd p;
    int rc;
    p.fd = fd;
    p.events = POLLIN;
    for (;;) {
        cheetah_core_poll();
        if (bell >= n)
            return slept;
        rc = volley_arm();
        if (rc < 0)
            return -1;
        if (rc > 0)
            continue;
        slept++;
        if (poll(&p, 1, 10000) == 0)
            return -1;
    }
}

int main(int argc, char **argv)
{
    int rounds, me, peer, i, v, fd;
    long slept = 0, s;
    cheetah_core_setup(&argc, &argv);
    rounds = argc > 1 ? atoi(argv[1]) : 2000;
    me = cheetah_core_mycontext();
    if (cheetah_core_ncontexts() != 2) {
        fprintf(stderr, "cheetah_sleep: needs 2 contexts\n");
        return 2;
    }
    peer = 1 - me;
    if ((fd = volley_wakeup_fd()) < 0)
        return 1;
    cheetah_core_barrier();
    for (i = 1; i <= rounds; i++) {
        v = i;
        if (me == 0)
            cheetah_core_put(peer, (void *)&landed, &v, sizeof v, NULL, (void *)&bell);
        if ((s = await_bell(i, fd)) < 0) {
            fprintf(stderr, "cheetah_sleep: context %d: lost wake-up at round %d\n", me, i);
            return 1;
        }
        slept += s;
        if (landed != i) {
            fprintf(stderr, "cheetah_sleep: context %d: round %d found %d\n", me, i, landed);
            return 1;
        }
        if (me == 1)
            cheetah_core_put(peer, (void *)&landed, &v, sizeof v, NULL, (void *)&bell);
    }
    printf("context %d: cheetah_sleep ok, %d puts, slept %ld times\n", me, rounds, slept);
    cheetah_core_finalize();
    return 0;
}
