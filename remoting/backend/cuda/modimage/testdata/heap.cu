// In-kernel malloc and free: the device heap, driver memory that no one
// can enumerate.
extern "C" __global__ void grab(int **out, int n)
{
	int *p = (int *)malloc(n * sizeof(int));
	if (p != 0) {
		p[0] = n;
	}
	out[threadIdx.x] = p;
	if (n < 0) {
		free(p);
	}
}
