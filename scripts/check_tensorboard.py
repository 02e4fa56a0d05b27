#!/usr/bin/env python3
"""Reads oar's TensorBoard event files with TensorBoard's own reader and
prints every scalar: a check of src/io/summary.c (oar_summary_*, oar_fit's
tb_dir) against the real consumer, outside `make test` (which does not need
TensorBoard; tests/io/test_summary.c checks the format with a reader of its
own).

Install TensorBoard in a virtual environment (it is not a dependency of oar):

    python3 -m venv /tmp/tbvenv
    /tmp/tbvenv/bin/pip install tensorboard

Then, on a folder holding event files (or one events.out.tfevents.* file):

    /tmp/tbvenv/bin/python scripts/check_tensorboard.py RUN_DIR

For example, keep the files tests/io/test_summary.c writes:

    cd tests && OAR_KEEP_EVENTS=1 ../build/test_summary    # prints the folder
    /tmp/tbvenv/bin/python ../scripts/check_tensorboard.py /tmp/oar_summary_test_XXXXXX/fit_tb

Prints "tag step value" per scalar (and the file's path first); exits 1
if the path holds no event file or TensorBoard finds no scalar in it."""
import glob
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def files(path):
    if os.path.isfile(path):
        return [path]
    return sorted(glob.glob(os.path.join(path, "events.out.tfevents.*")))


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    paths = files(argv[1])
    if not paths:
        print("check_tensorboard: no events.out.tfevents.* file in %s" % argv[1], file=sys.stderr)
        return 1
    total = 0
    for path in paths:
        # size_guidance 0: keep every event (the default samples scalars)
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        print("%s (file_version %s)" % (path, acc.file_version))
        for tag in acc.Tags()["scalars"]:
            for ev in acc.Scalars(tag):
                print("%s %d %.9g" % (tag, ev.step, ev.value))
                total += 1
    if not total:
        print("check_tensorboard: TensorBoard read no scalar", file=sys.stderr)
        return 1
    print("%d scalars" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
