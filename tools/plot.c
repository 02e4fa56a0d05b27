/* `oar plot`: training curves from oar_fit's logs, as a self-contained SVG
 * or an HTML page embedding it, for those without TensorBoard.
 *
 * A log is what oar_fit writes when oar_fit_options.log_path is set
 * (include/oar/fit.h): one JSON object a line, one line an epoch,
 *     {"epoch": 1, "loss": 0.52, "acc": 0.81, "val_loss": 0.49, ..., "lr": 0.01,
 *      "samples_per_s": 91234, "time_s": 0.61, "best": true, "stop": false}
 * with metrics that do not apply left out (NaN among them) and infinities
 * written 1e999. Each number but the epoch is a metric; true/false and
 * strings are not drawn. Python's NaN, Infinity and -Infinity are read too.
 *
 * The SVG has a legend (one colour a log, named by its file; a dashed line
 * for val_ metrics) and one chart per metric family (loss with val_loss,
 * acc with val_acc, ...): a frame, ticks and labels on both axes, a
 * polyline and point markers per log and metric. */
#include "cli.h"

#include <oar/tensor.h> /* oar_version */

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct series {
    char *key;
    int n, cap;
    double *x, *y;
    int skipped;          /* non-finite values left out */
    double skipped_at[3]; /* the first epochs that had one */
} series;

typedef struct run {
    const char *path;
    series *s;
    int ns, cap;
    int epochs;
    int unfinished; /* the number of a cut last line, skipped; 0: none */
} run;

static void run_free(run *r) {
    for (int i = 0; i < r->ns; i++) {
        free(r->s[i].key);
        free(r->s[i].x);
        free(r->s[i].y);
    }
    free(r->s);
}

/* The series of key in r, made if absent; NULL when out of memory. */
static series *series_of(run *r, const char *key) {
    for (int i = 0; i < r->ns; i++)
        if (!strcmp(r->s[i].key, key)) return &r->s[i];
    if (r->ns == r->cap) {
        int cap = r->cap ? 2 * r->cap : 8;
        series *s = realloc(r->s, (size_t)cap * sizeof *s);
        if (!s) return NULL;
        r->s = s;
        r->cap = cap;
    }
    series *s = &r->s[r->ns];
    *s = (series){.key = strdup(key)};
    if (!s->key) return NULL;
    r->ns++;
    return s;
}

static bool series_add(series *s, double x, double y) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (nx) s->x = nx;
        double *ny = nx ? realloc(s->y, (size_t)cap * sizeof *ny) : NULL;
        if (!ny) return false;
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n++] = y;
    return true;
}

static const series *find_series(const run *r, const char *key) {
    for (int i = 0; i < r->ns; i++)
        if (!strcmp(r->s[i].key, key)) return &r->s[i];
    return NULL;
}

/* ---- reading a log ---------------------------------------------------------- */

/* Python's json writes NaN, Infinity and -Infinity, which JSON lacks:
 * outside strings they become null (a NaN: skipped), 1e999 and -1e999
 * (infinities, as oar_fit writes them). A new string (n bytes in *out_n). */
static char *unpython(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(n + n / 3 + 8), *w = o;
    if (!o) return NULL;
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        if (str) {
            if (s[i] == '\\' && i + 1 < n) *w++ = s[i++];
            else if (s[i] == '"') str = false;
            *w++ = s[i];
        } else if (s[i] == '"') {
            str = true;
            *w++ = s[i];
        } else if (n - i >= 3 && !strncmp(s + i, "NaN", 3)) {
            memcpy(w, "null", 4);
            w += 4;
            i += 2;
        } else if (n - i >= 8 && !strncmp(s + i, "Infinity", 8)) {
            memcpy(w, "1e999", 5);
            w += 5;
            i += 7;
        } else {
            *w++ = s[i];
        }
    }
    *w = 0;
    *out_n = (size_t)(w - o);
    return o;
}

