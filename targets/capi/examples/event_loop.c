/*
 * A GAMMA server inside an epoll event loop: instance 0 answers requests from every
 * other instance, sleeping in epoll_wait on Volley's wake-up descriptor (and on a
 * timer of its own, as a loop with other work has) instead of spinning; each
 * client sleeps the same way while it waits for its answer.
 *
 *   cc event_loop.c $(pkg-config --cflags --libs volley) -o event_loop
 *   volley run -n 4 -- ./event_loop
 */
#define _GNU_SOURCE /* epoll and timerfd: Linux's */
#include <gamma.h>
#include <volley.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define REQUESTS 2000
#define MAX_NODES 64
/* A sleep this long with work outstanding means a wake-up was lost. */
#define LOST_AFTER_MS 10000

static uint64_t request_in[MAX_NODES], answer_in;
static long served, answered, send_errors;

/* Server, port c: client c's request; answered from the handler. */
static void serve(void)
{
    int port = gamma_active_port;
    uint64_t answer = request_in[port] * 2 + 1;
    if (gamma_send_flowctl(port, &answer, sizeof answer) < 0)
        send_errors++;
    gamma_post_recv(port, &request_in[port], sizeof request_in[port]);
    served++;
}

/* Client, port 1: the server's answer. */
static void take_answer(void)
{
    answered++;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "event_loop: instance %d: %s failed: %d (%s)\n", gamma_my_node(), what, rc,
            strerror(errno));
    return 1;
}

/* Sleeps in `ep` until something is ready: 0, or -1 after LOST_AFTER_MS with
 * nothing. Sets *ticked when the loop's own timer went off. */
static int sleep_in(int ep, int timer, int *ticked)
{
    struct epoll_event ev[4];
    int i, n = epoll_wait(ep, ev, 4, LOST_AFTER_MS);
    if (n == 0)
        return -1;
    for (i = 0; i < n; i++)
        if (ev[i].data.fd == timer) {
            uint64_t expirations;
            if (read(timer, &expirations, sizeof expirations) == sizeof expirations)
                *ticked += (int)expirations;
        }
    return 0;
}

int main(int argc, char **argv)
{
    int me, nodes, c, rc, ep, fd, timer, ticks = 0;
    long i, sleeps = 0;
    struct epoll_event ev;
    struct itimerspec every_50ms = {{0, 50000000}, {0, 50000000}};

    if ((rc = gamma_init(0, argc, argv)) < 0)
        return fail("gamma_init", rc);
    me = gamma_my_node();
    nodes = gamma_how_many_nodes();
    if (nodes < 2 || nodes > MAX_NODES) {
        fprintf(stderr, "event_loop: needs 2 to %d instances\n", MAX_NODES);
        return 2;
    }
    if (me == 0) {
        for (c = 1; c < nodes; c++)
            if ((rc = gamma_set_active_port(c, c, gamma_my_par_pid(), 1, serve, NULL, 1, GO_BACK,
                                            &request_in[c], sizeof request_in[c])) < 0)
                return fail("gamma_set_active_port", rc);
    } else if ((rc = gamma_set_active_port(1, 0, gamma_my_par_pid(), me, take_answer, NULL, 1,
                                           GO_BACK, &answer_in, sizeof answer_in)) < 0)
        return fail("gamma_set_active_port", rc);

    /* The loop: Volley's descriptor beside a timer of the program's own. */
    if ((fd = volley_wakeup_fd()) < 0)
        return fail("volley_wakeup_fd", fd);
    ep = epoll_create1(EPOLL_CLOEXEC);
    timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    if (ep < 0 || timer < 0 || timerfd_settime(timer, 0, &every_50ms, NULL) < 0)
        return fail("epoll or timerfd", -1);
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        return fail("epoll_ctl", -1);
    ev.data.fd = timer;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, timer, &ev) < 0)
        return fail("epoll_ctl", -1);
    if ((rc = gamma_sync()) < 0)
        return fail("gamma_sync", rc);

    if (me == 0) {
        long want = (long)REQUESTS * (nodes - 1);
        while (served < want) {
            gamma_test(1); /* runs the handlers of whatever came */
            if (served >= want)
                break;
            if ((rc = volley_arm()) < 0)
                return fail("volley_arm", rc);
            if (rc > 0)
                continue;
            sleeps++;
            if (sleep_in(ep, timer, &ticks) < 0) {
                fprintf(stderr, "event_loop: server: lost wake-up after %ld requests\n", served);
                return 1;
            }
        }
        if (send_errors)
            return fail("an answer", (int)send_errors);
        printf("event_loop ok: served %ld requests from %d clients, slept %ld times\n", served,
               nodes - 1, sleeps);
    } else {
        for (i = 0; i < REQUESTS; i++) {
            uint64_t request = (uint64_t)me * 1000000 + (uint64_t)i;
            if ((rc = gamma_send_flowctl(1, &request, sizeof request)) != (int)sizeof request)
                return fail("gamma_send_flowctl", rc);
            while (answered <= i) {
                gamma_test(1);
                if (answered > i)
                    break;
                if ((rc = volley_arm()) < 0)
                    return fail("volley_arm", rc);
                if (rc == 0 && sleep_in(ep, timer, &ticks) < 0) {
                    fprintf(stderr, "event_loop: client %d: lost wake-up at request %ld\n", me, i);
                    return 1;
                }
                sleeps += rc == 0;
            }
            if (answer_in != request * 2 + 1) {
                fprintf(stderr, "event_loop: client %d: answer %llu to %llu\n", me,
                        (unsigned long long)answer_in, (unsigned long long)request);
                return 1;
            }
        }
        printf("client %d ok: %d answers, slept %ld times\n", me, REQUESTS, sleeps);
    }
    /* Everybody done before anybody leaves: the last answers' acks still travel. */
    if ((rc = gamma_sync()) < 0)
        return fail("gamma_sync", rc);
    close(timer);
    close(ep);
    gamma_exit();
    return 0;
}
