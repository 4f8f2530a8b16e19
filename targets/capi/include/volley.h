/*
 * Volley's extensions beside the original APIs' headers: integration with a
 * program's own event loop (epoll, poll, libevent, libuv, an MPI progress loop).
 *
 * The pattern (the same as UCX's ucp_worker_get_efd and ucp_worker_arm):
 *
 *     int fd = volley_wakeup_fd();      after gamma_init, lfc_init,
 *                                       cheetah_core_setup or qx_init
 *     add fd to the loop, for reading;
 *     for (;;) {
 *         poll the API until nothing is left   (gamma_test, lfc_poll,
 *                                               cheetah_core_poll, or a QNIX
 *                                               call and a look at the doorbells)
 *         rc = volley_arm();
 *         if (rc > 0) continue;         work arrived meanwhile: poll again
 *         if (rc < 0) fail;
 *         sleep in the loop (epoll_wait ...) until fd or another source is ready;
 *     }
 *
 * The descriptor turns readable when a message, packet or invocation has landed,
 * a send or one-sided operation may have completed, a peer may have failed, or a
 * timer of the library (a retransmission, an acknowledgement owed) is due. It may
 * also turn readable with nothing to do: poll, then arm again. It is close-on-exec
 * and belongs to the process; with GAMMA, call both functions from the thread
 * that called gamma_init. See targets/capi/examples/event_loop.c.
 */
#ifndef VOLLEY_H
#define VOLLEY_H

#ifdef __cplusplus
extern "C" {
#endif

/* The process's wake-up descriptor, or -1 (one line on stderr says why: no API
 * started yet, or no descriptor could be made). The same descriptor every call. */
int volley_wakeup_fd(void);

/* 0: armed, the program may now sleep on the descriptor; > 0: work is already
 * there (poll, then arm again); < 0: error (one line on stderr). */
int volley_arm(void);

#ifdef __cplusplus
}
#endif

#endif /* VOLLEY_H */
