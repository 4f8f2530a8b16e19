/* Contexts that compute between one-sided operations, for longer than the peer
 * timeout, without calling Cheetah (run it with a short VOLLEY_PEER_TIMEOUT and
 * VOLLEY_CHEETAH_DIRECT=0, so that every put and get goes through the fabric):
 *
 * 1. context 0 puts a task into context 1 (remote bell only); context 1 takes it,
 *    computes, then puts its answer back;
 * 2. context 0 gets context 1's result (local bell only), then computes while
 *    context 1 waits in the barrier.
 *
 * Each time the one that computes owes the other an acknowledgement; its process's
 * beacon says it lives, so nobody is taken for dead and both lines are printed.
 * The computing lasts COMPUTE_MS milliseconds (argv[1], default 3000). */
#define _XOPEN_SOURCE 500
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <cheetah_core.h>

static double task[4], answer[4], result[4], got[4];
static int task_bell, answer_bell, got_bell;

static void compute(long ms)
{
    /* No Cheetah call at all meanwhile. */
    usleep((useconds_t)(ms * 1000));
}

int main(int argc, char **argv)
{
    int i, me;
    long ms;
    cheetah_core_setup(&argc, &argv);
    ms = argc > 1 ? atol(argv[1]) : 3000;
    me = cheetah_core_mycontext();
    if (cheetah_core_ncontexts() != 2) {
        fprintf(stderr, "cheetah_compute: needs 2 contexts\n");
        return 2;
    }
    for (i = 0; i < 4; i++)
        result[i] = 10.0 * i + me;
    cheetah_core_barrier();
    if (me == 0) {
        for (i = 0; i < 4; i++)
            task[i] = i + 0.5;
        /* Static variables name the same variable in every context. */
        cheetah_core_put(1, task, task, sizeof task, NULL, &task_bell);
        cheetah_core_wait(&answer_bell, 1);
        for (i = 0; i < 4; i++)
            if (answer[i] != 2 * (i + 0.5)) {
                fprintf(stderr, "answer %d is %g\n", i, answer[i]);
                return 1;
            }
        printf("context 0: answer came after context 1 computed %ld ms\n", ms);
        cheetah_core_get(1, result, got, sizeof got, &got_bell, NULL);
        cheetah_core_wait(&got_bell, 1);
        compute(ms);
        for (i = 0; i < 4; i++)
            if (got[i] != 10.0 * i + 1) {
                fprintf(stderr, "got %d is %g\n", i, got[i]);
                return 1;
            }
    } else {
        cheetah_core_wait(&task_bell, 1);
        compute(ms);
        for (i = 0; i < 4; i++)
            answer[i] = 2 * task[i];
        cheetah_core_put(0, answer, answer, sizeof answer, NULL, &answer_bell);
    }
    cheetah_core_barrier();
    printf("context %d: nobody was taken for dead\n", me);
    cheetah_core_finalize();
    return 0;
}
