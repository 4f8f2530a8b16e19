/*
 * The last instance dies; every other one must see SENDFAILURE, both as the send's
 * return value and in its error handler. Exit status 4 means "saw it".
 *
 *   volley run -n 3 -- ./victim
 */
#include <gamma.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#define LEN (256UL * 1024)

static int handler_failures;

static void on_error(void)
{
    if (gamma_errno == GAMMA_ERR_SENDFAILURE && gamma_active_port == 1)
        handler_failures++;
}

int main(int argc, char **argv)
{
    static char buf[LEN];
    int me, last, rc, i;

    gamma_init(0, argc, argv);
    me = gamma_my_node();
    last = gamma_how_many_nodes() - 1;
    if (me == last)
        gamma_set_passive_port(1, 0, gamma_my_par_pid(), 1, 1, GO_BACK, buf, LEN);
    else
        gamma_set_active_port(1, last, gamma_my_par_pid(), 1, NULL, on_error, 1, GO_BACK,
                              NULL, 0);
    gamma_sync();
    if (me == last)
        raise(SIGKILL);
    for (i = 0; i < 100000; i++) {
        rc = gamma_send_flowctl(1, buf, LEN);
        if (rc < 0)
            break;
    }
    if (rc == -GAMMA_ERR_SENDFAILURE && handler_failures > 0) {
        printf("instance %d saw SENDFAILURE (send returned %d, error handler ran %d times)\n",
               me, rc, handler_failures);
        return 4;
    }
    printf("instance %d: no SENDFAILURE (rc %d, handler %d)\n", me, rc, handler_failures);
    return 1;
}