/* Up to 40 bytes of s from at, printable (for a message). */
static const char *snippet(const char *s, size_t n, size_t at, char *buf, size_t size) {
    size_t k = 0;
    if (at > n) at = n;
    for (size_t i = at; i < n && k + 4 < size && i - at < 40; i++)
        buf[k++] = isprint((unsigned char)s[i]) ? s[i] : '?';
    if (n - at > 40 && k + 4 < size) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = 0;
    return buf;
}

static int read_log(run *r) {
    const char *path = r->path;
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail("plot", "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (!fstat(fileno(f), &st) && S_ISDIR(st.st_mode)) {
        fclose(f);
        return cli_fail("plot", "%s: is a folder; expected a JSON-lines log written by oar_fit (log_path)", path);
    }
    char *line = NULL, buf[64];
    size_t cap = 0;
    ssize_t got;
    int lineno = 0, rc = CLI_OK;
    double last = -INFINITY;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)got, b = 0;
        bool complete = len && line[len - 1] == '\n';
        while (len && isspace((unsigned char)line[len - 1])) len--;
        while (b < len && isspace((unsigned char)line[b])) b++;
        if (b == len) continue;
        size_t m = 0;
        char *j = memchr(line + b, 0, len - b) ? NULL : unpython(line + b, len - b, &m);
        const char *end = NULL;
        cJSON *o = j ? cJSON_ParseWithLengthOpts(j, m, &end, false) : NULL;
        if (o && end != j + m) { /* a value, then more */
            cJSON_Delete(o);
            o = NULL;
        }
        if (!o) {
            size_t at = j && end ? (size_t)(end - j) : 0;
            if (!complete) /* the last line, cut: the run may still be writing it */
                r->unfinished = lineno;
            else if (!j && memchr(line + b, 0, len - b))
                rc = cli_fail("plot", "%s:%d: not a JSON-lines log (a NUL byte; a binary file?)", path, lineno);
            else if (!j) rc = cli_fail("plot", "out of memory");
            else
                rc = cli_fail("plot", "%s:%d: not valid JSON at column %zu: '%s'", path, lineno, at + 1,
                              snippet(j, m, at, buf, sizeof buf));
            free(j);
            continue;
        }
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "epoch"), *c;
        if (!cJSON_IsObject(o))
            rc = cli_fail("plot", "%s:%d: expected a JSON object ({\"epoch\": 1, \"loss\": ...}), got '%s'", path,
                          lineno, snippet(j, m, 0, buf, sizeof buf));
        else if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
            rc = cli_fail("plot", "%s:%d: no \"epoch\" number (each line of an oar_fit log is one epoch: "
                                  "{\"epoch\": 1, \"loss\": ...})", path, lineno);
        else if (e->valuedouble <= last)
            rc = cli_fail("plot", "%s:%d: epoch %g after epoch %g (one run per log: split the file)", path, lineno,
                          e->valuedouble, last);
        else {
            last = e->valuedouble;
            r->epochs++;
            cJSON_ArrayForEach(c, o) {
                if (c == e || !(cJSON_IsNumber(c) || cJSON_IsNull(c))) continue; /* true/false, strings: not drawn */
                series *s = series_of(r, c->string);
                if (!s) rc = cli_fail("plot", "out of memory");
                else if (cJSON_IsNumber(c) && isfinite(c->valuedouble)) {
                    if (!series_add(s, last, c->valuedouble)) rc = cli_fail("plot", "out of memory");
                } else if (s->skipped++ < 3) {
                    s->skipped_at[s->skipped - 1] = last;
                }
                if (rc) break;
            }
        }
        cJSON_Delete(o);
        free(j);
    }
    if (!rc && ferror(f)) rc = cli_fail("plot", "%s: cannot read: %s", path, strerror(errno));
    if (!rc && !r->epochs)
        rc = cli_fail("plot", "%s: no epochs in the log (empty; oar_fit writes one line per epoch)", path);
    free(line);
    fclose(f);
    return rc;
}

