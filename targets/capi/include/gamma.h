/*
 * gamma.h: the GAMMA (Genoa Active Message MAchine) API of March 2004, on Volley.
 *
 * Every function, constant and global of the GAMMA API document, with its name and
 * signature. Link with libvolley (pkg-config: volley). Start the ranks with
 * `volley run -n N -- ./prog`, `mpiexec -n N ./prog`, `srun -n N ./prog`, or run
 * `./prog -GAMMANP N` to have gamma_init() start N copies of the program on this
 * machine, as GAMMA's did across the cluster.
 *
 * Differences imposed by the seed's own types: ports, semaphores and instance numbers
 * are `unsigned char` here, so this header reaches ports and semaphores 0..254 and
 * instances 0..254 (255 is BROADCAST). <linux/gamma/libgamma.h> has the later API
 * with `unsigned short` ports for larger jobs. Every call returns a negative value on
 * error (GAMMA's numbers where GAMMA has one: -GAMMA_ERR_SENDFAILURE, ...; Volley's
 * own from -10 down otherwise, e.g. -18 for a handle no send was given, -20 for a
 * message longer than the call takes).
 *
 * gamma_init(num_nodes, ...) run by hand (no launcher) starts num_nodes copies of the
 * program on this machine; num_nodes <= 0 (or -GAMMANP 0) means all of the cluster,
 * which here is this machine: one copy per processor it lets the program use.
 *
 * A reliable send to a port the receiver has not bound for input is retried for
 * 10 s (a port bound late still gets it); then the receiver discards it and the send
 * fails with -GAMMA_ERR_SENDFAILURE (the port's error handler sees
 * GAMMA_ERR_SENDFAILURE). A blocking gamma_send_flowctl of more than 16 KiB returns
 * that error; a shorter one has returned already, and only the handler learns it.
 *
 * Receiver and error handlers run inside GAMMA calls that poll (gamma_wait,
 * gamma_test, the sends, gamma_sync), on the calling thread, when a whole message has
 * landed. A handler may call any GAMMA function that does not wait: gamma_signal,
 * gamma_sigerr, gamma_test, gamma_post_recv, gamma_attach_buffer, and the sends
 * (copied, at most 16 KiB, and transmitted as soon as the handler returns; a failure
 * later reaches the port's error handler; a longer one returns -20). Waiting calls (gamma_wait, gamma_sync,
 * gamma_wsend, gamma_exit, port set-up) return an error inside a handler. GAMMA is
 * single-threaded: call it from the thread that called gamma_init().
 */
#ifndef VOLLEY_GAMMA_H
#define VOLLEY_GAMMA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Destination instance meaning "every process of the group but me". */
#define BROADCAST 255

/* buffer_kind: where the next message lands in a port's destination buffer. */
#define GO_AHEAD 1 /* after the previous one (gather) */
#define GO_BACK 2  /* at the start of the buffer */

/* gamma_errno values, during an error handler. */
#define GAMMA_ERR_FRAMELOST 2   /* a chunk of a message was lost */
#define GAMMA_ERR_MSGTOOLONG 3  /* no buffer, or the message did not fit it */
#define GAMMA_ERR_SENDFAILURE 4 /* a send failed: the peer stopped answering */

/* Ports and semaphores 1023 and 1024 are reserved for broadcast and barrier. */
#define GAMMA_PORTS 1025
#define GAMMA_SEMAPHORES 1025

/* A time stamp; an array type, so that gamma_time(t) fills the caller's t. */
typedef struct {
    unsigned long hi;
    unsigned long lo;
} time_586[1];

int gamma_init(int num_nodes, int argc, char **argv);
int gamma_exit(void);
/* Ends the whole job at once (not in the 2004 document; used by real programs). */
void gamma_abort(void);

int gamma_set_active_port(unsigned char port, unsigned char dest_node,
                          unsigned char dest_par_pid, unsigned char dest_port,
                          void (*receiver_handler)(void), void (*error_handler)(void),
                          unsigned char semaphore, unsigned char buffer_kind,
                          void *destination_buffer, unsigned long buffer_len);
int gamma_set_passive_port(unsigned char port, unsigned char dest_node,
                           unsigned char dest_par_pid, unsigned char dest_port,
                           unsigned char semaphore, unsigned char buffer_kind,
                           void *destination_buffer, unsigned long buffer_len);
int gamma_post_recv(unsigned char input_port, void *destination_buffer,
                    unsigned long buffer_len);
int gamma_attach_buffer(unsigned char input_port, void *destination_buffer);

/* Blocking sends: best effort, and flow-controlled (reliable). They return the length. */
int gamma_send(unsigned char output_port, void *data, unsigned long len);
int gamma_send_flowctl(unsigned char output_port, void *data, unsigned long len);
int gamma_send_2p(unsigned char output_port, void *data1, unsigned long len1, void *data2,
                  unsigned long len2);
int gamma_send_2p_flowctl(unsigned char output_port, void *data1, unsigned long len1,
                          void *data2, unsigned long len2);

/* Non-blocking sends return a handle; the data must stay untouched until
 * gamma_wsend() returns or gamma_tsend() returns 1. A handle stays answerable after
 * its send has ended: gamma_tsend() keeps returning 1 (or the error it failed with)
 * and gamma_wsend() 0. */
int gamma_isend(unsigned char output_port, void *data, unsigned long len);
int gamma_isend_flowctl(unsigned char output_port, void *data, unsigned long len);
int gamma_isend_2p(unsigned char output_port, void *data1, unsigned long len1,
                   void *data2, unsigned long len2);
int gamma_isend_2p_flowctl(unsigned char output_port, void *data1, unsigned long len1,
                           void *data2, unsigned long len2);
int gamma_wsend(unsigned long handle);
int gamma_tsend(unsigned long handle);

int gamma_signal(unsigned char sem);
int gamma_sigerr(unsigned char sem);
int gamma_wait(unsigned char sem, unsigned long n);
int gamma_test(unsigned char sem);

int gamma_atomic(void (*funct)(void));
int gamma_sync(void);

int gamma_my_par_pid(void);
int gamma_my_node(void);
int gamma_how_many_nodes(void);

int gamma_mlock(void *buffer, unsigned long len);
int gamma_munlock(void *buffer, unsigned long len);
int gamma_munlockall(void);

void gamma_time(time_586 t);
double gamma_time_diff(time_586 b, time_586 a);

/* During a handler: the port that triggered it. */
extern unsigned char gamma_active_port;
/* During an error handler: the GAMMA_ERR_* condition. */
extern unsigned char gamma_errno;
/* During a handler: the length of the message, as sent. */
extern long gamma_msglen;

#ifdef __cplusplus
}
#endif

#endif /* VOLLEY_GAMMA_H */
