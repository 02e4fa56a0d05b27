/* What the files of the oar command line (tools/) share: the exit
 * statuses, the two message forms, and the commands that live outside
 * tools/oar.c (info on .safetensors and .npy files in tools/info.c, plot in
 * tools/plot.c). docs/cli.md describes the commands. */
#ifndef OAR_CLI_H
#define OAR_CLI_H

#include <stdbool.h>

/* Exit statuses (docs/cli.md, `oar --help`). */
enum {
    CLI_OK = 0,    /* done */
    CLI_FAIL = 1,  /* a runtime failure: a file that cannot be read, written or parsed, a model that
                      fails to load or run */
    CLI_USAGE = 2, /* the command line is wrong: unknown command or option, a missing or malformed
                      argument, a file of a kind the command does not take */
};

/* "oar CMD: ARG: REASON" and "see 'oar CMD --help'" on stderr; returns
 * CLI_USAGE. cmd NULL: the command itself is wrong ("oar: ARG: REASON",
 * "see 'oar --help'"). */
int cli_usage_error(const char *cmd, const char *arg, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "oar CMD: MESSAGE" on stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "oar CMD: note: MESSAGE" on stderr (something skipped, nothing failed). */
void cli_note(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- info (tools/info.c) ---------------------------------------------- */

typedef enum cli_file_kind {
    CLI_FILE_MISSING,     /* stat failed: errno says why */
    CLI_FILE_FOLDER,      /* a folder: a saved model */
    CLI_FILE_ONNX,        /* a file named *.onnx */
    CLI_FILE_SAFETENSORS, /* named *.safetensors, or an 8-byte length then '{' */
    CLI_FILE_NPY,         /* NumPy's magic "\x93NUMPY", or named *.npy */
    CLI_FILE_UNKNOWN,     /* none of these */
} cli_file_kind;

/* The kind of file at path: by its first bytes, then by its name. */
cli_file_kind cli_file_kind_of(const char *path);
bool cli_ends_with(const char *s, const char *suffix);

/* `oar info` on a .safetensors file: metadata, each tensor's name, dtype,
 * shape and bytes, the totals. Reads the header only. An exit status. */
int cli_info_safetensors(const char *path);
/* `oar info` on a .npy file: dtype, shape, first values, statistics. */
int cli_info_npy(const char *path);

/* ---- plot (tools/plot.c) ---------------------------------------------- */

/* `oar plot`: reads the oar_fit logs (JSON lines), renders the curves of
 * the metrics named (n_metrics 0: every metric but lr, samples_per_s and
 * time_s) and writes them to out: an .svg file, an .html page embedding
 * the SVG, or (out NULL) the SVG to stdout. An exit status. */
int cli_plot(int n_logs, char **logs, const char *out, int n_metrics, char **metrics);

#endif
