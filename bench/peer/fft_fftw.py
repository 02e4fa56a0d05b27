# Peer for bench_fft_fftw (bench_fft on the FFTW engine): the same PyTorch
# figures as bench/peer/fft.py, so `bash bench/run.sh fft fft_fftw` sets
# both engines against torch in one run.
import os
import runpy

runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fft.py"))
