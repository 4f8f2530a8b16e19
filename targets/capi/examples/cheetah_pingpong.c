/* Cheetah core: a put ping-pong, each put ringing the peer's bell, as a latency
 * benchmark runs it. Contexts 0 and 1 take turns; every put carries the round's
 * number, checked where it lands. Prints the mean one-way time (for reading, not
 * checked) and "pingpong ok". Argument: round trips (default 2000). */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cheetah_core.h>

static volatile int landed;
static int bell;

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    int rounds, me, peer, i, v;
    double t0, t1;
    cheetah_core_setup(&argc, &argv);
    rounds = argc > 1 ? atoi(argv[1]) : 2000;
    me = cheetah_core_mycontext();
    if (cheetah_core_ncontexts() != 2) {
        fprintf(stderr, "cheetah_pingpong: needs 2 contexts\n");
        return 2;
    }
    peer = 1 - me;
    cheetah_core_barrier();
    t0 = now_us();
    for (i = 1; i <= rounds; i++) {
        v = i;
        if (me == 1) {
            cheetah_core_wait(&bell, i);
            if (landed != i) { printf("context 1: round %d found %d\n", i, landed); return 1; }
        }
        cheetah_core_put(peer, (void *)&landed, &v, sizeof v, NULL, &bell);
        if (me == 0) {
            cheetah_core_wait(&bell, i);
            if (landed != i) { printf("context 0: round %d found %d\n", i, landed); return 1; }
        }
    }
    t1 = now_us();
    if (me == 0)
        printf("put with remote bell, one-way %.3f us over %d round trips\n", (t1 - t0) / rounds / 2, rounds);
    printf("context %d: pingpong ok\n", me);
    cheetah_core_finalize();
    return 0;
}
