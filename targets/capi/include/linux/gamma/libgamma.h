/*
 * <linux/gamma/libgamma.h>: the later GAMMA API, on Volley.
 *
 * The variant that programs such as OpenFOAM's GAMMA Pstream back-end were written
 * against: one handler per active port (gamma_set_active_port takes 9 arguments),
 * `unsigned short` ports, semaphores and instance numbers, gamma_msglen and
 * gamma_abort. Build such a program with only an include path added
 * (`pkg-config --cflags volley` gives it). Semantics, launching and the rules for
 * handlers are those of <gamma.h>; errors at a port with no error handler count on
 * its error semaphore and gamma_wait() reports them.
 *
 * The calls whose argument types differ from the 2004 API are separate symbols of
 * libvolley (volley_libgamma_*); the macros below give them their GAMMA names.
 */
#ifndef VOLLEY_LINUX_GAMMA_LIBGAMMA_H
#define VOLLEY_LINUX_GAMMA_LIBGAMMA_H

#ifdef __cplusplus
extern "C" {
#endif

#define BROADCAST 65535

#define GO_AHEAD 1
#define GO_BACK 2

#define GAMMA_ERR_FRAMELOST 2
#define GAMMA_ERR_MSGTOOLONG 3
#define GAMMA_ERR_SENDFAILURE 4

#define GAMMA_PORTS 1025
#define GAMMA_SEMAPHORES 1025

typedef struct {
    unsigned long hi;
    unsigned long lo;
} time_586[1];

#define gamma_set_active_port volley_libgamma_set_active_port
#define gamma_set_passive_port volley_libgamma_set_passive_port
#define gamma_post_recv volley_libgamma_post_recv
#define gamma_attach_buffer volley_libgamma_attach_buffer
#define gamma_send volley_libgamma_send
#define gamma_send_flowctl volley_libgamma_send_flowctl
#define gamma_send_2p volley_libgamma_send_2p
#define gamma_send_2p_flowctl volley_libgamma_send_2p_flowctl
#define gamma_isend volley_libgamma_isend
#define gamma_isend_flowctl volley_libgamma_isend_flowctl
#define gamma_isend_2p volley_libgamma_isend_2p
#define gamma_isend_2p_flowctl volley_libgamma_isend_2p_flowctl
#define gamma_signal volley_libgamma_signal
#define gamma_sigerr volley_libgamma_sigerr
#define gamma_wait volley_libgamma_wait
#define gamma_test volley_libgamma_test
#define gamma_active_port volley_libgamma_active_port

int gamma_init(int num_nodes, int argc, char **argv);
int gamma_exit(void);
void gamma_abort(void);

int gamma_set_active_port(unsigned short port, unsigned short dest_node,
                          unsigned char dest_par_pid, unsigned short dest_port,
                          void (*handler)(void), unsigned short semaphore,
                          unsigned char buffer_kind, void *destination_buffer,
                          unsigned long buffer_len);
int gamma_set_passive_port(unsigned short port, unsigned short dest_node,
                           unsigned char dest_par_pid, unsigned short dest_port,
                           unsigned short semaphore, unsigned char buffer_kind,
                           void *destination_buffer, unsigned long buffer_len);
int gamma_post_recv(unsigned short input_port, void *destination_buffer,
                    unsigned long buffer_len);
int gamma_attach_buffer(unsigned short input_port, void *destination_buffer);

int gamma_send(unsigned short output_port, void *data, unsigned long len);
int gamma_send_flowctl(unsigned short output_port, void *data, unsigned long len);
int gamma_send_2p(unsigned short output_port, void *data1, unsigned long len1,
                  void *data2, unsigned long len2);
int gamma_send_2p_flowctl(unsigned short output_port, void *data1, unsigned long len1,
                          void *data2, unsigned long len2);
int gamma_isend(unsigned short output_port, void *data, unsigned long len);
int gamma_isend_flowctl(unsigned short output_port, void *data, unsigned long len);
int gamma_isend_2p(unsigned short output_port, void *data1, unsigned long len1,
                   void *data2, unsigned long len2);
int gamma_isend_2p_flowctl(unsigned short output_port, void *data1, unsigned long len1,
                           void *data2, unsigned long len2);
int gamma_wsend(unsigned long handle);
int gamma_tsend(unsigned long handle);

int gamma_signal(unsigned short sem);
int gamma_sigerr(unsigned short sem);
int gamma_wait(unsigned short sem, unsigned long n);
int gamma_test(unsigned short sem);

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

extern unsigned short gamma_active_port;
extern unsigned char gamma_errno;
extern long gamma_msglen;

#ifdef __cplusplus
}
#endif

#endif /* VOLLEY_LINUX_GAMMA_LIBGAMMA_H */
