/* TLS 1.3 on the client's connection to gpud (gc_tls.c).
 *
 * Off unless GPUCTL_TLS_CA is set. Then the system's OpenSSL (libssl.so.3,
 * or 1.1) is loaded with dlopen, runs the handshake and verifies gpud's
 * certificate; the record layer afterwards is the kernel's (kTLS) where it
 * has TLS offload, else this file's, over libcrypto's AES-GCM: one thread
 * may read the socket while another writes it, which an OpenSSL SSL object
 * does not allow.
 *
 * Threads: gc_tls_connect runs with the connection not in use (at cuInit,
 * or by the reconnecting reader holding tx_mu); gc_tls_send runs under
 * tx_mu; gc_tls_recv by the reader. The two directions share nothing but
 * the threads that seal and open the records of bulk transfers (128 KiB or
 * more; GPUCTL_TLS_THREADS of them, started at the first), whose jobs each
 * direction's owner hands out and collects in order while it does the
 * socket I/O. */
#ifndef GPUCTL_GC_TLS_H
#define GPUCTL_GC_TLS_H

#include <stddef.h>
#include <sys/uio.h>

/* gc_tls_setup reads GPUCTL_TLS_CA, GPUCTL_TLS_SERVER_NAME, GPUCTL_KTLS
 * and GPUCTL_TLS_THREADS and, with a CA, loads OpenSSL and the CA. 0: ready (or TLS off); -1: the
 * reason was logged. */
int gc_tls_setup(void);

/* gc_tls_enabled: GPUCTL_TLS_CA is set. */
int gc_tls_enabled(void);

/* gc_tls_connect runs the handshake on fd, a connected socket to addr
 * (HOST:PORT, whose host the certificate must name unless
 * GPUCTL_TLS_SERVER_NAME says otherwise). 0: done; -1: the connection
 * failed (worth another try); -2: it cannot work (a certificate that does
 * not verify, a gpud that speaks plaintext), with why in err. */
int gc_tls_connect(int fd, const char *addr, char *err, size_t errlen);

/* gc_tls_user_tx, gc_tls_user_rx: TLS is on and this library seals
 * (opens) the records in that direction; otherwise plain send and recv
 * are right (no TLS, or the kernel's). */
int gc_tls_user_tx(void);
int gc_tls_user_rx(void);

/* gc_tls_send writes the iovec as records, all of it. 0, or -1. */
int gc_tls_send(int fd, const struct iovec *iov, int n);

/* gc_tls_recv reads exactly n bytes of plaintext. 0, -1 (the connection
 * failed, closed, or sent a record this end does not take), or -2 (the
 * socket's receive timeout, the silence bound, ran out). */
int gc_tls_recv(int fd, void *p, size_t n);

/* gc_tls_describe: the negotiated suite and who seals, for GPUCTL_DEBUG. */
const char *gc_tls_describe(void);

#endif
