/* The save protocol (save.h). */
#include "save.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

oari_file_fault_fn oari_file_fault;

static atomic_uint temp_seq;

/* The injected errno for this step, or 0. */
static int fault(oari_file_step step, const char *path) {
    oari_file_fault_fn f = oari_file_fault;
    return f ? f(step, path) : 0;
}

/* The folder of path in buf (size >= strlen(path) + 2): "." for a bare
 * name, "/" for "/x". */
static void dir_of(const char *path, char *buf, size_t size) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, size, ".");
    else if (slash == path) snprintf(buf, size, "/");
    else snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

long oari_file_name_pid(const char *name, const char *suffix) {
    size_t len = strlen(name), sl = strlen(suffix);
    if (len <= sl || strcmp(name + len - sl, suffix)) return -1;
    const char *end = name + len - sl, *p = end; /* "<...>.<pid>.<n>" ends at end */
    while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
    if (p == end || p == name || p[-1] != '.') return -1;
    const char *q = --p; /* the dot before <n> */
    while (p > name && p[-1] >= '0' && p[-1] <= '9') p--;
    if (p == q || p - 1 <= name || p[-1] != '.' || q - p > 9) return -1;
    return strtol(p, NULL, 10);
}

bool oari_pid_dead(long pid) {
    if (pid <= 0 || pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

int oari_file_sweep(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t pl = strlen(prefix), dl = strlen(dir);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *name = e->d_name;
        const char *tmp = strstr(name, ".tmp.");
        if (strncmp(name, prefix, pl) || !tmp) continue;
        while (strstr(tmp + 1, ".tmp.")) tmp = strstr(tmp + 1, ".tmp."); /* the last one */
        if (!oari_pid_dead(oari_file_name_pid(tmp + 1, ""))) continue; /* "tmp.<pid>.<n>" */
        char p[8192]; /* best effort: a path too long for it is skipped */
        if (dl + strlen(name) + 2 > sizeof p) continue;
        snprintf(p, sizeof p, "%s/%s", dir, name);
        removed += unlink(p) == 0;
    }
    closedir(d);
    return removed;
}

int oari_make_dirs(const char *path, unsigned mode) {
    char tmp[PATH_MAX];
    if (!path || !*path) return ENOENT;
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return ENAMETOOLONG;
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, (mode_t)mode) && errno != EEXIST) return errno;
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(path, &st)) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

int oari_dir_sync(const char *dir, const char *who) {
    int e = fault(OARI_FILE_DIRSYNC, dir);
    if (!e) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) e = errno;
        else {
            if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) e = errno; /* some file systems cannot */
            close(fd);
        }
    }
    return e ? oari_error(OAR_ERR_IO, "%s: cannot write %s: syncing the folder failed: %s", who, dir, strerror(e))
             : 0;
}

static void wfile_free(oari_wfile *w) {
    oari_free(w->path, w->size);
    w->path = w->tmp = w->dir = NULL;
}

int oari_wfile_open(oari_wfile *w, const char *path, const char *who) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->who = who;
    w->crc = (uint32_t)crc32(0L, Z_NULL, 0);
    if (!path || !*path) return oari_error(OAR_ERR_INVALID, "%s: the path is NULL or empty", who);
    /* one block: the target, the temporary, the folder */
    size_t len = strlen(path), tmp_size = len + 40;
    w->size = 3 * len + 44;
    if (!(w->path = oari_malloc(w->size))) return oari_fail_status();
    w->tmp = w->path + len + 1;
    w->dir = w->tmp + tmp_size;
    memcpy(w->path, path, len + 1);
    dir_of(path, w->dir, len + 2);
    /* the dead writers' temporaries of this target go first */
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char prefix[512];
    if (strlen(base) < 400) {
        snprintf(prefix, sizeof prefix, "%s.tmp.", base);
        oari_file_sweep(w->dir, prefix);
    }
    int e = fault(OARI_FILE_CREATE, path);
    for (int tries = 0; !e && w->fd < 0 && tries < 100; tries++) {
        snprintf(w->tmp, tmp_size, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&temp_seq, 1));
        w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fd < 0 && errno != EEXIST) e = errno;
    }
    if (w->fd < 0) {
        int st = oari_error(OAR_ERR_IO, "%s: cannot write %s: cannot create its temporary: %s", who, path,
                            strerror(e ? e : EEXIST));
        wfile_free(w);
        return st;
    }
    return 0;
}

void oari_wfile_abort(oari_wfile *w) {
    if (w->fd >= 0) {
        close(w->fd);
        w->fd = -1;
        unlink(w->tmp);
    }
    wfile_free(w);
}

/* Fails w (temporary removed) with errno e during `doing`. */
static int wfile_fail(oari_wfile *w, int e, const char *doing) {
    int st = oari_error(OAR_ERR_IO, "%s: cannot write %s: %s failed: %s", w->who, w->path, doing, strerror(e));
    oari_wfile_abort(w);
    return st;
}

int oari_wfile_write(oari_wfile *w, const void *buf, size_t n) {
    if (w->fd < 0) return oari_error(OAR_ERR_STATE, "%s: writing a file that is not open", w->who);
    int e = fault(OARI_FILE_WRITE, w->path);
    const char *p = buf;
    size_t left = n;
    while (!e && left) {
        ssize_t k = write(w->fd, p, left > (1u << 30) ? (1u << 30) : left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) e = k < 0 ? errno : EIO;
        else p += k, left -= (size_t)k;
    }
    if (e) return wfile_fail(w, e, "writing");
    for (size_t off = 0; off < n;) { /* zlib's crc32 takes 32-bit lengths */
        uInt chunk = n - off > (1u << 30) ? (1u << 30) : (uInt)(n - off);
        w->crc = (uint32_t)crc32(w->crc, (const Bytef *)buf + off, chunk);
        off += chunk;
    }
    w->bytes += n;
    return 0;
}

int oari_wfile_commit(oari_wfile *w) {
    if (w->fd < 0) return oari_error(OAR_ERR_STATE, "%s: committing a file that is not open", w->who);
    int e = fault(OARI_FILE_FSYNC, w->path);
    if (!e && fsync(w->fd) != 0) e = errno;
    if (e) return wfile_fail(w, e, "syncing");
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) { /* NFS reports late write errors here */
        e = errno;
        unlink(w->tmp);
        int st = oari_error(OAR_ERR_IO, "%s: cannot write %s: closing it failed: %s", w->who, w->path, strerror(e));
        wfile_free(w);
        return st;
    }
    e = fault(OARI_FILE_RENAME, w->path);
    if (!e && rename(w->tmp, w->path) != 0) e = errno;
    if (e) {
        unlink(w->tmp);
        int st = oari_error(OAR_ERR_IO, "%s: cannot write %s: renaming %s over it failed: %s", w->who, w->path,
                            w->tmp, strerror(e));
        wfile_free(w);
        return st;
    }
    int st = oari_dir_sync(w->dir, w->who);
    wfile_free(w);
    return st;
}

int oari_file_save(const char *path, const void *buf, size_t n, const char *who) {
    oari_wfile w;
    int st = oari_wfile_open(&w, path, who);
    if (!st) st = oari_wfile_write(&w, buf, n);
    return st ? st : oari_wfile_commit(&w);
}
