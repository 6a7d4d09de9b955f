/* The goodbye at a normal exit (exit(), a return from main).
 *
 * A session whose client vanished is kept by gpud for its grace period,
 * in case the connection comes back; a program that exited will not, and
 * its session, worker and device memory would be held for nothing. So the
 * library says goodbye when the process exits normally.
 *
 * It does so from a destructor of the library, which the dynamic linker
 * runs after every atexit handler and C++ static destructor of the
 * program: the CUDA runtime's teardown (module unregistration, primary
 * context release and the context-local-storage destructors that this
 * releases) runs first and is still answered. _exit, a fatal signal and
 * SIGKILL run no destructor: their sessions wait out the grace period, as
 * a program that is checkpointed or cut off needs. A forked child runs
 * the destructor too, but gc_goodbye says nothing for a process other
 * than the one that opened the session.
 *
 * GPUCTL_GOODBYE=0 turns it off (the session then ends by grace). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "gc_core.h"

/* The most the goodbye may add to a process's exit, per step. */
#define GOODBYE_BOUND_S 0.5

__attribute__((destructor)) static void goodbye_at_exit(void)
{
	const char *v = getenv("GPUCTL_GOODBYE");
	if (v != NULL && strcmp(v, "0") == 0)
		return;
	if (gc_goodbye(GOODBYE_BOUND_S) && getenv("GPUCTL_DEBUG") != NULL)
		gc_log("said goodbye: the session ends now");
}
