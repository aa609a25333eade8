/*
 * omp_compat.h: <omp.h> in a build with OpenMP; without it (MOE_HAVE_OPENMP=0: Apple's clang
 * without libomp, or `make HAVE_OPENMP=0`), the calls this code makes, answered as the one
 * thread that then runs every loop. The #pragma omp lines are ignored by such a build, and
 * these stand-ins keep it from needing an OpenMP runtime to link (or <omp.h> to compile).
 */
#ifndef MOE_OMP_COMPAT_H
#define MOE_OMP_COMPAT_H

#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_max_threads(void) {
    return 1;
}
static inline int omp_get_thread_num(void) {
    return 0;
}
static inline void omp_set_num_threads(int n) {
    (void)n;
}
#endif

#endif
