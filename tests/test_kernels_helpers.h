// tests/test_kernels_helpers.h: what the kernel tests share (tests/test_kernels*.cpp).
//
// Every kernel test runs on each device this binary can reach (the CPU always, CUDA when a
// GPU is visible), so the same file checks both twins against one double-precision
// reference. Buffers move through kernels::memcpy_* exactly as the model's do.
//
// The references are written in the tests, in double, with the simplest loops that express
// the formula; they share nothing with kernels/cpu/. Backward passes are checked against
// central finite differences of those references: with a fixed random upstream gradient R,
// the scalar L(x) = sum(R * forward(x)) has dL/dx = backward(R), and
//   dL/dx_k ~ (L(x + h e_k) - L(x - h e_k)) / 2h,  error O(h^2) plus roundoff eps/h,
// which in double with h = 1e-5 is far below the fp32 error of the kernel under test.
//
// defines: test_devices, device_label, DevBuf, uniform, to_double, max_rel_err, fd_grad, dot
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/math.h"  // to_bf16
#include "kernels/ops.h"

namespace ktest {

using kernels::Device;

inline std::vector<Device> test_devices() {
  std::vector<Device> ds = {Device::CPU};
  if (kernels::cuda_compiled() && kernels::cuda_device_count() > 0) ds.push_back(Device::CUDA);
  return ds;
}

inline std::string device_label(const ::testing::TestParamInfo<Device>& info) {
  return kernels::device_name(info.param);
}

// A device buffer filled from (and read back into) a host vector.
template <class T>
class DevBuf {
 public:
  DevBuf(Device d, size_t n) : d_(d), n_(n) {
    ptr_ = static_cast<T*>(kernels::device_malloc(d_, n_ * sizeof(T)));
  }
  DevBuf(Device d, const std::vector<T>& host) : DevBuf(d, host.size()) { upload(host); }
  ~DevBuf() { kernels::device_free(d_, ptr_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;

  void upload(const std::vector<T>& host) {
    kernels::memcpy_from_host(d_, ptr_, host.data(), n_ * sizeof(T));
  }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    kernels::synchronize(d_);
    kernels::memcpy_to_host(d_, out.data(), ptr_, n_ * sizeof(T));
    return out;
  }
  T* get() { return ptr_; }
  const T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  Device d_;
  size_t n_;
  T* ptr_;
};

// n numbers uniform in [lo, hi), reproducible from `seed`.
inline std::vector<float> uniform(size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Normwise relative error max_i |got_i - want_i| / max_i |want_i|: one fp32 rounding per
// element gives ~1e-7, a reduction over n terms ~1e-7 sqrt(n).
inline double max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
    err = std::max(err, std::fabs((double)got[i] - want[i]));
    ref = std::max(ref, std::fabs(want[i]));
  }
  return err / std::max(ref, 1e-30);
}

// Central finite differences of the scalar loss(x) with respect to every element of x.
inline std::vector<double> fd_grad(const std::function<double(const std::vector<double>&)>& loss,
                                   std::vector<double> x, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t k = 0; k < x.size(); k++) {
    const double x0 = x[k];
    x[k] = x0 + h;
    const double up = loss(x);
    x[k] = x0 - h;
    const double down = loss(x);
    x[k] = x0;
    g[k] = (up - down) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// The storage type's copy of fp32 values: themselves, or rounded to bf16.
template <typename T>
std::vector<T> values(const std::vector<float>& v) {
  if constexpr (std::is_same<T, float>::value) {
    return v;
  } else {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); i++) out[i] = kernels::to_bf16(v[i]);
    return out;
  }
}

}  // namespace ktest
