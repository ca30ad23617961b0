// SPDX-License-Identifier: MIT
// Row (b), the reference every other row is divided by: what one Thrust
// call costs a user's file. thrust::device_vector plus thrust::sort.
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/sort.h>

#include <cstddef>
#include <vector>

int main() {
  std::vector<float> x(std::size_t{1} << 20, 1.0f);
  thrust::device_vector<float> d(x.begin(), x.end());
  thrust::sort(d.begin(), d.end());
  thrust::copy(d.begin(), d.end(), x.begin());
  return x[0] == 1.0f ? 0 : 1;
}
