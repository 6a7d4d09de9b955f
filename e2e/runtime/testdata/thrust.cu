// Thrust: sort, reduce and inclusive scan on device vectors.
#include <thrust/device_vector.h>
#include <thrust/host_vector.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include "check.h"

int main()
{
	const int n = 10000;
	thrust::host_vector<int> h(n);
	for (int i = 0; i < n; i++)
		h[i] = (i * 7919 + 13) % 10007;
	thrust::device_vector<int> d = h;
	thrust::sort(d.begin(), d.end());
	thrust::host_vector<int> s = d;
	for (int i = 1; i < n; i++)
		EXPECT(s[i - 1] <= s[i], "not sorted at %d: %d > %d", i, s[i - 1], s[i]);
	long long sum = thrust::reduce(d.begin(), d.end(), 0LL);
	long long want = 0;
	for (int i = 0; i < n; i++)
		want += h[i];
	EXPECT(sum == want, "reduce %lld, want %lld", sum, want);
	thrust::device_vector<int> ones(n, 1), pre(n);
	thrust::inclusive_scan(ones.begin(), ones.end(), pre.begin());
	EXPECT(pre[n - 1] == n && pre[0] == 1, "scan ends %d..%d", (int)pre[0], (int)pre[n - 1]);
	thrust::device_vector<int> hv = h, hpre(n);
	thrust::inclusive_scan(hv.begin(), hv.end(), hpre.begin());
	thrust::host_vector<int> hp = hpre;
	HASH("sort", s.data(), n * sizeof(int));
	HASH("reduce", &sum, sizeof sum);
	HASH("scan", hp.data(), n * sizeof(int));
	std::printf("min %d max %d sum %lld\n", (int)s[0], (int)s[n - 1], sum);
	std::printf("thrust ok\n");
	return 0;
}
