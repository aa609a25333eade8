/*
 * A stand-in for macOS's <Accelerate/Accelerate.h> (tests/test_build.sh): the CBLAS part the
 * framework declares, in its form (enums, int sizes; ACCELERATE_NEW_LAPACK's __LAPACK_int is
 * int without ILP64), and nothing of OpenBLAS's own (openblas_set_num_threads,
 * openblas_get_corename, ...). The engine compiled against it with MOE_BLAS_OPENBLAS=0 shows
 * that the Accelerate build calls no OpenBLAS-only function. Declarations only: nothing is
 * linked or run.
 */
#ifndef MOE_TEST_ACCELERATE_STUB_H
#define MOE_TEST_ACCELERATE_STUB_H

#ifndef ACCELERATE_NEW_LAPACK
#error "the Makefile's Accelerate build defines ACCELERATE_NEW_LAPACK"
#endif
typedef int __LAPACK_int;

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
enum CBLAS_UPLO { CblasUpper = 121, CblasLower = 122 };
typedef enum CBLAS_ORDER CBLAS_ORDER;
typedef enum CBLAS_TRANSPOSE CBLAS_TRANSPOSE;

void cblas_sgemm(const enum CBLAS_ORDER ORDER, const enum CBLAS_TRANSPOSE TRANSA,
                 const enum CBLAS_TRANSPOSE TRANSB, const __LAPACK_int M, const __LAPACK_int N,
                 const __LAPACK_int K, const float ALPHA, const float *A, const __LAPACK_int LDA,
                 const float *B, const __LAPACK_int LDB, const float BETA, float *C,
                 const __LAPACK_int LDC);
void cblas_sgemv(const enum CBLAS_ORDER ORDER, const enum CBLAS_TRANSPOSE TRANSA,
                 const __LAPACK_int M, const __LAPACK_int N, const float ALPHA, const float *A,
                 const __LAPACK_int LDA, const float *X, const __LAPACK_int INCX, const float BETA,
                 float *Y, const __LAPACK_int INCY);
void cblas_saxpy(const __LAPACK_int N, const float ALPHA, const float *X, const __LAPACK_int INCX,
                 float *Y, const __LAPACK_int INCY);
float cblas_sdot(const __LAPACK_int N, const float *X, const __LAPACK_int INCX, const float *Y,
                 const __LAPACK_int INCY);

#endif
