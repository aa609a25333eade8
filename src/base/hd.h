/*
 * hd.h: MOE_HD marks a function both the host and a CUDA kernel may call.
 *
 * The CUDA backend's kernels (backend/cuda/: cuda_nn.cu, cuda_moe.cu, cuda_plans.cu) do their
 * arithmetic in small bodies of plain C (kernels_nn.h, kernels_moe.h, kernels_route.h): one
 * element, one lane's share of a row, one step of a reduction. nvcc compiles them for the
 * device; gcc compiles the same text for the host, where the tests (tests/test_kernels_*.c) run
 * them in loops that walk the kernel's grid in the kernel's order and compare the result with
 * the reference ops. On a machine without a GPU that is how a kernel's math is checked. A row
 * the reference computes the same way lives once, in the reference's own folder (moe/router_row.h:
 * a token's top-k and gate weights; nn/attention_row.h: an attention row's softmax), and both
 * sides include it: so the mark lives here, in
 * base/, below every folder of src/README.md's map.
 */
#ifndef MOE_BASE_HD_H
#define MOE_BASE_HD_H

#ifdef __CUDACC__
#define MOE_HD __host__ __device__ __forceinline__
#else
#define MOE_HD static inline
#endif

/* The lanes of a warp, and of the host's emulation of one. */
#define MOE_WARP 32

#endif