/* What reading r skipped, of the metrics drawn: notes on stderr. */
static void run_notes(const run *r, const char *const *keys, int nk) {
    if (r->unfinished) cli_note("plot", "%s:%d: skipped an unfinished last line", r->path, r->unfinished);
    for (int k = 0; k < nk; k++) {
        const series *s = find_series(r, keys[k]);
        if (!s || !s->skipped) continue;
        char at[96] = "";
        for (int i = 0; i < s->skipped && i < 3; i++)
            snprintf(at + strlen(at), sizeof at - strlen(at), "%s%g", i ? ", " : "", s->skipped_at[i]);
        cli_note("plot", "%s: skipped %d non-finite value%s of %s (epoch%s %s%s)", r->path, s->skipped,
                 s->skipped == 1 ? "" : "s", s->key, s->skipped == 1 ? "" : "s", at, s->skipped > 3 ? ", ..." : "");
    }
}

/* ---- drawing -------------------------------------------------------------------- */

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define COLOR(i) palette[(i) % (int)(sizeof palette / sizeof *palette)]

enum { WIDTH = 760, PANEL_H = 300, LEFT = 78, RIGHT = 24, TOP = 36, BOTTOM = 48 };

/* s as XML text: & < > " ' escaped, control characters and bytes that are
 * not UTF-8 as '?'. */
static void xml_text(FILE *o, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int extra = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 : (*p & 0xf8) == 0xf0 ? 3 : -1;
        for (int k = 1; k <= extra; k++)
            if ((p[k] & 0xc0) != 0x80) extra = -1;
        if (extra < 0 || (*p < 0x20 && *p != '\t') || *p == 0x7f) fputc('?', o);
        else if (extra > 0) {
            fwrite(p, 1, (size_t)extra + 1, o);
            p += extra;
        } else if (*p == '&') fputs("&amp;", o);
        else if (*p == '<') fputs("&lt;", o);
        else if (*p == '>') fputs("&gt;", o);
        else if (*p == '"') fputs("&quot;", o);
        else if (*p == '\'') fputs("&apos;", o);
        else fputc(*p, o);
    }
}

static bool is_val(const char *key) { return !strncmp(key, "val_", 4); }
static const char *family(const char *key) { return is_val(key) ? key + 4 : key; }

/* A step of 1, 2 or 5 times a power of ten giving about `target` ticks over span. */
static double nice_step(double span, int target) {
    double raw = span / target, mag = pow(10, floor(log10(raw))), r = raw / mag;
    return (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10) * mag;
}

static void tick_label(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (fmax(fabs(v), step) >= 1e6 || step < 1e-4) snprintf(buf, n, "%.3g", v);
    else snprintf(buf, n, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9), v);
}

/* An axis over [lo, hi] (data): its ends and step, the ends on ticks. */
static void axis(double lo, double hi, int target, bool whole, double *a0, double *a1, double *step) {
    if (hi - lo <= 1e-12 * fmax(1, fabs(hi))) {
        double d = whole ? 1 : fabs(hi) > 0 ? 0.05 * fabs(hi) : 0.5;
        lo -= d;
        hi += d;
    }
    *step = nice_step(hi - lo, target);
    if (whole && *step < 1) *step = 1;
    *a0 = floor(lo / *step + 1e-9) * *step;
    *a1 = ceil(hi / *step - 1e-9) * *step;
}

typedef struct panel {
    const char *family;
    const char *keys[8];
    int nk;
} panel;

