#pragma once
// IFUSIM_HD marks functions and functors that run on the host and on CUDA devices. The CPU build
// (g++, Thrust's OpenMP system) needs no CUDA headers, so the macro is empty there.
#if defined(__CUDACC__)
#define IFUSIM_HD __host__ __device__
#else
#define IFUSIM_HD
#endif
