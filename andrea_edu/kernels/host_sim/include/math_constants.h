// Host stand-in for CUDA's math_constants.h (tests/host_sim only).
#pragma once
#include <limits>
#define CUDART_INF_F (std::numeric_limits<float>::infinity())
