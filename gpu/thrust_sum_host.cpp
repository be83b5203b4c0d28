// gpu/thrust_sum.h's host build: Thrust's CPP system (THRUST_DEVICE_SYSTEM set for this file
// alone by gpu/CMakeLists.txt), so device_vector is host memory and the algorithms run here.
#define COLONY_THRUST_SUM thrust_sum_host
#define COLONY_THRUST_SUM_DENSE thrust_sum_dense_host
#include "gpu/thrust_sum_impl.h"