static void draw_panel(FILE *o, const run *runs, int nr, const panel *p, int y) {
    int pw = WIDTH - LEFT - RIGHT, ph = PANEL_H - TOP - BOTTOM;
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    bool whole = true;
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < p->nk; k++) {
            const series *s = find_series(&runs[r], p->keys[k]);
            for (int i = 0; s && i < s->n; i++) {
                xlo = fmin(xlo, s->x[i]);
                xhi = fmax(xhi, s->x[i]);
                ylo = fmin(ylo, s->y[i]);
                yhi = fmax(yhi, s->y[i]);
                whole &= s->x[i] == floor(s->x[i]);
            }
        }
    fprintf(o, "<g class=\"panel\" transform=\"translate(0,%d)\">\n<text x=\"%d\" y=\"22\" font-size=\"15\" "
               "font-weight=\"bold\">", y, LEFT);
    for (int k = 0; k < p->nk; k++) {
        if (k) fputs(", ", o);
        xml_text(o, p->keys[k]);
    }
    fprintf(o, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", LEFT,
            TOP, pw, ph);
    fprintf(o, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">epoch</text>\n", LEFT + pw / 2, TOP + ph + 38);
    fprintf(o, "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">", TOP + ph / 2);
    xml_text(o, p->family);
    fputs("</text>\n", o);
    if (xlo > xhi) {
        fprintf(o, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#888\">no finite values</text>\n</g>\n",
                LEFT + pw / 2, TOP + ph / 2);
        return;
    }
    double x0, x1, xs, y0, y1, ys;
    char lab[64];
    axis(xlo, xhi, 8, whole, &x0, &x1, &xs);
    axis(ylo, yhi, 5, false, &y0, &y1, &ys);
#define PX(v) (LEFT + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (TOP + ph - ((v) - y0) / (y1 - y0) * ph)
    fputs("<g class=\"axes\" font-size=\"11\" fill=\"#333\">\n", o);
    for (int k = 0, nt = (int)lround((x1 - x0) / xs); k <= nt; k++) {
        double v = x0 + k * xs;
        tick_label(lab, sizeof lab, v, xs);
        fprintf(o, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                PX(v), TOP + ph, PX(v), TOP + ph + 5, PX(v), TOP + ph + 18, lab);
    }
    for (int k = 0, nt = (int)lround((y1 - y0) / ys); k <= nt; k++) {
        double v = y0 + k * ys;
        tick_label(lab, sizeof lab, v, ys);
        fprintf(o, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                LEFT, PY(v), LEFT + pw, PY(v), LEFT - 6, PY(v) + 4, lab);
    }
    fputs("</g>\n", o);
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < p->nk; k++) {
            const series *s = find_series(&runs[r], p->keys[k]);
            if (!s || !s->n) continue;
            fprintf(o, "<polyline class=\"run%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", r,
                    COLOR(r), is_val(s->key) ? " stroke-dasharray=\"6 4\"" : "");
            for (int i = 0; i < s->n; i++) fprintf(o, "%s%.1f,%.1f", i ? " " : "", PX(s->x[i]), PY(s->y[i]));
            fputs("\"><title>", o);
            xml_text(o, runs[r].path);
            fputs(": ", o);
            xml_text(o, s->key);
            fputs("</title></polyline>\n", o);
            if (s->n <= 60) {
                fprintf(o, "<g fill=\"%s\">", COLOR(r));
                for (int i = 0; i < s->n; i++)
                    fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\"/>", PX(s->x[i]), PY(s->y[i]));
                fputs("</g>\n", o);
            }
        }
#undef PX
#undef PY
    fputs("</g>\n", o);
}

