/*
 * Ping-pong between instances 0 and 1 with GAMMA's 2004 API, every byte checked,
 * 0 B to 1 MiB, then echoes sent from inside a receiver handler.
 *
 *   cc pingpong.c $(pkg-config --cflags --libs volley) -o pingpong
 *   volley run -n 2 -- ./pingpong      (or: ./pingpong -GAMMANP 2)
 */
#include <gamma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LEN (1UL << 20)
#define ECHOES 20

static unsigned char pattern(unsigned long round, unsigned long i)
{
    return (unsigned char)(round * 131 + i * 7 + (i >> 9));
}

static void fill(unsigned char *b, unsigned long len, unsigned long round)
{
    unsigned long i;
    for (i = 0; i < len; i++)
        b[i] = pattern(round, i);
}

static int check(const unsigned char *b, unsigned long len, unsigned long round)
{
    unsigned long i;
    for (i = 0; i < len; i++)
        if (b[i] != pattern(round, i)) {
            fprintf(stderr, "byte %lu of %lu (round %lu) is %u, not %u\n", i, len, round,
                    b[i], pattern(round, i));
            return 0;
        }
    return 1;
}

static unsigned char echo_in[256];
static int echo_errors;

/* Instance 1: answers on port 2 from inside the handler, and signals semaphore 5. */
static void echo_handler(void)
{
    if (gamma_send_flowctl(gamma_active_port, echo_in, (unsigned long)gamma_msglen) < 0)
        echo_errors++;
    gamma_post_recv(gamma_active_port, echo_in, sizeof echo_in);
    gamma_signal(5);
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "pingpong: %s failed: %d\n", what, rc);
    return 1;
}

int main(int argc, char **argv)
{
    static const unsigned long sizes[] = {0, 1, 8, 1000, 20000, 65536, MAX_LEN};
    unsigned char *in, *out, small[256];
    unsigned long s, r;
    int me, peer, rc;
    time_586 t0, t1;

    if ((rc = gamma_init(0, argc, argv)) < 0)
        return fail("gamma_init", rc);
    me = gamma_my_node();
    if (gamma_how_many_nodes() < 2) {
        fprintf(stderr, "pingpong: needs 2 processes\n");
        return 2;
    }
    in = malloc(MAX_LEN);
    out = malloc(MAX_LEN);
    if (!in || !out)
        return 1;
    /* Locking may be refused by a small RLIMIT_MEMLOCK; it is an optimisation here. */
    if (gamma_mlock(in, MAX_LEN) < 0)
        fprintf(stderr, "pingpong: gamma_mlock refused (ulimit -l); going on\n");
    peer = 1 - me;
    if (me <= 1) {
        if ((rc = gamma_set_passive_port(1, peer, gamma_my_par_pid(), 1, 1, GO_BACK, in,
                                         MAX_LEN)) < 0)
            return fail("gamma_set_passive_port", rc);
        if (me == 0)
            rc = gamma_set_passive_port(2, 1, gamma_my_par_pid(), 2, 2, GO_BACK, small,
                                        sizeof small);
        else
            rc = gamma_set_active_port(2, 0, gamma_my_par_pid(), 2, echo_handler, NULL, 2,
                                       GO_BACK, echo_in, sizeof echo_in);
        if (rc < 0)
            return fail("gamma_set_*_port 2", rc);
    }
    if ((rc = gamma_sync()) < 0)
        return fail("gamma_sync", rc);

    if (me <= 1) {
        for (s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            for (r = 0; r < 3; r++) {
                unsigned long len = sizes[s], round = s * 10 + r;
                if (me == 0) {
                    fill(out, len, round);
                    gamma_time(t0);
                    if ((rc = gamma_send_flowctl(1, out, len)) != (int)len)
                        return fail("gamma_send_flowctl", rc);
                    if ((rc = gamma_wait(1, 1)) != 0)
                        return fail("gamma_wait", rc);
                    gamma_time(t1);
                    if (!check(in, len, round + 1000))
                        return 1;
                    if (r == 2)
                        printf("%lu bytes: round trip %.1f us\n", len, gamma_time_diff(t1, t0));
                } else {
                    if ((rc = gamma_wait(1, 1)) != 0)
                        return fail("gamma_wait", rc);
                    if (!check(in, len, round))
                        return 1;
                    fill(out, len, round + 1000);
                    if ((rc = gamma_send_flowctl(1, out, len)) != (int)len)
                        return fail("gamma_send_flowctl", rc);
                }
            }
        }
        if (me == 0) {
            for (r = 0; r < ECHOES; r++) {
                fill(out, 100 + r, r);
                if ((rc = gamma_send_flowctl(2, out, 100 + r)) < 0)
                    return fail("gamma_send_flowctl (echo)", rc);
                if ((rc = gamma_wait(2, 1)) != 0)
                    return fail("gamma_wait (echo)", rc);
                if (!check(small, 100 + r, r))
                    return 1;
            }
        } else {
            if ((rc = gamma_wait(5, ECHOES)) != 0)
                return fail("gamma_wait (handler signals)", rc);
            if (echo_errors)
                return fail("send from the handler", echo_errors);
        }
    }
    if ((rc = gamma_sync()) < 0)
        return fail("gamma_sync", rc);
    if (me == 0)
        printf("pingpong ok: %d processes, 0 B to 1 MiB checked, %d handler echoes\n",
               gamma_how_many_nodes(), ECHOES);
    gamma_munlockall();
    return gamma_exit() < 0;
}
