/* A device plugin for the distributed tests: one "fakecoll" device whose
 * memory is host memory and which has no kernels (every op runs on the
 * CPU with copies), but has collective members (ABI 1.2): a communicator
 * is a file mapped by every process of the group, and all_reduce,
 * all_gather and reduce_scatter (f32, f64; sum, max, min, prod) go
 * through it, as NCCL's go through GPU links. It counts its calls
 * (oar_test_coll_calls), so a test sees that oar's distributed layer used
 * the members rather than MPI. broadcast (any dtype) goes through the
 * root's slot; send and recv (any dtype) through a mailbox per ordered
 * pair of ranks, and a send returns only once the receiver has taken the
 * message, so an order of sends and recvs that could deadlock on NCCL
 * fails here too (after a timeout) instead of passing by luck. Built
 * against <oar/device.h> alone. */
#define OAR_DEVICE_PLUGIN_ONLY
#include <oar/device.h>

#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SLOT_BYTES (1u << 20) /* the most one rank contributes to one call */
#define HEADER 64
#define MBOX_BYTES (64u << 10) /* one chunk of a message between two ranks */
#define P2P_WAIT_S 30          /* a send or recv fails after this long without its peer */

#include "host_memory.h"
static long calls[6];

/* Calls made so far: kind 0 all_reduce, 1 all_gather, 2 reduce_scatter,
 * 3 broadcast, 4 send, 5 recv. */
__attribute__((visibility("default"))) long oar_test_coll_calls(int kind) {
    return kind >= 0 && kind < 6 ? calls[kind] : -1;
}

typedef struct group {
    int nranks, rank;
    size_t size;
    unsigned char *map; /* header (two counters), nranks slots, nranks x nranks mailboxes */
} group;

/* One direction between two ranks: full is 1 while a chunk waits in data. */
typedef struct mailbox {
    atomic_uint full;
    uint32_t len;    /* bytes of this chunk */
    uint64_t total;  /* bytes of the whole message */
    unsigned char data[MBOX_BYTES];
} mailbox;

static int n_devices(void *ctx) { (void)ctx; return 1; }

static int props(void *ctx, int index, oar_device_props *out) {
    (void)ctx, (void)index;
    strcpy(out->name, "fake collective device");
    out->total_memory = 1u << 30;
    return 0;
}


static oar_kernel_fn get_kernel(void *ctx, int index, const char *op, int32_t dtype) {
    (void)ctx, (void)index, (void)op, (void)dtype;
    return NULL;
}

/* Every process of the group arrives before any leaves (a counter and a
 * generation in the shared header); -1 after 60 s without the others. */
static int barrier(group *g) {
    atomic_uint *arrived = (atomic_uint *)g->map, *gen = arrived + 1;
    unsigned mine = atomic_load(gen);
    if (atomic_fetch_add(arrived, 1) + 1 == (unsigned)g->nranks) {
        atomic_store(arrived, 0);
        atomic_fetch_add(gen, 1);
        return 0;
    }
    time_t start = time(NULL);
    for (long spins = 0; atomic_load(gen) == mine; spins++) {
        if (spins > 1000) sched_yield();
        if ((spins & 1023) == 0 && time(NULL) - start > 60) return -1;
    }
    return 0;
}

/* The id is the path of a fresh file the group maps. */
static int comm_id(void *ctx, int index, void *id, size_t *len) {
    (void)ctx, (void)index;
    const char *dir = getenv("TMPDIR");
    char path[OAR_COMM_ID_BYTES];
    snprintf(path, sizeof path, "%s/oar_fakecoll_XXXXXX", dir && strlen(dir) < 200 ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) return host->error(-4, "fakecoll: cannot make the group's file");
    close(fd);
    *len = strlen(path) + 1;
    memcpy(id, path, *len);
    return 0;
}

static void *comm_create(void *ctx, int index, int nranks, int rank, const void *id, size_t len) {
    (void)ctx, (void)index;
    if (!len || ((const char *)id)[len - 1] || nranks < 1 || rank < 0 || rank >= nranks) {
        host->error(-1, "fakecoll: bad communicator arguments");
        return NULL;
    }
    group *g = host->alloc(sizeof *g);
    if (!g) return NULL;
    g->nranks = nranks;
    g->rank = rank;
    g->size = HEADER + (size_t)nranks * SLOT_BYTES + (size_t)nranks * (size_t)nranks * sizeof(mailbox);
    int fd = open(id, O_RDWR);
    if (fd < 0 || ftruncate(fd, (off_t)g->size)) { /* the same size from every process */
        if (fd >= 0) close(fd);
        host->free(g, sizeof *g);
        host->error(-4, "fakecoll: cannot open the group's file");
        return NULL;
    }
    g->map = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (g->map == MAP_FAILED || barrier(g)) {
        if (g->map != MAP_FAILED) munmap(g->map, g->size);
        host->free(g, sizeof *g);
        host->error(-4, "fakecoll: the group did not assemble");
        return NULL;
    }
    if (rank == 0) unlink(id); /* everyone has it mapped */
    return g;
}

