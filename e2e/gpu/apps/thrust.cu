// A Thrust program for the GPU suite: sort, reduce and scan a million
// integers from a fixed seed and print checksums that must be identical
// natively and through gpuctl.
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <cstdio>
#include <cstdint>

int main() {
  const int n = 1 << 20;
  thrust::host_vector<int> h(n);
  uint32_t x = 12345;
  for (int i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;  // a fixed LCG: same input every run
    h[i] = (int)(x >> 8) - (1 << 23);
  }
  thrust::device_vector<int> d = h;
  long long sum = thrust::reduce(d.begin(), d.end(), 0LL);
  thrust::sort(d.begin(), d.end());
  thrust::host_vector<int> s = d;
  bool sorted = true;
  for (int i = 1; i < n; i++) sorted &= s[i - 1] <= s[i];
  thrust::device_vector<long long> wide(d.begin(), d.end());
  thrust::inclusive_scan(wide.begin(), wide.end(), wide.begin());
  long long last = wide.back();
  uint64_t h64 = 1469598103934665603ull;  // FNV-1a over the sorted keys
  for (int i = 0; i < n; i++) h64 = (h64 ^ (uint32_t)s[i]) * 1099511628211ull;
  printf("thrust n=%d sum=%lld sorted=%d min=%d max=%d scan_last=%lld fnv=%016llx\n", n, sum, sorted, s[0],
         s[n - 1], last, (unsigned long long)h64);
  return sorted && last == sum ? 0 : 1;
}
