/* oar: a deep learning framework in C.
 *
 * Tensors of every common dtype with views, broadcasting and a wide op set;
 * eager execution with autograd to any order. Every call that can fail
 * returns NULL (or a non-zero status) and leaves a message for
 * oar_last_error(); an op given NULL returns NULL and keeps the first
 * message, so a chain is checked once at its end.
 *
 * Memory: results belong to the innermost pool (oar_pool_push/pop); retain
 * what must outlive it. Outside any pool, release what you get.
 *
 *     #include <oar/oar.h>
 *
 *     oar_pool *pool = oar_pool_push();
 *     int64_t shape[2] = {2, 3};
 *     oar_tensor *x = oar_randn(OAR_F32, 2, shape);
 *     oar_tensor *y = oar_sum(oar_relu(oar_mul_scalar(x, 2.0)), 0, NULL, false);
 *     if (!y) fprintf(stderr, "oar: %s\n", oar_last_error());
 *     else printf("%f\n", oar_tensor_item(y));
 *     oar_pool_pop(pool);               // frees x, the temporaries and y
 */
#ifndef OAR_OAR_H
#define OAR_OAR_H

#include <oar/tensor.h>
#include <oar/ops.h>
#include <oar/autograd.h>
#include <oar/device.h>
#include <oar/nn.h>
#include <oar/generate.h> /* KV cache, GPT, sampling, generation */
#include <oar/fit.h> /* nnapi branch: the training loop */
#include <oar/optim.h>
#include <oar/data.h>
#include <oar/io.h>
#include <oar/summary.h> /* TensorBoard event files */
#include <oar/dist.h>
#include <oar/profiler.h>
#include <oar/graph.h> /* static graphs, saved models */
#include <oar/infer.h> /* predictor, .npy */
#include <oar/fft.h>   /* fft branch */
#include <oar/complex.h> /* fft branch */
#include <oar/lbfgs.h>   /* fft branch */
#include <oar/linalg.h>  /* solve, inv, det, slogdet, cholesky, eigh (LAPACKE) */
#include <oar/onnx.h>    /* ONNX import and export (failing, saying so, in a build without it) */
#include <oar/custom.h>  /* custom ops and custom autograd functions */
#include <oar/amp.h>     /* autocast, loss scaling, O2 master weights */
#include <oar/plan.h>    /* automatic parallel strategy: cost model and planner */
#include <oar/quant.h>   /* post-training quantization: calibration observers */

#endif