static void draw_svg(FILE *o, const run *runs, int nr, const panel *p, int np) {
    bool val = false;
    for (int i = 0; i < np; i++)
        for (int k = 0; k < p[i].nk; k++) val |= is_val(p[i].keys[k]);
    int legend = 14 + 20 * nr + (val ? 20 : 0), height = legend + np * PANEL_H;
    fprintf(o, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            WIDTH, height, WIDTH, height, WIDTH, height);
    fputs("<g class=\"legend\" font-size=\"13\">\n", o);
    for (int r = 0; r < nr; r++) {
        int y = 20 + 20 * r;
        fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"%d\" "
                   "y=\"%d\">", LEFT, y, LEFT + 28, y, COLOR(r), LEFT + 36, y + 4);
        xml_text(o, runs[r].path);
        fputs("</text>\n", o);
    }
    if (val) {
        int y = 20 + 20 * nr;
        fprintf(o, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\" stroke-width=\"2\"/><text x=\"%d\" "
                   "y=\"%d\">training</text><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\" "
                   "stroke-width=\"2\" stroke-dasharray=\"6 4\"/><text x=\"%d\" y=\"%d\">validation (val_)</text>\n",
                LEFT, y, LEFT + 28, y, LEFT + 36, y + 4, LEFT + 130, y, LEFT + 158, y, LEFT + 166, y + 4);
    }
    fputs("</g>\n", o);
    for (int i = 0; i < np; i++) draw_panel(o, runs, nr, &p[i], legend + i * PANEL_H);
    fputs("</svg>\n", o);
}

/* 1: higher is better, -1: lower, 0: neither (lr, time). */
static int better(const char *key) {
    const char *f = family(key);
    if (strstr(f, "acc") || !strncmp(f, "top", 3) || !strcmp(f, "samples_per_s")) return 1;
    if (!strcmp(f, "lr") || !strcmp(f, "time_s")) return 0;
    return -1;
}

static void draw_html(FILE *o, const run *runs, int nr, const panel *p, int np) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>oar plot: ", o);
    for (int r = 0; r < nr; r++) {
        if (r) fputs(", ", o);
        xml_text(o, runs[r].path);
    }
    fputs("</title>\n<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
          "th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}"
          "th:first-child,td:first-child{text-align:left}</style>\n</head>\n<body>\n<h1>Training curves</h1>\n",
          o);
    draw_svg(o, runs, nr, p, np);
    fputs("<h2>Summary</h2>\n<p>The last value of each metric, and the best with its epoch.</p>\n<table>\n"
          "<tr><th>log</th><th>epochs</th>",
          o);
    for (int i = 0; i < np; i++)
        for (int k = 0; k < p[i].nk; k++) {
            fputs("<th>", o);
            xml_text(o, p[i].keys[k]);
            fputs("</th>", o);
        }
    fputs("</tr>\n", o);
    for (int r = 0; r < nr; r++) {
        fprintf(o, "<tr><td style=\"color:%s\">", COLOR(r));
        xml_text(o, runs[r].path);
        fprintf(o, "</td><td>%d</td>", runs[r].epochs);
        for (int i = 0; i < np; i++)
            for (int k = 0; k < p[i].nk; k++) {
                const series *s = find_series(&runs[r], p[i].keys[k]);
                if (!s || !s->n) {
                    fputs("<td>-</td>", o);
                    continue;
                }
                int b = 0, dir = better(s->key);
                for (int j = 1; j < s->n; j++)
                    if (dir * (s->y[j] - s->y[b]) > 0) b = j;
                fprintf(o, "<td>%.4g", s->y[s->n - 1]);
                if (dir) fprintf(o, " (best %.4g, epoch %g)", s->y[b], s->x[b]);
                fputs("</td>", o);
            }
        fputs("</tr>\n", o);
    }
    fprintf(o, "</table>\n<p>Drawn by oar plot (oar %s).</p>\n</body>\n</html>\n", oar_version());
}

/* ---- the command ------------------------------------------------------------------- */

static bool is_default_metric(const char *key) {
    return strcmp(key, "lr") && strcmp(key, "samples_per_s") && strcmp(key, "time_s");
}

#define MAX_KEYS 256
#define MAX_PANELS 64

