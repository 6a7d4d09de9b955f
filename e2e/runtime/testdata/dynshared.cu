// Dynamic shared memory (extern __shared__) in templates instantiated for
// several types, with the size given at launch.
#include "check.h"

template <typename T> __global__ void reverse(T *x, int n)
{
	extern __shared__ unsigned char raw[];
	T *s = reinterpret_cast<T *>(raw);
	int t = threadIdx.x;
	if (t < n)
		s[t] = x[t];
	__syncthreads();
	if (t < n)
		x[t] = s[n - 1 - t];
}

template <typename T> static void run(const char *name, int n)
{
	T *h = new T[n], *d;
	for (int i = 0; i < n; i++)
		h[i] = (T)(i * 3);
	CHECK(cudaMalloc(&d, n * sizeof(T)));
	CHECK(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
	reverse<T><<<1, n, n * sizeof(T)>>>(d, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		EXPECT(h[i] == (T)((n - 1 - i) * 3), "%s: x[%d] wrong", name, i);
	HASH(name, h, n * sizeof(T));
	CHECK(cudaFree(d));
	delete[] h;
}

int main()
{
	run<int>("int", 256);
	run<double>("double", 512);
	run<short>("short", 1024);
	std::printf("dynshared ok\n");
	return 0;
}
