/* What the C test programs here share: failure counting and checks that
 * name the call, and the add kernel several of them launch. A program
 * includes it after the system headers and prints `failures` at the end. */
#ifndef GPUCTL_TESTDATA_CHECK_H
#define GPUCTL_TESTDATA_CHECK_H

#include <cuda.h>
#include <stdarg.h>
#include <stdio.h>

/* Atomic: several programs check from many threads. */
static _Atomic int failures __attribute__((unused));

#define CHECK(call, want)                                                                                 \
	do {                                                                                              \
		CUresult r_ = (call);                                                                     \
		if (r_ != (want)) {                                                                       \
			const char *n_ = NULL;                                                            \
			cuGetErrorName(r_, &n_);                                                          \
			fprintf(stderr, "FAIL %s:%d: %s = %d (%s), want %d\n", __FILE__, __LINE__, #call, \
				(int)r_, n_ ? n_ : "?", (int)(want));                                     \
			failures++;                                                                       \
		}                                                                                         \
	} while (0)
#define OK(call) CHECK(call, CUDA_SUCCESS)

/* check_note ends a failure line with an optional printf-style note. */
static inline void check_note(const char *fmt, ...)
{
	if (*fmt) {
		va_list ap;
		va_start(ap, fmt);
		fputs(": ", stderr);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
}

/* EXPECT(cond) or EXPECT(cond, "format", args...). */
#define EXPECT(cond, ...)                                                            \
	do {                                                                         \
		if (!(cond)) {                                                       \
			fprintf(stderr, "FAIL %s:%d: %s", __FILE__, __LINE__, #cond); \
			check_note("" __VA_ARGS__);                                  \
			failures++;                                                  \
		}                                                                    \
	} while (0)

/* add(p, v, n): p[i] += v for i < n (32-bit words). */
#define ADD_PTX                                                                                          \
	".version 7.0\n"                                                                                 \
	".target sm_52\n"                                                                                \
	".address_size 64\n"                                                                             \
	".visible .entry add(.param .u64 p, .param .u32 v, .param .u32 n)\n"                             \
	"{\n"                                                                                            \
	"  .reg .pred %p<2>;\n  .reg .b32 %r<9>;\n  .reg .b64 %rd<5>;\n"                                 \
	"  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r8, [v];\n  ld.param.u32 %r2, [n];\n"                \
	"  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"                    \
	"  mad.lo.s32 %r1, %r3, %r4, %r5;\n"                                                             \
	"  setp.ge.u32 %p1, %r1, %r2;\n  @%p1 bra DONE;\n"                                               \
	"  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n" \
	"  ld.global.u32 %r6, [%rd4];\n  add.s32 %r7, %r6, %r8;\n  st.global.u32 [%rd4], %r7;\n"         \
	"DONE:\n  ret;\n}\n"

#endif
