/* TensorBoard event files (include/oar/summary.h): scalars written by
 * oar_summary_* and by oar_fit's tb_dir are read back by a minimal reader
 * written here, independent of src/io/summary.c (a bitwise crc32c checked
 * against the standard test vector, its own TFRecord and protobuf
 * decoding): every length and both masked crc32c values of every record,
 * the file_version record, then the tags, steps and values. Errors: NULL
 * arguments, an unwritable folder. scripts/check_tensorboard.py reads the
 * same files with TensorBoard's own reader (not part of make test). */
#include "test.h"

#include <dirent.h>
#include <oar/summary.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

/* ---- an independent reader ------------------------------------------------- */

/* crc32c bit by bit (Castagnoli, reflected 0x82f63b78). */
static uint32_t ref_crc32c(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t ref_masked(const unsigned char *p, size_t n) {
    uint32_t c = ref_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

typedef struct {
    double wall_time;
    int64_t step;
    char version[32];
    char tag[512];
    float value;
    int n_values;
} event;

/* A varint at *p (< end); false if it runs past end. */
static bool varint(const unsigned char **p, const unsigned char *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        unsigned char b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* Decodes the fields of one message: calls back per field. */
typedef bool (*field_fn)(void *ctx, int field, int wire, uint64_t v, const unsigned char *p, size_t n);

static bool decode(const unsigned char *p, size_t n, field_fn fn, void *ctx) {
    const unsigned char *end = p + n;
    while (p < end) {
        uint64_t key, v = 0, len = 0;
        if (!varint(&p, end, &key)) return false;
        int wire = (int)(key & 7), field = (int)(key >> 3);
        const unsigned char *q = p;
        if (wire == 0) {
            if (!varint(&p, end, &v)) return false;
        } else if (wire == 1 || wire == 5) {
            int w = wire == 1 ? 8 : 4;
            if (end - p < w) return false;
            v = le(p, w);
            p += w;
        } else if (wire == 2) {
            if (!varint(&p, end, &len) || (uint64_t)(end - p) < len) return false;
            q = p;
            p += len;
        } else {
            return false;
        }
        if (!fn(ctx, field, wire, v, q, (size_t)len)) return false;
    }
    return true;
}

static bool value_field(void *ctx, int field, int wire, uint64_t v, const unsigned char *p, size_t n) {
    event *e = ctx;
    if (field == 1 && wire == 2 && n < sizeof e->tag) {
        memcpy(e->tag, p, n);
        e->tag[n] = 0;
    } else if (field == 2 && wire == 5) {
        uint32_t b = (uint32_t)v;
        memcpy(&e->value, &b, 4);
    } else {
        return false;
    }
    return true;
}

static bool summary_field(void *ctx, int field, int wire, uint64_t v, const unsigned char *p, size_t n) {
    event *e = ctx;
    if (field != 1 || wire != 2) return false;
    e->n_values++;
    return decode(p, n, value_field, e);
}

static bool event_field(void *ctx, int field, int wire, uint64_t v, const unsigned char *p, size_t n) {
    event *e = ctx;
    if (field == 1 && wire == 1) memcpy(&e->wall_time, &v, 8);
    else if (field == 2 && wire == 0) e->step = (int64_t)v;
    else if (field == 3 && wire == 2 && n < sizeof e->version) memcpy(e->version, p, n);
    else if (field == 5 && wire == 2) return decode(p, n, summary_field, e);
    else return false;
    return true;
}

/* Reads every record of an event file; the count, or -1 (with a message)
 * if a length, a crc or a message is wrong. */
static int read_events(const char *path, event *ev, int max) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0;
    unsigned char head[12];
    size_t got;
    while ((got = fread(head, 1, 12, f)) == 12) {
        uint64_t len = le(head, 8);
        if (le(head + 8, 4) != ref_masked(head, 8) || len > 1 << 20) {
            fprintf(stderr, "record %d: bad length crc or length\n", n);
            return fclose(f), -1;
        }
        unsigned char *d = malloc(len + 4);
        if (fread(d, 1, len + 4, f) != len + 4 || le(d + len, 4) != ref_masked(d, len)) {
            fprintf(stderr, "record %d: truncated or bad data crc\n", n);
            free(d);
            return fclose(f), -1;
        }
        event e = {0};
        bool ok = decode(d, len, event_field, &e);
        free(d);
        if (!ok) {
            fprintf(stderr, "record %d: bad Event protobuf\n", n);
            return fclose(f), -1;
        }
        if (n < max) ev[n] = e;
        n++;
    }
    fclose(f);
    return got == 0 ? n : -1;
}

/* The one event file in folder d (its path into out), or false. */
static bool find_event_file(const char *d, char *out, size_t cap) {
    DIR *dd = opendir(d);
    if (!dd) return false;
    int found = 0;
    struct dirent *de;
    while ((de = readdir(dd)))
        if (!strncmp(de->d_name, "events.out.tfevents.", 20)) {
            snprintf(out, cap, "%s/%s", d, de->d_name);
            found++;
        }
    closedir(dd);
    return found == 1;
}

/* ---- tests ----------------------------------------------------------------------- */

static void test_crc32c_vector(void) {
    CHECK(ref_crc32c((const unsigned char *)"123456789", 9) == 0xE3069283u);
    CHECK(ref_crc32c((const unsigned char *)"", 0) == 0);
}

static void test_scalars(void) {
    char d[400];
    snprintf(d, sizeof d, "%s/runs/a", dir); /* parents made too */
    oar_summary_writer *w = oar_summary_open(d);
    CHECK(w != NULL);
    if (!w) return;
    const char *path = oar_summary_path(w);
    char prefix[500];
    snprintf(prefix, sizeof prefix, "%s/events.out.tfevents.", d);
    CHECK(path && !strncmp(path, prefix, strlen(prefix)));
    char pid[32];
    snprintf(pid, sizeof pid, ".%ld", (long)getpid());
    CHECK(path && strlen(path) > strlen(pid) && !strcmp(path + strlen(path) - strlen(pid), pid));
    char keep[600];
    snprintf(keep, sizeof keep, "%s", path);
    /* a second writer in the same folder and second gets a file of its own */
    oar_summary_writer *w2 = oar_summary_open(d);
    CHECK(w2 && strcmp(oar_summary_path(w2), keep) != 0);
    CHECK(oar_summary_close(w2) == 0);

    struct {
        const char *tag;
        int64_t step;
        double v;
    } want[] = {{"train/loss", 1, 2.5},       {"train/loss", 2, 1.25},
                {"train/lr", 2, 1e-3},        {"a tag with spaces/é", 300, -7.75},
                {"big/step", (int64_t)1 << 40, 3.0e38}, {"neg/step", -5, 0.0},
                {"zero", 0, 42}};
    int nw = (int)(sizeof want / sizeof *want);
    char long_tag[300];
    memset(long_tag, 'x', sizeof long_tag - 1);
    long_tag[sizeof long_tag - 1] = 0;
    for (int i = 0; i < nw; i++)
        CHECK(oar_summary_scalar(w, want[i].tag, want[i].step, want[i].v) == 0);
    CHECK(oar_summary_scalar(w, long_tag, 9, 1) == 0); /* a record > 256 bytes */
    CHECK(oar_summary_flush(w) == 0);
    /* flushed: readable while the writer is open */
    event ev[16];
    int n = read_events(keep, ev, 16);
    CHECK(n == nw + 2);
    CHECK(oar_summary_scalar(w, "after/flush", 10, 0.5) == 0);
    CHECK(oar_summary_close(w) == 0);

    n = read_events(keep, ev, 16);
    CHECK(n == nw + 3);
    if (n != nw + 3) return;
    CHECK(!strcmp(ev[0].version, "brain.Event:2") && ev[0].n_values == 0 && ev[0].step == 0);
    double now = (double)time(NULL);
    CHECK(ev[0].wall_time > now - 600 && ev[0].wall_time < now + 600);
    for (int i = 0; i < nw; i++) {
        event *e = &ev[i + 1];
        CHECK(e->n_values == 1 && !e->version[0]);
        CHECK(!strcmp(e->tag, want[i].tag));
        CHECK(e->step == want[i].step);
        CHECK(e->value == (float)want[i].v);
        CHECK(e->wall_time >= ev[0].wall_time);
    }
    CHECK(ev[nw + 1].n_values == 1 && ev[nw + 1].step == 9);
    CHECK(!strcmp(ev[nw + 2].tag, "after/flush") && ev[nw + 2].value == 0.5f);
}

static void test_errors(void) {
    CHECK_FAILS(oar_summary_open(NULL), "oar_summary_open: dir is NULL");
    CHECK_FAILS(oar_summary_open(""), "oar_summary_open: dir is empty");
    /* a folder under a regular file cannot be made (even as root) */
    char file[400], bad[500];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    snprintf(bad, sizeof bad, "%s/sub", file);
    char needle[600];
    snprintf(needle, sizeof needle, "oar_summary_open: cannot create the folder %s: Not a directory", bad);
    CHECK_FAILS(oar_summary_open(bad), needle);
    CHECK_FAILS(oar_summary_open(file), "cannot create the folder");
    if (geteuid() != 0) { /* a read-only folder */
        char ro[400];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        mkdir(ro, 0500);
        CHECK_FAILS(oar_summary_open(ro), "cannot create the event file");
    }
    /* NULL writer and tag */
    oar_clear_error();
    CHECK_FAILS(oar_summary_scalar(NULL, "t", 1, 1) == 0, "oar_summary_scalar: writer is NULL");
    CHECK_FAILS(oar_summary_flush(NULL) == 0, "oar_summary_flush: writer is NULL");
    CHECK_FAILS(oar_summary_path(NULL), "oar_summary_path: writer is NULL");
    CHECK(oar_summary_close(NULL) == 0);
    char d[400];
    snprintf(d, sizeof d, "%s/errs", dir);
    oar_summary_writer *w = oar_summary_open(d);
    CHECK(w != NULL);
    CHECK_FAILS(oar_summary_scalar(w, NULL, 1, 1) == 0, "oar_summary_scalar: tag is NULL");
    CHECK_FAILS(oar_summary_scalar(w, "", 1, 1) == 0, "oar_summary_scalar: tag is empty");
    CHECK(oar_summary_close(w) == 0);
}

/* oar_fit's tb_dir: batch and epoch scalars with the expected steps. */
static void test_fit_tb(void) {
    oar_pool *p = oar_pool_push();
    oar_manual_seed(5);
    int64_t n = 64;
    oar_tensor *x = oar_randn(OAR_F32, 2, (int64_t[]){n, 4});
    oar_tensor *y = oar_cast(oar_gt(oar_sum(x, 1, (int64_t[]){1}, false), oar_scalar(0)), OAR_I64);
    oar_dataset *ds = oar_dataset_new(x, y);
    oar_pool_pop(p);
    oar_loader *ld = oar_loader_new(ds, &(oar_loader_options){.batch_size = 16});
    oar_module *net = oar_sequential_new(2, (oar_module *[]){oar_linear_new(4, 8, true),
                                                             oar_linear_new(8, 2, true)});
    oar_tensor *ps[8];
    int np = oar_module_parameters(net, ps, 8);
    oar_optimizer *opt = oar_sgd_new(np, ps, &(oar_sgd_options){.lr = 0.1});
    char d[400], logp[400];
    snprintf(d, sizeof d, "%s/fit_tb", dir);
    snprintf(logp, sizeof logp, "%s/fit.jsonl", dir);
    FILE *out = tmpfile();
    oar_fit_result r;
    CHECK(oar_fit(net, opt, ld, &(oar_fit_options){.epochs = 3, .accuracy = true, .eval_loader = ld,
                                                   .tb_dir = d, .log_path = logp, .out = out,
                                                   .progress = OAR_PROGRESS_LINES},
                  &r) == 0);
    char path[700];
    CHECK(find_event_file(d, path, sizeof path));
    /* the one line naming both files */
    fflush(out);
    rewind(out);
    char line[1024] = "";
    CHECK(fgets(line, sizeof line, out) != NULL);
    char want[1500];
    snprintf(want, sizeof want, "fit: logging epochs to %s, TensorBoard events to %s\n", logp, path);
    CHECK(!strcmp(line, want));
    if (strcmp(line, want)) fprintf(stderr, "got: %swant: %s", line, want);
    fclose(out);
    event ev[64];
    int ne = read_events(path, ev, 64);
    /* version + 3 epochs x (4 batches x 2 + loss acc val_loss val_acc lr samples_per_s) */
    CHECK(ne == 1 + 3 * (4 * 2 + 6));
    int batch_loss = 0, epoch_loss = 0;
    for (int i = 1; i < ne && i < 64; i++) {
        if (!strcmp(ev[i].tag, "batch/loss")) {
            CHECK(ev[i].step == ++batch_loss);
            CHECK(ev[i].value > 0);
        } else if (!strcmp(ev[i].tag, "epoch/loss")) {
            CHECK(ev[i].step == ++epoch_loss);
        } else if (!strcmp(ev[i].tag, "epoch/val_acc") && ev[i].step == 3) {
            CHECK(ev[i].value == (float)r.val_acc);
        } else if (!strcmp(ev[i].tag, "batch/lr")) {
            CHECK(ev[i].value == 0.1f);
        }
    }
    CHECK(batch_loss == 12 && epoch_loss == 3);
    /* an unwritable tb_dir fails before training, naming it */
    char bad[500];
    snprintf(bad, sizeof bad, "%s/plain/sub", dir);
    CHECK_STATUS_FAILS(oar_fit(net, opt, ld, &(oar_fit_options){.epochs = 1, .tb_dir = bad,
                                                                .progress = OAR_PROGRESS_NONE}, NULL),
                       "fit: TensorBoard: oar_summary_open: cannot create the folder");
    oar_optim_free(opt);
    oar_module_free(net);
    oar_loader_free(ld);
    oar_dataset_free(ds);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/oar_summary_test_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    RUN(test_crc32c_vector);
    RUN(test_scalars);
    RUN(test_errors);
    RUN(test_fit_tb);
    /* OAR_KEEP_EVENTS=1 keeps the files (scripts/check_tensorboard.py) */
    if (getenv("OAR_KEEP_EVENTS")) {
        printf("event files kept under %s\n", dir);
    } else {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    }
    return test_summary();
}
