/*
 * qnix.h: the QNIX API (A. De Vivo, "A light-weight communication system for a
 * high performance system area network"), on Volley.
 *
 * Every function returns a negative number or NULL on error, as the seed says;
 * the number is one of the QX_E* codes below, qx_strerror() says what it means and
 * qx_last_error() gives the last one (qx_init returns NULL).
 *
 * Processes are named by (AI, PI): application id and process id, 0..group_size-1.
 * A job is started by a launcher (`volley run -n N -- ./prog`, mpiexec, srun);
 * every process calls qx_init with its own name, which need not be its rank.
 *
 * Contexts: qx_send_context and qx_recv_context lend a context for one operation.
 * The poll that sees it end gives it back (a context without a doorbell, once the
 * operation ends); so does a command that is refused (a negative return from
 * qx_send, qx_receive, qx_barrier, ...): the program takes a new context to try
 * again. A context with an operation posted is never taken back by a refusal.
 */
#ifndef QNIX_H
#define QNIX_H

#ifdef __cplusplus
extern "C" {
#endif

/* Entries in each of the send and receive context lists. */
#define QX_CONTEXTS 64
/* Longest message qx_send_short and friends carry (copied into the context region). */
#define QX_SHORT_MAX 4096
/* Page size of the buffer pool and of page tables. */
#define QX_PAGE_SIZE 4096
/* Largest buffer pool, in pages (8 MB). */
#define QX_POOL_MAX_PAGES 2048
/* Longest buffer qx_buffer_translate takes (2 MB). */
#define QX_TRANSLATE_MAX (2L * 1024 * 1024)

/* Doorbell values. */
#define QX_FREE 0 /* no operation */
#define QX_BUSY 1 /* posted, not finished */
#define QX_DONE 2 /* finished; negative: failed with that QX_E* code */

/* Error numbers (Volley's; the seed defines none). */
#define QX_EINVAL (-1)    /* invalid argument */
#define QX_ENOCTX (-2)    /* no such context, or none free */
#define QX_EBUSY (-3)     /* the context has an operation posted */
#define QX_EUNKNOWN (-4)  /* no registered process or formed group by that name */
#define QX_EOTHERAPP (-5) /* a registered process of another application */
#define QX_ETOOLONG (-6)  /* length above the operation's limit */
#define QX_ENOPHYS (-7)   /* physical addresses are not available here */
#define QX_EFAULT (-8)    /* memory not mapped, not translated or not writable */
#define QX_ENOMEM (-9)    /* memory could not be allocated or locked */
#define QX_EDEAD (-10)    /* the peer stopped answering */
#define QX_ETRUNC (-11)   /* message longer than the receive buffer */
#define QX_ETIMEDOUT (-12) /* registration did not complete in time */
#define QX_ENOTINIT (-13) /* qx_init has not succeeded, or qx_end was called */
#define QX_EEXIST (-14)   /* already registered or created */
#define QX_ESIZE (-15)    /* group size disagrees with the group's */
#define QX_ENODOORBELL (-16) /* the context has no doorbell */
#define QX_ENETWORK (-17) /* other network failure */

/*
 * The Host Process Structure qx_init returns: the process's doorbells, indexed
 * like the context lists, written by the library's NIC step (which runs inside
 * every qx_* call, and between calls on the library's NIC thread unless
 * VOLLEY_QNIX_NIC=0), and the buffer pool once qx_buffer_pool made it.
 */
typedef struct qx_hps {
    int proc_name[2];
    int group_size;
    volatile int send_doorbell[QX_CONTEXTS];
    volatile int recv_doorbell[QX_CONTEXTS];
    char *buffer_pool;
    long buffer_pool_size; /* bytes */
} qx_hps_t;

/*
 * The last element of a qx_buffer_translate page table: bytes of the buffer in its
 * first page (bits 16..31) and in its last page (bits 0..15).
 */
#define QX_FIRST_PAGE_BYTES(x) ((long)(((x) >> 16) & 0xffff))
#define QX_LAST_PAGE_BYTES(x) ((long)((x) & 0xffff))

void *qx_init(int *proc_name, int group_name, int group_size);
int qx_buffer_lock(char *buffer, long buffer_size);
int qx_buffer_unlock(char *buffer, long buffer_size);
int qx_buffer_pool(int pool_size);
int qx_buffer_translate(char *buffer, long buffer_size, unsigned long *phys_addr);
/* receiver_proc_name NULL: a context that names no receiver, for qx_join_group and
 * qx_barrier only (a send on it is refused with QX_EUNKNOWN). */
int qx_send_context(int *receiver_proc_name, int context_tag, int doorbell_flag, int size,
                    long len, int buffer_pool_index, unsigned long *context_reg);
int qx_recv_context(int *sender_proc_name, int context_tag, int doorbell_flag, int size,
                    long len, int buffer_pool_index, unsigned long *context_reg);
int qx_send(int context_index);
int qx_send_short(int context_index);
int qx_broadcast(int context_index, int group_name);
int qx_broadcast_short(int context_index, int group_name);
int qx_multicast(int context_index, int size, int **recv_proc_name_list);
int qx_multicast_short(int context_index, int size, int **recv_proc_name_list);
int qx_receive(int context_index);
int qx_join_group(int context_index, int group_name, int group_size);
int qx_barrier(int context_index, int group_name, int group_size);
int qx_poll_for_send(int context_index);
/* qx_poll_for_receive returns the bytes received. */
int qx_poll_for_receive(int context_index);
int qx_end(int *proc_name);

/* Volley extensions. */
const char *qx_strerror(int error);
int qx_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* QNIX_H */
