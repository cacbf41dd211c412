#include "kernels/hadamard_rotation.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/hadamard_rotation.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/hadamard_rotation-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvs {
namespace HWY_NAMESPACE {

void HadamardRotateAt(float* x, uint32_t n) { HadamardRotate(x, n); }

}  // namespace HWY_NAMESPACE
}  // namespace kvs
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvs {

HWY_EXPORT(HadamardRotateAt);

void hadamard_rotate(float* x, uint32_t n) { HWY_DYNAMIC_DISPATCH(HadamardRotateAt)(x, n); }

}  // namespace kvs
#endif
