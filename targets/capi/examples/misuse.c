/*
 * Every misuse of the GAMMA API a program can make by mistake returns a negative
 * value and changes nothing: calls before gamma_init and after gamma_exit, a second
 * gamma_init, null and impossible buffers and lengths, unknown instances, programs,
 * ports, buffer kinds and send handles, waiting calls inside a handler, and Volley's
 * event-loop calls (volley.h) before gamma_init, inside a handler and after
 * gamma_exit. Then the two
 * instances still exchange a message in each direction. Prints "misuse ok" when every
 * check held.
 *
 *   volley run -n 2 -- ./misuse
 */
#include <gamma.h>
#include <stdio.h>
#include <volley.h>
#include <string.h>

static int failed;
static int in_handler_wait, in_handler_sync, in_handler_arm, got;

#define CHECK_NEG(call)                                                                  \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ >= 0) {                                                                  \
            printf("misuse: %s returned %d, expected an error\n", #call, rc_);         \
            failed = 1;                                                                  \
        }                                                                                \
    } while (0)

#define CHECK_EQ(call, want)                                                             \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != (want)) {                                                             \
            printf("misuse: %s returned %d, expected %d\n", #call, rc_, (int)(want));  \
            failed = 1;                                                                  \
        }                                                                                \
    } while (0)

static void on_message(void)
{
    /* Waiting calls are refused inside a handler. */
    in_handler_wait = gamma_wait(1, 1);
    in_handler_sync = gamma_sync();
    in_handler_arm = volley_arm();
    got++;
}

int main(int argc, char **argv)
{
    static char buf[256];
    char msg[8] = "0123456";
    int me, other, pid;

    /* Nothing works before gamma_init. */
    CHECK_NEG(gamma_send(1, msg, sizeof msg));
    CHECK_NEG(gamma_send_flowctl(1, msg, sizeof msg));
    CHECK_NEG(gamma_sync());
    CHECK_NEG(gamma_wait(1, 1));
    CHECK_NEG(gamma_test(1));
    CHECK_NEG(gamma_signal(1));
    CHECK_NEG(gamma_my_node());
    CHECK_NEG(gamma_exit());
    CHECK_NEG(volley_wakeup_fd());
    CHECK_NEG(volley_arm());

    if (gamma_init(2, argc, argv) < 0) {
        printf("misuse: gamma_init failed\n");
        return 1;
    }
    CHECK_NEG(gamma_init(2, argc, argv));
    me = gamma_my_node();
    other = 1 - me;
    pid = gamma_my_par_pid();

    /* Ports: unknown buffer kind, instance, program, port; a null buffer. */
    CHECK_NEG(gamma_set_active_port(1, other, pid, 2, NULL, NULL, 1, 7, NULL, 0));
    CHECK_NEG(gamma_set_active_port(1, 200, pid, 2, NULL, NULL, 1, GO_BACK, NULL, 0));
    CHECK_NEG(gamma_set_active_port(1, other, pid + 1, 2, NULL, NULL, 1, GO_BACK, NULL, 0));
    CHECK_NEG(gamma_send(9, msg, sizeof msg));
    CHECK_NEG(gamma_post_recv(2, NULL, 16));
    CHECK_NEG(gamma_set_passive_port(2, other, pid, 1, 0, GO_BACK, buf, (unsigned long)-1));

    /* The real ports: 1 out to the other instance's port 2; 2 in, first without a
     * handler, then with one. */
    CHECK_EQ(gamma_set_active_port(1, other, pid, 2, NULL, NULL, 1, GO_BACK, NULL, 0), 0);
    CHECK_EQ(gamma_set_passive_port(2, other, pid, 1, 0, GO_BACK, buf, sizeof buf), 0);
    CHECK_EQ(gamma_set_active_port(2, other, pid, 1, on_message, NULL, 1, GO_BACK, buf,
                                   sizeof buf),
             0);

    /* Sends: null data, a length no buffer has, a first piece over 20 bytes. */
    CHECK_NEG(gamma_send(1, NULL, 8));
    CHECK_NEG(gamma_send_flowctl(1, NULL, 8));
    CHECK_NEG(gamma_send_flowctl(1, buf, (unsigned long)-1));
    CHECK_NEG(gamma_send_flowctl(1, buf, (unsigned long)-1 - (unsigned long)buf + 2));
    CHECK_NEG(gamma_send_2p(1, buf, 21, msg, sizeof msg));
    CHECK_NEG(gamma_send_2p(1, NULL, 4, msg, sizeof msg));
    CHECK_NEG(gamma_isend_flowctl(1, NULL, 8));

    /* Handles, semaphores, atomics that do not exist. */
    CHECK_NEG(gamma_wsend(123456789UL));
    CHECK_NEG(gamma_tsend(123456789UL));
    CHECK_NEG(gamma_atomic(NULL));
    CHECK_NEG(gamma_munlock(NULL, 1));

    /* Still a working job: a message each way, each landing in the other's port 2
     * with its handler (which tries to wait, and must be refused). */
    CHECK_EQ(gamma_sync(), 0);
    if (me == 0) {
        CHECK_EQ(gamma_send_flowctl(1, msg, sizeof msg), (int)sizeof msg);
        CHECK_EQ(gamma_wait(1, 1), 0);
    } else {
        CHECK_EQ(gamma_wait(1, 1), 0);
        CHECK_EQ(gamma_send_flowctl(1, msg, sizeof msg), (int)sizeof msg);
    }
    if (got != 1 || memcmp(buf, msg, sizeof msg) != 0) {
        printf("misuse: instance %d got %d messages\n", me, got);
        failed = 1;
    }
    if (in_handler_wait >= 0 || in_handler_sync >= 0 || in_handler_arm >= 0) {
        printf("misuse: a handler could wait (%d), sync (%d) or arm (%d)\n", in_handler_wait,
               in_handler_sync, in_handler_arm);
        failed = 1;
    }
    CHECK_EQ(gamma_sync(), 0);

    /* A non-blocking send's handle stays answerable once it has completed: tested
     * or waited on again, it is still complete. Each instance sends one. */
    {
        int h = gamma_isend_flowctl(1, msg, sizeof msg), rc;
        if (h <= 0) {
            printf("misuse: gamma_isend_flowctl returned %d\n", h);
            failed = 1;
        }
        CHECK_EQ(gamma_wait(1, 1), 0);
        while ((rc = gamma_tsend(h)) == 0) {
        }
        CHECK_EQ(rc, 1);
        CHECK_EQ(gamma_tsend(h), 1);
        CHECK_EQ(gamma_wsend(h), 0);
        CHECK_EQ(gamma_wsend(h), 0);
        CHECK_EQ(gamma_tsend(h), 1);
        CHECK_NEG(gamma_tsend(h + 1000));
    }
    CHECK_EQ(gamma_sync(), 0);
    CHECK_EQ(gamma_exit(), 0);

    /* Nothing works after gamma_exit either. */
    CHECK_NEG(gamma_exit());
    CHECK_NEG(volley_wakeup_fd());
    CHECK_NEG(volley_arm());
    CHECK_NEG(gamma_send(1, msg, sizeof msg));
    CHECK_NEG(gamma_sync());

    if (failed)
        return 1;
    printf("misuse ok: instance %d\n", me);
    return 0;
}
