// gpu/thrust_sum.h's CUDA build (nvcc): the same source as the host build, on the device.
#define COLONY_THRUST_SUM thrust_sum_cuda
#define COLONY_THRUST_SUM_DENSE thrust_sum_dense_cuda
#include "gpu/thrust_sum_impl.h"
