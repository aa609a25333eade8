/*
 * blas.h: the CBLAS declarations of the BLAS the build links (the Makefile's probe sets
 * MOE_BLAS_OPENBLAS): OpenBLAS's <cblas.h>, or on macOS without OpenBLAS, Apple's Accelerate.
 * Only cblas_* calls are common to both; a call that is OpenBLAS's own (its thread count, its
 * kernel set) is written under #if MOE_BLAS_OPENBLAS.
 *
 * Include it last: through <complex.h> it may define the macro I, so no declaration after it
 * may use that name.
 */
#ifndef MOE_BLAS_H
#define MOE_BLAS_H

#ifndef MOE_BLAS_OPENBLAS
#define MOE_BLAS_OPENBLAS 1
#endif

#if MOE_BLAS_OPENBLAS
#include <cblas.h>
#else
#include <Accelerate/Accelerate.h>
#endif

#endif
