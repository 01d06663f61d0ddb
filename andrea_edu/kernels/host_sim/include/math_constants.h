// Host stand-in for CUDA's math_constants.h (andrea_edu/kernels/host_sim, the CPU simulator).
#pragma once
#include <limits>
#define CUDART_INF_F (std::numeric_limits<float>::infinity())
