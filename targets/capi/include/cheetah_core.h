/*
 * cheetah_core.h: the Cheetah core interface (S. Karmesin, LANL, revision 1.1 of
 * 2000/04/17) on Volley's libvolley.
 *
 * Contexts are the ranks of a Volley job (volley run, mpiexec, Slurm); a program
 * started by hand with "-np N" launches N copies of itself on this machine.
 * Bells are plain ints, rung by the library at the moments the seed defines.
 * Between processes of one host (on any fabric) a put or get is copied straight
 * between the two (process_vm_writev/readv) and is complete when the call returns,
 * whatever the target is doing; its remote bell is rung at the target's next
 * poll. Elsewhere (or where the kernel forbids such copies: one line says so) it
 * is served by the target's library at its next poll, wait or barrier, never by a
 * user handler. Remote addresses are checked by the target's rule: only its
 * private writable memory (or, after cheetah_core_expose, only the ranges
 * exposed) can be reached; anything else is refused, the target is left
 * untouched, and the initiator prints one line and exits 1 (at once on one host,
 * at its next call elsewhere).
 * Static variables are symmetric, as where Cheetah ran: &a of a static a, given
 * as a remote address or remote bell, names a in the target (if it runs the same
 * executable), wherever the loader put each process. Heap and stack addresses
 * differ between contexts: send them with an ainvoke. The tag INT_MIN is the
 * library's own (cheetah_core_register and cheetah_core_ainvoke refuse it).
 *
 * Link with -lvolley (pkg-config volley).
 */
#ifndef CHEETAH_CORE_H
#define CHEETAH_CORE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Setup/teardown. The seed prints the second parameter as "int ***argv";
 * programs pass &argv of main's char **argv, so any pointer is taken. */
void cheetah_core_setup(int *argc, void *argv);
void cheetah_core_finalize(void);

/* Queries. */
int cheetah_core_ncontexts(void);
int cheetah_core_mycontext(void);

/* One-sided transfers. local_bell/remote_bell may be NULL (no bell). */
void cheetah_core_put(int context, void *remote, void *local, int length,
                      int *local_bell, int *remote_bell);
void cheetah_core_get(int context, void *remote, void *local, int length,
                      int *local_bell, int *remote_bell);

/* Remote handler invocation by tag. The handler may call any cheetah_core
 * function and must not keep the buffer. The buffer of an ainvoke is copied
 * before the call returns (its local bell rings then); at most 1 MiB. */
typedef void (*cheetah_core_handler_t)(int who, int tag, void *buffer, int length);
void cheetah_core_register(int tag,
                           void (*handler)(int who, int tag, void *buffer, int length));
void cheetah_core_ainvoke(int context, int tag, void *buffer, int length,
                          int *local_bell);

/* Progress. cheetah_core_wait returns when *bell >= value. */
void cheetah_core_poll(void);
void cheetah_core_wait(int *bell, int value);
void cheetah_core_barrier(void);

/* Volley extension: from the first call on, peers reach only the ranges exposed.
 * Returns 0, or -1 if the range is not writable memory of this process. */
int cheetah_core_expose(void *base, long length);

#ifdef __cplusplus
}
#endif

#endif /* CHEETAH_CORE_H */