static void comm_destroy(void *ctx, int index, void *comm) {
    (void)ctx, (void)index;
    group *g = comm;
    munmap(g->map, g->size);
    host->free(g, sizeof *g);
}

/* recv[i] = op over ranks r of slot r's element at + i, for i < count */
#define REDUCE(T)                                                                          \
    do {                                                                                   \
        T *o = recv;                                                                       \
        for (size_t i = 0; i < count; i++) {                                               \
            T acc = ((const T *)slot(g, 0))[at + i];                                       \
            for (int r = 1; r < g->nranks; r++) {                                          \
                T v = ((const T *)slot(g, r))[at + i];                                     \
                acc = op == OAR_REDUCE_SUM ? acc + v : op == OAR_REDUCE_PROD ? acc * v     \
                    : op == OAR_REDUCE_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);    \
            }                                                                              \
            o[i] = acc;                                                                    \
        }                                                                                  \
    } while (0)

static unsigned char *slot(group *g, int r) { return g->map + HEADER + (size_t)r * SLOT_BYTES; }

/* Puts this rank's n bytes in its slot and waits for the others'. */
static int publish(group *g, const void *send, size_t n) {
    if (n > SLOT_BYTES) return host->error(-3, "fakecoll: more than 1 MiB per rank");
    memcpy(slot(g, g->rank), send, n);
    return barrier(g) ? host->error(-5, "fakecoll: the other ranks did not come") : 0;
}

/* Nobody writes its slot again before all have read. */
static int done(group *g, int kind) {
    calls[kind]++;
    return barrier(g) ? host->error(-5, "fakecoll: the other ranks did not come") : 0;
}

static size_t elem_size(int32_t dtype, oar_reduce_op op) {
    return op == OAR_REDUCE_AVG ? 0 : dtype == 6 ? 4 : dtype == 7 ? 8 : 0;
}

static int all_reduce(void *ctx, int index, void *comm, const void *send, void *recv, size_t count,
                      int32_t dtype, oar_reduce_op op, oar_stream s) {
    (void)ctx, (void)index, (void)s;
    group *g = comm;
    size_t es = elem_size(dtype, op), at = 0;
    if (!es) return host->error(-3, "fakecoll all_reduce: f32 and f64; sum, max, min, prod");
    int st = publish(g, send, count * es);
    if (st) return st;
    if (es == 4) REDUCE(float);
    else REDUCE(double);
    return done(g, 0);
}

/* Each rank's send_count elements, in rank order. */
static int all_gather(void *ctx, int index, void *comm, const void *send, void *recv, size_t send_count,
                      int32_t dtype, oar_stream s) {
    (void)ctx, (void)index, (void)s;
    group *g = comm;
    size_t es = elem_size(dtype, OAR_REDUCE_SUM), n = send_count * es;
    if (!es) return host->error(-3, "fakecoll all_gather: f32 and f64");
    int st = publish(g, send, n);
    if (st) return st;
    for (int r = 0; r < g->nranks; r++) memcpy((char *)recv + (size_t)r * n, slot(g, r), n);
    return done(g, 1);
}

/* This rank's block of recv_count elements of the reduction. */
static int reduce_scatter(void *ctx, int index, void *comm, const void *send, void *recv, size_t count,
                          int32_t dtype, oar_reduce_op op, oar_stream s) {
    (void)ctx, (void)index, (void)s;
    group *g = comm;
    size_t es = elem_size(dtype, op), at = (size_t)g->rank * count;
    if (!es) return host->error(-3, "fakecoll reduce_scatter: f32 and f64; sum, max, min, prod");
    int st = publish(g, send, count * (size_t)g->nranks * es);
    if (st) return st;
    if (es == 4) REDUCE(float);
    else REDUCE(double);
    return done(g, 2);
}

static size_t dtype_size(int32_t dtype) {
    static const unsigned char size[] = {1, 1, 4, 8, 2, 2, 4, 8, 8, 16}; /* oar_dtype order */
    return dtype >= 0 && dtype < 10 ? size[dtype] : 0;
}

