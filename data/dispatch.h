#pragma once
// Calls a stage's backend entry point for the device's backend: ifusim::cpu::fn or
// ifusim::cuda::fn, both compiled from the stage's one kernel source.
#include <stdexcept>

#include "data/device.h"

#ifdef IFUSIM_HAVE_CUDA
#define IFUSIM_DISPATCH(device, fn, ...) \
  ((device).is_cuda() ? ::ifusim::cuda::fn(__VA_ARGS__) : ::ifusim::cpu::fn(__VA_ARGS__))
#else
#define IFUSIM_DISPATCH(device, fn, ...)                                                         \
  ((device).is_cuda() ? throw std::runtime_error("this ifusim was built without CUDA (" #fn ")") \
                      : ::ifusim::cpu::fn(__VA_ARGS__))
#endif

// Declares a stage's entry points once for both backends.
#define IFUSIM_DECLARE_BACKENDS(DECLS) \
  namespace ifusim::cpu {              \
  DECLS                                \
  }                                    \
  namespace ifusim::cuda {             \
  DECLS                                \
  }
