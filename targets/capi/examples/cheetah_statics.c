/*
 * Static variables as remote addresses, as Cheetah programs of the seed's time
 * wrote them: every context puts its block into the next one's static array `in`
 * with the next one's static `arrived` as the remote bell, gets the previous one's
 * static `out` into a local buffer, and rings a static counter in context 0 with
 * empty puts. No address is exchanged: `&in` here names `in` there.
 */
#include <stdio.h>
#include <string.h>

#include "cheetah_core.h"

#define N 20000

static double out[N];
static double in[N];
static int arrived;
static int count;

static double value(int ctx, int i) { return ctx * 1e6 + i; }

int main(int argc, char **argv)
{
    static double back[N];
    int me, n, right, left, i, bad = 0;
    int sent = 0, got = 0;

    cheetah_core_setup(&argc, &argv);
    me = cheetah_core_mycontext();
    n = cheetah_core_ncontexts();
    right = (me + 1) % n;
    left = (me + n - 1) % n;
    for (i = 0; i < N; i++)
        out[i] = value(me, i);
    cheetah_core_barrier();

    cheetah_core_put(right, in, out, (int)sizeof out, &sent, &arrived);
    cheetah_core_wait(&sent, 1);
    cheetah_core_wait(&arrived, 1);
    for (i = 0; i < N; i++)
        bad += in[i] != value(left, i);
    printf("context %d: put from %d %s\n", me, left, bad ? "WRONG" : "ok");

    cheetah_core_get(left, out, back, (int)sizeof back, &got, NULL);
    cheetah_core_wait(&got, 1);
    for (i = 0; i < N; i++)
        bad += back[i] != value(left, i);
    printf("context %d: get from %d %s\n", me, left, bad ? "WRONG" : "ok");

    /* Every context rings context 0's counter once. */
    cheetah_core_put(0, in, out, 0, NULL, &count);
    cheetah_core_barrier();
    if (me == 0) {
        cheetah_core_wait(&count, n);
        printf("context 0: counter rung %d times\n", count);
    }
    cheetah_core_finalize();
    return bad != 0;
}