int cli_plot(int n_logs, char **logs, const char *out, int n_metrics, char **metrics) {
    run *runs = calloc((size_t)n_logs, sizeof *runs);
    const char *keys[MAX_KEYS], *chosen[MAX_KEYS];
    int nk = 0, nc = 0, np = 0, rc = CLI_OK;
    panel *panels = calloc(MAX_PANELS, sizeof *panels);
    if (!runs || !panels) {
        free(runs);
        free(panels);
        return cli_fail("plot", "out of memory");
    }
    for (int r = 0; r < n_logs && !rc; r++) {
        runs[r].path = logs[r];
        rc = read_log(&runs[r]);
    }
    /* every key of the logs, in the order met */
    for (int r = 0; r < n_logs && !rc; r++)
        for (int i = 0; i < runs[r].ns && nk < MAX_KEYS; i++) {
            int k = 0;
            while (k < nk && strcmp(keys[k], runs[r].s[i].key)) k++;
            if (k == nk) keys[nk++] = runs[r].s[i].key;
        }
    char all[512] = "";
    for (int k = 0; k < nk && strlen(all) < 440; k++)
        snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", k ? ", " : "", keys[k]);
    for (int m = 0; m < n_metrics && !rc; m++) {
        int k = 0, c = 0;
        while (k < nk && strcmp(keys[k], metrics[m])) k++;
        while (c < nc && strcmp(chosen[c], metrics[m])) c++;
        if (k == nk)
            rc = cli_usage_error("plot", "--metric", "no log has '%s'; %s %s", metrics[m],
                                 n_logs == 1 ? "it has" : "they have", nk ? all : "no metrics");
        else if (c == nc) chosen[nc++] = keys[k];
    }
    for (int k = 0; k < nk && !rc && !n_metrics; k++)
        if (is_default_metric(keys[k])) chosen[nc++] = keys[k];
    if (!rc && !nc)
        rc = cli_fail("plot", "%s%s: no metrics to draw (%s%s); name one with --metric", logs[0],
                      n_logs > 1 ? " and the others" : "", nk ? "only " : "no numbers but the epoch", nk ? all : "");
    for (int r = 0; r < n_logs && !rc; r++) {
        run_notes(&runs[r], chosen, nc);
        for (int c = 0; c < nc && n_metrics; c++)
            if (!find_series(&runs[r], chosen[c])) cli_note("plot", "%s has no %s", runs[r].path, chosen[c]);
    }
    /* one chart per family, val_X with X */
    for (int c = 0; c < nc && !rc; c++) {
        int i = 0;
        while (i < np && (strcmp(panels[i].family, family(chosen[c])) || panels[i].nk == 8)) i++;
        if (i == MAX_PANELS) {
            rc = cli_usage_error("plot", "--metric", "more than %d charts", MAX_PANELS);
            break;
        }
        if (i == np) panels[np++].family = family(chosen[c]);
        panels[i].keys[panels[i].nk++] = chosen[c];
    }
    if (!rc) {
        bool html = out && !cli_ends_with(out, ".svg");
        char *tmp = NULL;
        FILE *o = stdout;
        if (out) {
            size_t n = strlen(out) + 32;
            tmp = malloc(n);
            if (tmp) snprintf(tmp, n, "%s.tmp%ld", out, (long)getpid());
            o = tmp ? fopen(tmp, "w") : NULL;
        }
        if (!o) {
            rc = cli_fail("plot", "%s: cannot write: %s", out, tmp ? strerror(errno) : "out of memory");
        } else {
            if (html) draw_html(o, runs, n_logs, panels, np);
            else draw_svg(o, runs, n_logs, panels, np);
            int err = fflush(o) || ferror(o) ? errno : 0;
            if (out && fclose(o) && !err) err = errno ? errno : EIO;
            if (!err && out && rename(tmp, out)) err = errno;
            if (err) {
                rc = cli_fail("plot", "%s: cannot write: %s", out ? out : "the standard output", strerror(err));
                if (out) unlink(tmp);
            } else if (out) {
                printf("wrote %s (%d log%s, %d chart%s)\n", out, n_logs, n_logs == 1 ? "" : "s", np,
                       np == 1 ? "" : "s");
            }
        }
        free(tmp);
    }
    for (int r = 0; r < n_logs; r++) run_free(&runs[r]);
    free(runs);
    free(panels);
    return rc;
}
