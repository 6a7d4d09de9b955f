/* What the driver answers through its private tables and look-up corner
 * cases, printed so that a native run and a run through gpuctl can be
 * compared line by line (e2e/gpu/runtime.sh): cuBLASLt's TPC layout
 * (table 1734dc26, slots 4 and 13), the cluster-launch slot, and
 * cuGetProcAddress_v2 for an empty name and the CUDA 5.0 linker names.
 * Stream numbers depend on how many streams the process made before, so
 * only their relation is printed. Build: gcc -o private private.c -lcuda */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define CK(x)                                                                  \
	do {                                                                   \
		CUresult r_ = (x);                                             \
		if (r_ != CUDA_SUCCESS) {                                      \
			printf("%s: error %d\n", #x, (int)r_);                 \
			return 1;                                              \
		}                                                              \
	} while (0)

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));

	static const unsigned char id[16] = { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
					      0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca };
	CUuuid u;
	memcpy(u.bytes, id, 16);
	const void **t = NULL;
	CK(cuGetExportTable((const void **)&t, &u));
	printf("table 1734dc26 size %#lx\n", (unsigned long)(size_t)t[0]);
	int sms = 0;
	CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	unsigned char *gpc = NULL, *local = NULL;
	CK(((CUresult(*)(void **, void **))t[4])((void **)&gpc, (void **)&local));
	printf("tpcs %d\ngpc  ", sms / 2);
	for (int i = 0; i < sms / 2; i++)
		printf("%d%c", gpc[i], i + 1 < sms / 2 ? ',' : '\n');
	printf("local ");
	for (int i = 0; i < sms / 2; i++)
		printf("%d%c", local[i], i + 1 < sms / 2 ? ',' : '\n');
	CK(((CUresult(*)(void *, void *))t[13])(gpc, local));
	int v = -1;
	CK(((CUresult(*)(CUdevice, int *))t[8])(dev, &v));
	printf("slot 8 %d\n", v);
	CK(((CUresult(*)(int *))t[14])(&v));
	printf("slot 14 %d\n", v);

	void *fn = &fn;
	CUdriverProcAddressQueryResult st = 99;
	CUresult r = cuGetProcAddress("", &fn, 0, 0, &st);
	printf("getproc \"\" -> %d fn=%s status=%d\n", (int)r, fn ? "set" : "0", (int)st);
	static const char *const linker[] = { "cuLinkCreate", "cuLinkAddData", "cuLinkAddFile" };
	for (int i = 0; i < 3; i++) {
		fn = NULL;
		r = cuGetProcAddress(linker[i], &fn, 5050, 0, &st);
		printf("getproc %s@5050 -> %d fn=%s status=%d\n", linker[i], (int)r, fn ? "set" : "0", (int)st);
	}

	CUstream s;
	unsigned long long a = 0, b = 0, c = 0;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuStreamGetId(NULL, &a));
	CK(cuStreamGetId(CU_STREAM_LEGACY, &b));
	CK(cuStreamGetId(s, &c));
	printf("stream ids: NULL==legacy %d, created differs %d\n", a == b, c != a);
	CK(cuStreamDestroy(s));
	printf("private ok\n");
	return 0;
}
