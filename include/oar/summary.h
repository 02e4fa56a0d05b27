/* TensorBoard event files: scalars a training loop logs, for
 * `tensorboard --logdir DIR` (oar_fit writes them with its tb_dir option;
 * these functions are for loops of your own).
 *
 *     oar_summary_writer *w = oar_summary_open("runs/exp1");
 *     if (!w) fprintf(stderr, "%s\n", oar_last_error());
 *     for (int64_t step = 1; ...; step++) {
 *         ...
 *         oar_summary_scalar(w, "train/loss", step, loss);
 *     }
 *     oar_summary_close(w);
 *
 * The file, <dir>/events.out.tfevents.<unix time>.<host>.<pid> (".<k>"
 * appended if that name is taken), is TensorFlow's event format:
 * TFRecord framing (uint64 length, masked crc32c of the length, the data,
 * masked crc32c of the data; little-endian) around serialized Event
 * protobufs. The first record carries file_version "brain.Event:2"; each
 * scalar is one Event {wall_time, step, summary {value {tag,
 * simple_value}}}. The value is stored as a float (TensorBoard's scalar
 * type). Records are buffered: oar_summary_flush makes them visible to a
 * running TensorBoard (oar_fit flushes after every epoch). The file is
 * appended to as training runs, so unlike checkpoints it is not written
 * through a temporary name: after a crash it holds every record flushed.
 *
 * A writer is not thread-safe: use it from one thread at a time. */
#ifndef OAR_SUMMARY_H
#define OAR_SUMMARY_H

#include <oar/tensor.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct oar_summary_writer oar_summary_writer;

/* Creates dir (and its parents) if needed and a new event file in it.
 * NULL with an error (OAR_ERR_INVALID for a NULL or empty dir, OAR_ERR_IO
 * naming the folder or file for one that cannot be created). */
OAR_API oar_summary_writer *oar_summary_open(const char *dir);
/* The event file's path; borrowed, valid until the writer is closed. */
OAR_API const char *oar_summary_path(const oar_summary_writer *w);
/* Appends the scalar `value` for `tag` (non-empty; TensorBoard groups tags
 * by the part before the first '/') at `step`, stamped with the current
 * time. 0, or an error status (a NULL writer or tag, a failed write; after
 * a failed write every later call fails too). */
OAR_API int oar_summary_scalar(oar_summary_writer *w, const char *tag, int64_t step, double value);
/* Writes the buffered records to the file. 0 or OAR_ERR_IO. */
OAR_API int oar_summary_flush(oar_summary_writer *w);
/* Flushes, closes the file and frees w (NULL: nothing, 0). 0, or the
 * status of a write that failed (w is freed all the same). */
OAR_API int oar_summary_close(oar_summary_writer *w);

#ifdef __cplusplus
}
#endif
#endif
