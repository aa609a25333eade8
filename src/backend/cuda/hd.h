/*
 * hd.h: MOE_HD marks a function both the host and a CUDA kernel may call.
 *
 * The CUDA backend's kernels (cuda_nn.cu, cuda_moe.cu, cuda_plans.cu) do their arithmetic in
 * small bodies of plain C (kernels_nn.h, kernels_moe.h, kernels_route.h): one element, one
 * lane's share of a row, one step of a reduction. nvcc compiles them for the device; gcc compiles the same text
 * for the host, where the tests (tests/test_kernels_*.c) run them in loops that walk the
 * kernel's grid in the kernel's order and compare the result with the reference ops. On a
 * machine without a GPU that is how a kernel's math is checked.
 */
#ifndef MOE_BACKEND_HD_H
#define MOE_BACKEND_HD_H

#ifdef __CUDACC__
#define MOE_HD __host__ __device__ __forceinline__
#else
#define MOE_HD static inline
#endif

/* The lanes of a warp, and of the host's emulation of one. */
#define MOE_WARP 32

#endif
