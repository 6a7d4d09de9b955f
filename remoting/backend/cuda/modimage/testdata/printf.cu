// printf does not touch the heap, but its format string is a module-scope
// .global ($str) that nvcc emits.
#include <cstdio>

extern "C" __global__ void say(int n)
{
	printf("n=%d\n", n);
}