/* Root's count elements to every rank, through root's slot. */
static int broadcast(void *ctx, int index, void *comm, const void *send, void *recv, size_t count,
                     int32_t dtype, int root, oar_stream s) {
    (void)ctx, (void)index, (void)s;
    group *g = comm;
    size_t n = count * dtype_size(dtype);
    if (!dtype_size(dtype) || root < 0 || root >= g->nranks)
        return host->error(-3, "fakecoll broadcast: bad dtype or root");
    if (n > SLOT_BYTES) return host->error(-3, "fakecoll broadcast: more than 1 MiB");
    if (g->rank == root) memcpy(slot(g, root), send, n);
    if (barrier(g)) return host->error(-5, "fakecoll: the other ranks did not come");
    memmove(recv, slot(g, root), n);
    return done(g, 3);
}

static mailbox *mbox(group *g, int from, int to) {
    mailbox *first = (mailbox *)(g->map + HEADER + (size_t)g->nranks * SLOT_BYTES);
    return first + (size_t)from * (size_t)g->nranks + (size_t)to;
}

/* Waits until *flag is want; -1 after P2P_WAIT_S seconds. */
static int wait_flag(atomic_uint *flag, unsigned want) {
    time_t start = time(NULL);
    for (long spins = 0; atomic_load(flag) != want; spins++) {
        if (spins > 1000) sched_yield();
        if ((spins & 1023) == 0 && time(NULL) - start > P2P_WAIT_S) return -1;
    }
    return 0;
}

static int check_p2p(group *g, const char *what, int32_t dtype, int peer) {
    if (!dtype_size(dtype) || peer < 0 || peer >= g->nranks || peer == g->rank) {
        char msg[128];
        snprintf(msg, sizeof msg, "fakecoll %s: bad dtype %d or peer %d (rank %d of %d)", what,
                 (int)dtype, peer, g->rank, g->nranks);
        return host->error(-3, msg);
    }
    return 0;
}

/* Chunk by chunk through the mailbox (this rank -> peer); returns once
 * the receiver has taken the last chunk. */
static int p2p_send(void *ctx, int index, void *comm, const void *buf, size_t count, int32_t dtype,
                    int peer, oar_stream s) {
    (void)ctx, (void)index, (void)s;
    group *g = comm;
    int st = check_p2p(g, "send", dtype, peer);
    if (st) return st;
    mailbox *m = mbox(g, g->rank, peer);
    size_t n = count * dtype_size(dtype), at = 0;
    do {
        if (wait_flag(&m->full, 0)) return host->error(-5, "fakecoll send: the receiver took nothing");
        size_t len = n - at < MBOX_BYTES ? n - at : MBOX_BYTES;
        memcpy(m->data, (const char *)buf + at, len);
        m->len = (uint32_t)len;
        m->total = n;
        atomic_store(&m->full, 1);
        at += len;
    } while (at < n);
    if (wait_flag(&m->full, 0)) return host->error(-5, "fakecoll send: the receiver took nothing");
    calls[4]++;
    return 0;
}

static int p2p_recv(void *ctx, int index, void *comm, void *buf, size_t count, int32_t dtype,
                    int peer, oar_stream s) {
    (void)ctx, (void)index, (void)s;
    group *g = comm;
    int st = check_p2p(g, "recv", dtype, peer);
    if (st) return st;
    mailbox *m = mbox(g, peer, g->rank);
    size_t n = count * dtype_size(dtype), at = 0;
    do {
        if (wait_flag(&m->full, 1)) return host->error(-5, "fakecoll recv: no message came");
        if (m->total != n) return host->error(-3, "fakecoll recv: the message has another size");
        memcpy((char *)buf + at, m->data, m->len);
        at += m->len;
        atomic_store(&m->full, 0);
    } while (at < n);
    calls[5]++;
    return 0;
}

static const oar_device_iface iface = {
    .abi_version = OAR_DEVICE_ABI_VERSION,
    .struct_size = sizeof(oar_device_iface),
    .type_name = "fakecoll",
    .device_count = n_devices,
    .get_props = props,
    .alloc = alloc,
    .free = release,
    .copy_to_device = to_dev,
    .copy_to_host = to_host,
    .get_kernel = get_kernel,
    .all_reduce = all_reduce,
    .all_gather = all_gather,
    .reduce_scatter = reduce_scatter,
    .broadcast = broadcast,
    .send = p2p_send,
    .recv = p2p_recv,
    .comm_unique_id = comm_id,
    .comm_create = comm_create,
    .comm_destroy = comm_destroy,
};

__attribute__((visibility("default"))) int oar_plugin_init(const oar_host_api *h,
                                                           oar_plugin_desc *out) {
    host = h;
    out->abi_version = OAR_DEVICE_ABI_VERSION;
    out->name = "fakecoll";
    out->iface = &iface;
    return 0;
}
