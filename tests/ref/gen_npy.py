"""Writes the .npy fixtures read by tests/infer/test_npy.c (NumPy's own
writer, so the reader is checked against an independent implementation).
Run from tests/: python3 ref/gen_npy.py"""
import numpy as np

a = np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 8.0 - 1.0
np.save("infer/fixture_f64_fortran.npy", np.asfortranarray(a))  # values: i / 8 - 1 in C order
np.save("infer/fixture_i32.npy", np.array([[1, -2, 3], [40000, -5, 6]], dtype=np.int32))
np.save("infer/fixture_bool0d.npy", np.array(True))
np.save("infer/fixture_f32_big_endian.npy", np.arange(3, dtype=">f4"))
