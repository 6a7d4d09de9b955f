/* TLS 1.3 on the client's connection to gpud: OpenSSL, loaded at run time
 * only when GPUCTL_TLS_CA is set, runs the handshake and verifies gpud's
 * certificate; the records are then sealed and opened by the kernel (kTLS)
 * or by the small record layer below, with the traffic secrets OpenSSL
 * logs. See gc_tls.h. No OpenSSL header is needed: the few functions and
 * constants used are declared here, as OpenSSL 1.1.1 and 3 define them. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gc_tls.h"
#include "gc_core.h"
#include "../gen/gc_ops.h"

/* ---- OpenSSL, by dlopen ----------------------------------------------- */

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_method_st SSL_METHOD;
typedef struct ssl_cipher_st SSL_CIPHER;
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
typedef struct evp_md_st EVP_MD;
typedef struct X509_VERIFY_PARAM_st X509_VERIFY_PARAM;
typedef struct bio_st BIO;
typedef long (*BIO_callback_fn_ex)(BIO *, int, const char *, size_t, int, long, int, size_t *);

enum {
	SSL_ERROR_SSL = 1,
	SSL_ERROR_WANT_READ = 2,
	SSL_ERROR_WANT_WRITE = 3,
	SSL_VERIFY_PEER = 1,
	SSL_CTRL_SET_TLSEXT_HOSTNAME = 55,
	TLSEXT_NAMETYPE_host_name = 0,
	SSL_CTRL_SET_MIN_PROTO_VERSION = 123,
	SSL_CTRL_SET_MAX_PROTO_VERSION = 124,
	TLS1_3_VERSION = 0x0304,
	X509_V_OK = 0,
	X509_V_ERR_HOSTNAME_MISMATCH = 62,
	X509_V_ERR_IP_ADDRESS_MISMATCH = 64,
	EVP_CTRL_GCM_GET_TAG = 0x10,
	EVP_CTRL_GCM_SET_TAG = 0x11,
	SSL_R_UNEXPECTED_EOF_WHILE_READING = 294,
	BIO_CB_READ = 0x02,
	BIO_CB_RETURN = 0x80,
	ERR_REASON_MASK = 0x7fffff,
};

static struct {
	const SSL_METHOD *(*TLS_client_method)(void);
	SSL_CTX *(*SSL_CTX_new)(const SSL_METHOD *);
	long (*SSL_CTX_ctrl)(SSL_CTX *, int, long, void *);
	int (*SSL_CTX_set_ciphersuites)(SSL_CTX *, const char *);
	int (*SSL_CTX_load_verify_locations)(SSL_CTX *, const char *, const char *);
	void (*SSL_CTX_set_verify)(SSL_CTX *, int, void *);
	void (*SSL_CTX_set_keylog_callback)(SSL_CTX *, void (*)(const SSL *, const char *));
	SSL *(*SSL_new)(SSL_CTX *);
	void (*SSL_free)(SSL *);
	int (*SSL_set_fd)(SSL *, int);
	int (*SSL_connect)(SSL *);
	int (*SSL_get_error)(const SSL *, int);
	long (*SSL_get_verify_result)(const SSL *);
	int (*SSL_set1_host)(SSL *, const char *);
	long (*SSL_ctrl)(SSL *, int, long, void *);
	X509_VERIFY_PARAM *(*SSL_get0_param)(SSL *);
	const SSL_CIPHER *(*SSL_get_current_cipher)(const SSL *);
	uint16_t (*SSL_CIPHER_get_protocol_id)(const SSL_CIPHER *);
	int (*SSL_has_pending)(const SSL *);
	BIO *(*SSL_get_rbio)(const SSL *);
	void (*BIO_set_callback_ex)(BIO *, BIO_callback_fn_ex);
	unsigned long (*ERR_get_error)(void);
	unsigned long (*ERR_peek_error)(void);
	void (*ERR_error_string_n)(unsigned long, char *, size_t);
	void (*ERR_clear_error)(void);
	const char *(*X509_verify_cert_error_string)(long);
	int (*X509_VERIFY_PARAM_set1_ip_asc)(X509_VERIFY_PARAM *, const char *);
	EVP_CIPHER_CTX *(*EVP_CIPHER_CTX_new)(void);
	const EVP_CIPHER *(*EVP_aes_128_gcm)(void);
	const EVP_CIPHER *(*EVP_aes_256_gcm)(void);
	int (*EVP_EncryptInit_ex)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
	int (*EVP_EncryptUpdate)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
	int (*EVP_EncryptFinal_ex)(EVP_CIPHER_CTX *, unsigned char *, int *);
	int (*EVP_DecryptInit_ex)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
	int (*EVP_DecryptUpdate)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
	int (*EVP_DecryptFinal_ex)(EVP_CIPHER_CTX *, unsigned char *, int *);
	int (*EVP_CIPHER_CTX_ctrl)(EVP_CIPHER_CTX *, int, int, void *);
	int (*EVP_CIPHER_CTX_copy)(EVP_CIPHER_CTX *, const EVP_CIPHER_CTX *);
	const EVP_MD *(*EVP_sha256)(void);
	const EVP_MD *(*EVP_sha384)(void);
	unsigned char *(*HMAC)(const EVP_MD *, const void *, int, const unsigned char *, size_t, unsigned char *, unsigned int *);
	void (*OPENSSL_cleanse)(void *, size_t);
} o;

/* The library pairs tried, newest first. */
static const char *const libs[][2] = {
	{ "libssl.so.3", "libcrypto.so.3" },
	{ "libssl.so.1.1", "libcrypto.so.1.1" },
};

static int load_openssl(char *why, size_t whylen)
{
	void *ssl = NULL, *crypto = NULL;
	const char *tried = NULL;
	for (size_t i = 0; i < sizeof libs / sizeof libs[0] && ssl == NULL; i++) {
		crypto = dlopen(libs[i][1], RTLD_NOW | RTLD_LOCAL);
		ssl = crypto ? dlopen(libs[i][0], RTLD_NOW | RTLD_LOCAL) : NULL;
		if (ssl == NULL && tried == NULL)
			tried = dlerror();
	}
	if (ssl == NULL) {
		snprintf(why, whylen, "cannot load the system's TLS library, libssl.so.3 (%s); install OpenSSL 3 (libssl3)",
			 tried ? tried : "not found");
		return -1;
	}
	struct {
		void **fn;
		void *lib;
		const char *name;
	} syms[] = {
#define S(lib, name) { (void **)&o.name, lib, #name }
		S(ssl, TLS_client_method), S(ssl, SSL_CTX_new), S(ssl, SSL_CTX_ctrl), S(ssl, SSL_CTX_set_ciphersuites),
		S(ssl, SSL_CTX_load_verify_locations), S(ssl, SSL_CTX_set_verify), S(ssl, SSL_CTX_set_keylog_callback),
		S(ssl, SSL_new), S(ssl, SSL_free), S(ssl, SSL_set_fd), S(ssl, SSL_connect), S(ssl, SSL_get_error),
		S(ssl, SSL_get_verify_result), S(ssl, SSL_set1_host), S(ssl, SSL_ctrl), S(ssl, SSL_get0_param),
		S(ssl, SSL_get_current_cipher), S(ssl, SSL_CIPHER_get_protocol_id), S(ssl, SSL_has_pending), S(ssl, SSL_get_rbio),
		S(crypto, BIO_set_callback_ex),
		S(crypto, ERR_get_error), S(crypto, ERR_peek_error), S(crypto, ERR_error_string_n), S(crypto, ERR_clear_error),
		S(crypto, X509_verify_cert_error_string), S(crypto, X509_VERIFY_PARAM_set1_ip_asc),
		S(crypto, EVP_CIPHER_CTX_new), S(crypto, EVP_aes_128_gcm), S(crypto, EVP_aes_256_gcm),
		S(crypto, EVP_EncryptInit_ex), S(crypto, EVP_EncryptUpdate), S(crypto, EVP_EncryptFinal_ex),
		S(crypto, EVP_DecryptInit_ex), S(crypto, EVP_DecryptUpdate), S(crypto, EVP_DecryptFinal_ex),
		S(crypto, EVP_CIPHER_CTX_ctrl), S(crypto, EVP_CIPHER_CTX_copy), S(crypto, EVP_sha256), S(crypto, EVP_sha384), S(crypto, HMAC),
		S(crypto, OPENSSL_cleanse),
#undef S
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		*syms[i].fn = dlsym(syms[i].lib, syms[i].name);
		if (*syms[i].fn == NULL) {
			snprintf(why, whylen, "the system's TLS library lacks %s; install OpenSSL 3 (libssl3)", syms[i].name);
			return -1;
		}
	}
	return 0;
}

/* ---- state ------------------------------------------------------------ */

#define HDR 5
#define MAX_PLAIN 16384
#define TAG 16
#define MAX_CIPHER (MAX_PLAIN + 256)
#define TX_CAP (16 * (HDR + MAX_PLAIN + 1 + TAG))
/* Bulk transfers (see "parallel records" below) seal and open JOB_RECS
 * records per job; a job's records, sealed or read, fill one slot. */
#define JOB_RECS 16
#define SLOT_CAP (JOB_RECS * (HDR + MAX_CIPHER))
/* The receive buffer holds what a bulk read took from the socket and did
 * not open: up to a slot. */
#define RX_CAP SLOT_CAP

/* Kernel TLS (linux/tls.h), declared here so that no kernel header is
 * needed to build. */
#define GC_SOL_TLS 282
#define GC_TCP_ULP 31
#define GC_TLS_TX 1
#define GC_TLS_RX 2
#define GC_TLS_RX_EXPECT_NO_PAD 4
struct gc_ktls_info {
	uint16_t version, cipher_type;
	uint8_t iv[8], key[32], salt[4], rec_seq[8]; /* key[16] then salt for AES-128 */
};

struct dir {
	EVP_CIPHER_CTX *ctx;
	EVP_CIPHER_CTX *tmpl; /* keyed and never used: what pool threads copy */
	uint8_t iv[12];
	uint64_t seq;
	int kernel;
	uint64_t gen; /* keys' generation: a pool thread copies ctx when it changes */
};

static struct {
	int on;
	int ktls; /* may use kernel TLS */
	SSL_CTX *ctx;
	char ca[4096];
	char name[256]; /* GPUCTL_TLS_SERVER_NAME */
	uint16_t suite;
	struct dir tx, rx;
	uint8_t *txbuf;
	uint8_t *rxbuf; /* rxbuf[rpos:rlen] read, not yet opened */
	size_t rpos, rlen;
	uint8_t *plain; /* plain[ppos:plen] opened, not yet read */
	size_t ppos, plen;
	char desc[96];
	/* The handshake's secrets, from OpenSSL's key log. */
	uint8_t csecret[48], ssecret[48];
	size_t csecret_len, ssecret_len;
} t;

static int pool_config(void);

int gc_tls_enabled(void) { return t.on; }
int gc_tls_user_tx(void) { return t.on && !t.tx.kernel; }
int gc_tls_user_rx(void) { return t.on && !t.rx.kernel; }
const char *gc_tls_describe(void) { return t.on ? t.desc : "off"; }

static void keylog(const SSL *ssl, const char *line)
{
	(void)ssl;
	const char *sp = strchr(line, ' ');
	if (sp == NULL)
		return;
	uint8_t *dst;
	size_t *len;
	if ((size_t)(sp - line) == strlen("CLIENT_TRAFFIC_SECRET_0") && strncmp(line, "CLIENT_TRAFFIC_SECRET_0", sp - line) == 0)
		dst = t.csecret, len = &t.csecret_len;
	else if ((size_t)(sp - line) == strlen("SERVER_TRAFFIC_SECRET_0") && strncmp(line, "SERVER_TRAFFIC_SECRET_0", sp - line) == 0)
		dst = t.ssecret, len = &t.ssecret_len;
	else
		return;
	const char *hex = strchr(sp + 1, ' ');
	if (hex == NULL)
		return;
	hex++;
	size_t n = strlen(hex) / 2;
	if (n > 48)
		return;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return;
		dst[i] = (uint8_t)v;
	}
	*len = n;
}

int gc_tls_setup(void)
{
	const char *ca = getenv("GPUCTL_TLS_CA");
	if (ca == NULL || *ca == 0)
		return 0;
	char why[512];
	if (load_openssl(why, sizeof why) < 0) {
		gc_log("GPUCTL_TLS_CA is set but %s", why);
		return -1;
	}
	snprintf(t.ca, sizeof t.ca, "%s", ca);
	const char *name = getenv("GPUCTL_TLS_SERVER_NAME");
	snprintf(t.name, sizeof t.name, "%s", name ? name : "");
	const char *k = getenv("GPUCTL_KTLS");
	t.ktls = !(k != NULL && (strcmp(k, "0") == 0 || strcmp(k, "off") == 0 || strcmp(k, "false") == 0));
	if (pool_config() < 0)
		return -1;
	t.ctx = o.SSL_CTX_new(o.TLS_client_method());
	if (t.ctx == NULL) {
		gc_log("TLS: cannot make an OpenSSL context");
		return -1;
	}
	o.SSL_CTX_ctrl(t.ctx, SSL_CTRL_SET_MIN_PROTO_VERSION, TLS1_3_VERSION, NULL);
	o.SSL_CTX_ctrl(t.ctx, SSL_CTRL_SET_MAX_PROTO_VERSION, TLS1_3_VERSION, NULL);
	/* The suites this record layer and the kernel both carry. */
	o.SSL_CTX_set_ciphersuites(t.ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384");
	o.SSL_CTX_set_verify(t.ctx, SSL_VERIFY_PEER, NULL);
	o.SSL_CTX_set_keylog_callback(t.ctx, keylog);
	o.ERR_clear_error();
	if (o.SSL_CTX_load_verify_locations(t.ctx, ca, NULL) != 1) {
		char e[256] = "";
		o.ERR_error_string_n(o.ERR_get_error(), e, sizeof e);
		gc_log("GPUCTL_TLS_CA=%s: no CA certificate could be loaded from it (%s); set it to the PEM file of the CA that "
		       "signed gpud's --tls-cert",
		       ca, e);
		return -1;
	}
	t.txbuf = malloc(TX_CAP);
	t.rxbuf = malloc(RX_CAP);
	t.plain = malloc(MAX_CIPHER);
	t.tx.ctx = o.EVP_CIPHER_CTX_new();
	t.rx.ctx = o.EVP_CIPHER_CTX_new();
	t.tx.tmpl = o.EVP_CIPHER_CTX_new();
	t.rx.tmpl = o.EVP_CIPHER_CTX_new();
	if (!t.txbuf || !t.rxbuf || !t.plain || !t.tx.ctx || !t.rx.ctx || !t.tx.tmpl || !t.rx.tmpl) {
		gc_log("TLS: out of memory");
		return -1;
	}
	t.on = 1;
	return 0;
}

/* ---- key schedule ----------------------------------------------------- */

/* expand_label is HKDF-Expand-Label (RFC 8446, 7.1) with an empty context,
 * for outputs no longer than one hash block. */
static int expand_label(const EVP_MD *md, const uint8_t *secret, size_t slen, const char *label, uint8_t *out, size_t n)
{
	uint8_t info[64], block[64];
	size_t l = strlen(label), i = 0;
	info[i++] = (uint8_t)(n >> 8);
	info[i++] = (uint8_t)n;
	info[i++] = (uint8_t)(6 + l);
	memcpy(info + i, "tls13 ", 6);
	i += 6;
	memcpy(info + i, label, l);
	i += l;
	info[i++] = 0; /* context */
	info[i++] = 1; /* HKDF's T(1) counter */
	unsigned int bl = 0;
	if (o.HMAC(md, secret, (int)slen, info, i, block, &bl) == NULL || bl < n)
		return -1;
	memcpy(out, block, n);
	o.OPENSSL_cleanse(block, sizeof block);
	return 0;
}

/* set_dir derives a direction's key and IV, and gives them to the kernel
 * or to an EVP context. */
static int set_dir(struct dir *d, int fd, int kdir, const uint8_t *secret, size_t slen, int try_kernel)
{
	int aes256 = t.suite == 0x1302;
	const EVP_MD *md = aes256 ? o.EVP_sha384() : o.EVP_sha256();
	size_t klen = aes256 ? 32 : 16;
	uint8_t key[32];
	if (expand_label(md, secret, slen, "key", key, klen) < 0 || expand_label(md, secret, slen, "iv", d->iv, 12) < 0)
		return -1;
	static uint64_t gens;
	d->seq = 0;
	d->kernel = 0;
	d->gen = ++gens;
	if (try_kernel) {
		struct gc_ktls_info ki;
		memset(&ki, 0, sizeof ki);
		ki.version = TLS1_3_VERSION;
		ki.cipher_type = aes256 ? 52 : 51;
		memcpy(ki.iv, d->iv + 4, 8);
		/* AES-128's info is iv, key[16], salt, rec_seq; AES-256's has
		 * key[32]: lay the tail out after the key. */
		uint8_t *p = ki.key;
		memcpy(p, key, klen);
		p += klen;
		memcpy(p, d->iv, 4);
		p += 4;
		memset(p, 0, 8); /* rec_seq: the first record */
		p += 8;
		socklen_t len = (socklen_t)(p - (uint8_t *)&ki);
		if (setsockopt(fd, GC_SOL_TLS, kdir, &ki, len) == 0)
			d->kernel = 1;
		o.OPENSSL_cleanse(&ki, sizeof ki);
	}
	const EVP_CIPHER *c = aes256 ? o.EVP_aes_256_gcm() : o.EVP_aes_128_gcm();
	int ok = 1;
	for (int i = 0; i < 2 && !d->kernel; i++) {
		EVP_CIPHER_CTX *x = i ? d->tmpl : d->ctx;
		ok = ok && (kdir == GC_TLS_TX ? o.EVP_EncryptInit_ex(x, c, NULL, key, NULL)
					      : o.EVP_DecryptInit_ex(x, c, NULL, key, NULL)) == 1;
	}
	o.OPENSSL_cleanse(key, sizeof key);
	return ok ? 0 : -1;
}

/* ---- handshake -------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The first bytes the server sent, as OpenSSL read them: a gpud without
 * TLS answers a ClientHello with a plaintext Welcome, which tells it apart
 * from a TLS peer that failed. */
static uint8_t first[4];
static size_t nfirst;

static long read_watch(BIO *b, int oper, const char *argp, size_t len, int argi, long argl, int ret, size_t *processed)
{
	(void)b, (void)len, (void)argi, (void)argl;
	if (oper == (BIO_CB_READ | BIO_CB_RETURN) && ret > 0 && processed != NULL && argp != NULL) {
		for (size_t i = 0; i < *processed && nfirst < sizeof first; i++)
			first[nfirst++] = (uint8_t)argp[i];
	}
	return ret;
}

static void tls_error(char *err, size_t errlen, const char *addr, const char *what)
{
	char e[256] = "unknown error";
	unsigned long code = o.ERR_get_error();
	if (code != 0)
		o.ERR_error_string_n(code, e, sizeof e);
	snprintf(err, errlen, "TLS handshake with gpud at %s failed: %s: %s", addr, what, e);
}

int gc_tls_connect(int fd, const char *addr, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	size_t hl = colon ? (size_t)(colon - addr) : strlen(addr);
	if (hl >= sizeof host)
		hl = sizeof host - 1;
	memcpy(host, addr, hl);
	host[hl] = 0;
	char *h = host;
	if (h[0] == '[' && hl > 1 && h[hl - 1] == ']') {
		h[hl - 1] = 0;
		h++;
	}
	const char *name = t.name[0] ? t.name : h;

	t.csecret_len = t.ssecret_len = 0;
	t.rpos = t.rlen = t.ppos = t.plen = 0;
	t.tx.kernel = t.rx.kernel = 0;
	o.ERR_clear_error();
	SSL *ssl = o.SSL_new(t.ctx);
	if (ssl == NULL) {
		tls_error(err, errlen, addr, "cannot make a connection object");
		return -2;
	}
	unsigned char ip[16];
	if (inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1) {
		o.X509_VERIFY_PARAM_set1_ip_asc(o.SSL_get0_param(ssl), name);
	} else {
		o.SSL_set1_host(ssl, name);
		o.SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name, (void *)name);
	}
	o.SSL_set_fd(ssl, fd);
	nfirst = 0;
	o.BIO_set_callback_ex(o.SSL_get_rbio(ssl), read_watch);
	/* OpenSSL writes the socket with write(): a peer that hung up would
	 * raise SIGPIPE in the application. Hold it back in this thread and
	 * swallow one the handshake caused. */
	sigset_t pipe, old, pending;
	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	sigpending(&pending);
	int was_pending = sigismember(&pending, SIGPIPE);
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	double deadline = now_s() + 10;
	int rc = 0;
	for (;;) {
		int r = o.SSL_connect(ssl);
		if (r == 1)
			break;
		int e = o.SSL_get_error(ssl, r);
		short ev = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
		if (ev == 0) {
			long v = o.SSL_get_verify_result(ssl);
			if (nfirst == sizeof first && memcmp(first, GC_WELCOME_MAGIC, 4) == 0) {
				snprintf(err, errlen,
					 "gpud at %s serves --listen without TLS (it answered in plaintext): unset GPUCTL_TLS_CA, or "
					 "start gpud with --tls-cert and --tls-key",
					 addr);
				rc = -2;
			} else if (e == SSL_ERROR_SSL && (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)) {
				snprintf(err, errlen,
					 "TLS handshake with gpud at %s failed: its certificate is not valid for %s; reach gpud by a "
					 "name or address its certificate holds, or set GPUCTL_TLS_SERVER_NAME",
					 addr, name);
				rc = -2;
			} else if (e == SSL_ERROR_SSL && v != X509_V_OK) {
				snprintf(err, errlen,
					 "TLS handshake with gpud at %s failed: certificate verify failed (%s); set GPUCTL_TLS_CA to "
					 "the CA that signed gpud's --tls-cert",
					 addr, o.X509_verify_cert_error_string(v));
				rc = -2;
			} else if (e == SSL_ERROR_SSL && (o.ERR_peek_error() & ERR_REASON_MASK) != SSL_R_UNEXPECTED_EOF_WHILE_READING) {
				tls_error(err, errlen, addr, "gpud speaks TLS 1.3 with the certificate of its --tls-cert");
				rc = -2;
			} else {
				snprintf(err, errlen,
					 "the connection closed during the TLS handshake; check that gpud at %s runs with --tls-cert "
					 "and --tls-key",
					 addr);
				rc = -1;
			}
			break;
		}
		double left = deadline - now_s();
		struct pollfd pfd = { fd, ev, 0 };
		if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) == 0) {
			snprintf(err, errlen, "TLS handshake with gpud at %s timed out", addr);
			rc = -1;
			break;
		}
	}
	fcntl(fd, F_SETFL, fl);
	sigpending(&pending);
	if (!was_pending && sigismember(&pending, SIGPIPE)) {
		struct timespec zero = { 0, 0 };
		sigtimedwait(&pipe, NULL, &zero);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0) {
		t.suite = o.SSL_CIPHER_get_protocol_id(o.SSL_get_current_cipher(ssl));
		size_t want = t.suite == 0x1302 ? 48 : 32;
		if (o.SSL_has_pending(ssl) || (t.suite != 0x1301 && t.suite != 0x1302) || t.csecret_len != want ||
		    t.ssecret_len != want) {
			snprintf(err, errlen, "TLS with gpud at %s: unexpected handshake outcome (suite %#x)", addr, t.suite);
			rc = -2;
		}
	}
	o.SSL_free(ssl); /* frees the socket BIO, not the descriptor, and sends nothing */
	if (rc != 0)
		return rc;
	int kernel = t.ktls && setsockopt(fd, IPPROTO_TCP, GC_TCP_ULP, "tls", sizeof "tls") == 0;
	if (set_dir(&t.tx, fd, GC_TLS_TX, t.csecret, t.csecret_len, kernel) < 0 ||
	    set_dir(&t.rx, fd, GC_TLS_RX, t.ssecret, t.ssecret_len, kernel) < 0) {
		snprintf(err, errlen, "TLS with gpud at %s: cannot set up the record keys", addr);
		rc = -2;
	}
	if (t.rx.kernel) {
		int one = 1;
		setsockopt(fd, GC_SOL_TLS, GC_TLS_RX_EXPECT_NO_PAD, &one, sizeof one);
	}
	o.OPENSSL_cleanse(t.csecret, sizeof t.csecret);
	o.OPENSSL_cleanse(t.ssecret, sizeof t.ssecret);
	snprintf(t.desc, sizeof t.desc, "%s, %s", t.suite == 0x1302 ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256",
		 t.tx.kernel && t.rx.kernel ? "kernel TLS" : t.tx.kernel ? "kernel TLS sending" : "user-space records");
	return rc;
}


/* ---- records ---------------------------------------------------------- */

static void make_nonce(const uint8_t iv[12], uint64_t seq, uint8_t n[12])
{
	memcpy(n, iv, 12);
	for (int i = 0; i < 8; i++)
		n[4 + i] ^= (uint8_t)(seq >> (56 - 8 * i));
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t m = send(fd, p, n, MSG_NOSIGNAL);
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		p += m;
		n -= (size_t)m;
	}
	return 0;
}

/* A position in an iovec. */
struct cur {
	const struct iovec *iov;
	int n, i;
	size_t off; /* into iov[i] */
};

static void cur_skip_done(struct cur *c)
{
	while (c->i < c->n && c->off == c->iov[c->i].iov_len) {
		c->i++;
		c->off = 0;
	}
}

static void cur_advance(struct cur *c, size_t k)
{
	while (k > 0) {
		size_t r = c->iov[c->i].iov_len - c->off;
		if (r > k) {
			c->off += k;
			return;
		}
		k -= r;
		c->i++;
		c->off = 0;
	}
}

/* seal_one writes at rec the record of sequence number seq holding the
 * next want bytes (at most MAX_PLAIN) at c, which it advances. The data is
 * read from the caller's buffers once, while encrypting. Returns the
 * record's length, or -1. */
static long seal_one(EVP_CIPHER_CTX *ctx, const uint8_t iv[12], uint64_t seq, uint8_t *rec, struct cur *c, size_t want)
{
	uint8_t *out = rec + HDR, nc[12];
	size_t clen = want + 1 + TAG;
	int ol = 0;
	rec[0] = 23;
	rec[1] = 3;
	rec[2] = 3;
	rec[3] = (uint8_t)(clen >> 8);
	rec[4] = (uint8_t)clen;
	make_nonce(iv, seq, nc);
	/* The header is the additional data. */
	if (o.EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nc) != 1 || o.EVP_EncryptUpdate(ctx, NULL, &ol, rec, HDR) != 1)
		return -1;
	for (size_t len = 0; len < want;) {
		cur_skip_done(c);
		size_t k = c->iov[c->i].iov_len - c->off;
		if (k > want - len)
			k = want - len;
		if (o.EVP_EncryptUpdate(ctx, out, &ol, (const uint8_t *)c->iov[c->i].iov_base + c->off, (int)k) != 1)
			return -1;
		out += ol;
		len += k;
		c->off += k;
	}
	static const uint8_t appdata = 23;
	if (o.EVP_EncryptUpdate(ctx, out, &ol, &appdata, 1) != 1)
		return -1;
	out += ol;
	if (o.EVP_EncryptFinal_ex(ctx, out, &ol) != 1)
		return -1;
	out += ol;
	if (o.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG, out) != 1)
		return -1;
	return (long)(HDR + clen);
}

/* open_one opens the whole record at rec (application data by its header,
 * at least TAG+1 bytes long) into dst, which has room for its ciphertext
 * less the tag and one byte: the last byte, the content type unless the
 * record is padded, is decrypted apart, so that a record opened where its
 * data goes writes nothing past that data. Returns the data's length with
 * the content type in *type; -1: the record failed authentication; -2: it
 * has no content type. */
static long open_one(EVP_CIPHER_CTX *ctx, const uint8_t iv[12], uint64_t seq, const uint8_t *rec, uint8_t *dst, uint8_t *type)
{
	const uint8_t *ct = rec + HDR;
	size_t inner = ((size_t)rec[3] << 8 | rec[4]) - TAG;
	uint8_t nc[12], last = 0, fin[16];
	int ol = 0;
	make_nonce(iv, seq, nc);
	if (o.EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nc) != 1 || o.EVP_DecryptUpdate(ctx, NULL, &ol, rec, HDR) != 1 ||
	    (inner > 1 && o.EVP_DecryptUpdate(ctx, dst, &ol, ct, (int)(inner - 1)) != 1) ||
	    o.EVP_DecryptUpdate(ctx, &last, &ol, ct + inner - 1, 1) != 1 ||
	    o.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG, (void *)(ct + inner)) != 1 ||
	    o.EVP_DecryptFinal_ex(ctx, fin, &ol) != 1)
		return -1;
	long i = (long)inner - 1;
	if (last != 0) {
		*type = last;
		return i;
	}
	for (i--; i >= 0 && dst[i] == 0; i--)
		; /* padding */
	if (i < 0)
		return -2;
	*type = dst[i];
	return i;
}

/* settle says what an opened record means: 0 for application data; else
 * -1, with the reason logged (a close_notify needs none). head is the
 * record's first data bytes. */
static int settle(long k, uint8_t type, const uint8_t *head)
{
	if (k == -1)
		gc_log("a TLS record from gpud failed authentication; reconnecting");
	else if (k < 0)
		gc_log("gpud sent a TLS record without a content type; reconnecting");
	else if (type == 23)
		return 0;
	else if (type == 21 && k == 2 && head[1] == 0)
		; /* close_notify */
	else if (type == 21 && k == 2)
		gc_log("gpud sent TLS alert %u; reconnecting", head[1]);
	else
		gc_log("gpud sent a TLS record of content type %u, which this library does not take; reconnecting", type);
	return -1;
}

/* ---- parallel records --------------------------------------------------
 *
 * A TLS 1.3 record depends only on the keys and its sequence number, so a
 * bulk transfer's records are sealed (or opened) by a few threads at once,
 * JOB_RECS records per job, while the calling thread does the socket I/O:
 * the sender writes job k's records, in order, while the threads seal the
 * jobs after it; the reader reads the next records while the threads open
 * the ones before, each straight into its place in the destination. The
 * place assumes the records before it are application data without
 * padding, as gpud sends; a padded record moves the data after it down
 * when its job is collected, anything else ends the connection as on the
 * serial path. An owner that comes to collect a job no thread has started
 * (the machine is busy) runs it itself, so the threads never cost more
 * than a hand-off. Transfers under PAR_MIN, every call and launch among
 * them, never touch the threads. */

#define PAR_MIN (8 * MAX_PLAIN)
#define MAX_THREADS 8
#define MAX_SLOTS (MAX_THREADS + 2)
#define QCAP (2 * MAX_SLOTS)

struct job {
	int open; /* 1: open records; 0: seal them */
	uint64_t gen, seq;
	uint8_t iv[12];
	uint8_t *buf; /* seal: where the records go; open: the first record */
	struct cur c; /* seal: the data */
	size_t len;   /* seal: bytes of data */
	size_t nrec;  /* open: records */
	uint8_t *dst; /* open: where their data goes */
	size_t out;   /* bytes of records sealed, of data opened */
	long err;     /* seal: -1; open: open_one's, or -3 for a record not application data */
	uint8_t type, head[2];
	_Atomic int state; /* JOB_* */
};

/* A job is queued for whichever takes it first: a pool thread, or its
 * owner when it comes to wait for it (so that a job no thread got to,
 * on a busy machine, costs no more than on the serial path). */
enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE, JOB_SETUP };

static struct {
	pthread_mutex_t mu;
	pthread_cond_t work, done;
	struct job *q[QCAP];
	unsigned qh, qt;
	int want;            /* threads: GPUCTL_TLS_THREADS, or from the CPUs */
	_Atomic int started; /* threads running; -1: none could start */
	unsigned nslots;
	uint8_t *txs[MAX_SLOTS]; /* tx_mu */
	struct job txjobs[MAX_SLOTS];
	uint8_t *rxs[MAX_SLOTS]; /* the reader's; rxs[0] is t.rxbuf between reads */
	struct job rxjobs[MAX_SLOTS];
} pool = {
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.work = PTHREAD_COND_INITIALIZER,
	.done = PTHREAD_COND_INITIALIZER,
};

static int pool_config(void)
{
	const char *v = getenv("GPUCTL_TLS_THREADS");
	if (v != NULL && *v != 0) {
		char *end;
		long k = strtol(v, &end, 10);
		if (*end != 0 || k < 0 || k > MAX_THREADS) {
			gc_log("GPUCTL_TLS_THREADS=%s: want a number from 0 to %d (threads that seal and open the records of "
			       "bulk copies; 0: none)",
			       v, MAX_THREADS);
			return -1;
		}
		pool.want = (int)k;
		return 0;
	}
	/* Past a few threads the socket copy, not the crypto, limits. */
	cpu_set_t set;
	int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
	pool.want = ncpu - 1 < 4 ? ncpu - 1 : 4;
	if (pool.want < 0)
		pool.want = 0;
	return 0;
}

static void run_seal(struct job *j, EVP_CIPHER_CTX *ctx)
{
	struct cur c = j->c;
	uint8_t *w = j->buf;
	uint64_t seq = j->seq;
	for (size_t left = j->len; left > 0;) {
		size_t want = left < MAX_PLAIN ? left : MAX_PLAIN;
		long r = seal_one(ctx, j->iv, seq++, w, &c, want);
		if (r < 0) {
			j->err = -1;
			return;
		}
		w += r;
		left -= want;
	}
	j->out = (size_t)(w - j->buf);
}

static void run_open(struct job *j, EVP_CIPHER_CTX *ctx)
{
	const uint8_t *r = j->buf;
	uint8_t *dst = j->dst;
	for (size_t i = 0; i < j->nrec; i++) {
		uint8_t type = 0;
		long k = open_one(ctx, j->iv, j->seq + i, r, dst, &type);
		if (k < 0 || type != 23) {
			j->err = k < 0 ? k : -3;
			j->type = type;
			j->head[0] = k > 0 ? dst[0] : 0;
			j->head[1] = k > 1 ? dst[1] : 0;
			j->out = (size_t)k; /* the failing record's length, for settle */
			return;
		}
		dst += k;
		r += HDR + ((size_t)r[3] << 8 | r[4]);
	}
	j->out = (size_t)(dst - j->dst);
}

static void *pool_main(void *arg)
{
	(void)arg;
	/* Each thread keeps its own copy of each direction's context, taken
	 * when the keys change (a new connection). */
	EVP_CIPHER_CTX *ctx[2] = { o.EVP_CIPHER_CTX_new(), o.EVP_CIPHER_CTX_new() };
	uint64_t gen[2] = { 0, 0 };
	for (;;) {
		pthread_mutex_lock(&pool.mu);
		while (pool.qh == pool.qt)
			pthread_cond_wait(&pool.work, &pool.mu);
		struct job *j = pool.q[pool.qh++ % QCAP];
		pthread_mutex_unlock(&pool.mu);
		int q = JOB_QUEUED;
		if (!atomic_compare_exchange_strong(&j->state, &q, JOB_RUNNING))
			continue; /* its owner took it (or an older entry of it was run) */
		EVP_CIPHER_CTX *c = ctx[j->open];
		if (c != NULL && gen[j->open] != j->gen) {
			if (o.EVP_CIPHER_CTX_copy(c, (j->open ? &t.rx : &t.tx)->tmpl) == 1)
				gen[j->open] = j->gen;
			else
				c = NULL;
		}
		if (c == NULL)
			j->err = -1;
		else if (j->open)
			run_open(j, c);
		else
			run_seal(j, c);
		pthread_mutex_lock(&pool.mu);
		atomic_store(&j->state, JOB_DONE);
		pthread_cond_broadcast(&pool.done);
		pthread_mutex_unlock(&pool.mu);
	}
	return NULL;
}

static void pool_after_fork(void)
{
	/* The threads stay in the parent. */
	pthread_mutex_init(&pool.mu, NULL);
	pthread_cond_init(&pool.work, NULL);
	pthread_cond_init(&pool.done, NULL);
	pool.qh = pool.qt = 0;
	atomic_store(&pool.started, 0);
}

/* pool_ready starts the threads the first time a bulk transfer wants
 * them. 1: they run; 0: seal and open on the calling thread. */
static int pool_ready(void)
{
	int st = atomic_load(&pool.started);
	if (st != 0 || pool.want == 0)
		return st > 0;
	pthread_mutex_lock(&pool.mu);
	if (atomic_load(&pool.started) == 0) {
		int n = 0;
		for (int i = 0; i < pool.want; i++)
			if (gc_start_thread(pool_main) == 0)
				n++;
		static int forks;
		if (n > 0 && !forks++)
			pthread_atfork(NULL, NULL, pool_after_fork);
		pool.nslots = (unsigned)n + 2;
		atomic_store(&pool.started, n > 0 ? n : -1);
		if (getenv("GPUCTL_DEBUG") != NULL)
			gc_log("TLS: %d of %d threads started to seal and open the records of bulk copies", n, pool.want);
	}
	pthread_mutex_unlock(&pool.mu);
	return atomic_load(&pool.started) > 0;
}

/* setup makes j the owner's to fill in: no thread takes it until
 * submit, even from a stale queue entry. */
static struct job *setup(struct job *j, int open, const struct dir *d, uint64_t seq)
{
	atomic_store(&j->state, JOB_SETUP);
	j->open = open;
	j->gen = d->gen;
	j->seq = seq;
	memcpy(j->iv, d->iv, 12);
	j->out = 0;
	j->err = 0;
	return j;
}

static void submit(struct job *j)
{
	pthread_mutex_lock(&pool.mu);
	atomic_store(&j->state, JOB_QUEUED);
	if (pool.qt - pool.qh == QCAP)
		pool.qh++; /* the oldest entry is stale, or its owner will run it */
	pool.q[pool.qt++ % QCAP] = j;
	pthread_cond_signal(&pool.work);
	pthread_mutex_unlock(&pool.mu);
}

/* wait_job: the job's owner collects it, running it itself with its
 * direction's own context if no thread has started it. */
static void wait_job(struct job *j, EVP_CIPHER_CTX *own)
{
	int q = JOB_QUEUED;
	if (atomic_compare_exchange_strong(&j->state, &q, JOB_RUNNING)) {
		if (j->open)
			run_open(j, own);
		else
			run_seal(j, own);
		atomic_store(&j->state, JOB_DONE);
		return;
	}
	pthread_mutex_lock(&pool.mu);
	while (atomic_load(&j->state) != JOB_DONE)
		pthread_cond_wait(&pool.done, &pool.mu);
	pthread_mutex_unlock(&pool.mu);
}

static int alloc_slots(uint8_t **slots, unsigned from)
{
	for (unsigned i = from; i < pool.nslots; i++)
		if (slots[i] == NULL && (slots[i] = malloc(SLOT_CAP)) == NULL)
			return -1;
	return 0;
}

/* par_send seals the iovec's total bytes on the threads and writes them
 * job by job, in order. 0, -1, or 1: no memory for it (seal serially). */
static int par_send(int fd, const struct iovec *iov, int n, size_t total)
{
	if (alloc_slots(pool.txs, 0) < 0)
		return 1;
	unsigned ns = pool.nslots, issued = 0, sent = 0;
	struct cur c = { iov, n, 0, 0 };
	uint64_t seq = t.tx.seq;
	size_t left = total;
	int rc = 0;
	for (;;) {
		while (rc == 0 && left > 0 && issued - sent < ns) {
			struct job *j = setup(&pool.txjobs[issued % ns], 0, &t.tx, seq);
			size_t len = left < JOB_RECS * MAX_PLAIN ? left : JOB_RECS * MAX_PLAIN;
			j->buf = pool.txs[issued % ns];
			j->c = c;
			j->len = len;
			cur_advance(&c, len);
			seq += (len + MAX_PLAIN - 1) / MAX_PLAIN;
			left -= len;
			submit(j);
			issued++;
		}
		if (sent == issued)
			break;
		struct job *j = &pool.txjobs[sent % ns];
		wait_job(j, t.tx.ctx);
		if (rc == 0 && (j->err != 0 || send_all(fd, j->buf, j->out) < 0))
			rc = -1; /* the jobs out still use the caller's data: collect them */
		sent++;
	}
	t.tx.seq = seq;
	return rc;
}

/* par_recv reads records into the receive slots and opens them on the
 * threads straight into p, while it reads the next ones; it takes whole
 * records whose data fits p and stops before one that does not. It reads
 * only while p still needs more than the records it has, so it never
 * waits for bytes gpud does not owe. Returns the bytes delivered to p (0:
 * take the serial path), -1, or -2 when the socket's receive timeout ran
 * out, as fill's. The reader's. */
static long par_recv(int fd, uint8_t *p, size_t n)
{
	pool.rxs[0] = t.rxbuf;
	if (alloc_slots(pool.rxs, 1) < 0)
		return 0;
	unsigned ns = pool.nslots, issued = 0, done = 0, cur = 0;
	uint8_t *s = t.rxbuf;
	size_t a = t.rpos, e = t.rlen; /* s[a:e] read, not yet given to a job */
	size_t next = 0, got = 0;      /* the next job's data goes at p+next; p[:got] is delivered */
	uint64_t seq = t.rx.seq;
	int rc = 0;
	for (;;) {
		/* The whole records at s[a:] that fit. */
		size_t at = a, opt = 0, nrec = 0;
		int more = 1; /* p takes more than these: more are owed */
		while (nrec < JOB_RECS) {
			if (e - at < HDR) {
				more = next + opt < n;
				break;
			}
			const uint8_t *h = s + at;
			size_t clen = (size_t)h[3] << 8 | h[4];
			if (h[0] != 23 || clen > MAX_CIPHER || clen < TAG + 1 || clen - TAG - 1 > n - next - opt) {
				more = 0; /* for the serial path */
				break;
			}
			if (e - at < HDR + clen)
				break;
			opt += clen - TAG - 1;
			at += HDR + clen;
			nrec++;
		}
		if (nrec < JOB_RECS && more && !(a == 0 && e == SLOT_CAP)) {
			if (e == SLOT_CAP) {
				memmove(s, s + a, e - a);
				e -= a;
				at -= a;
				a = 0;
			}
			ssize_t m = recv(fd, s + e, SLOT_CAP - e, 0);
			if (m < 0 && errno == EINTR)
				continue;
			if (m <= 0) {
				rc = m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? -2 : -1; /* -2: the silence bound */
				break;
			}
			e += (size_t)m;
			continue;
		}
		if (nrec == 0)
			break;
		/* The slot after this one takes what follows these records:
		 * free it if a job still holds it. */
		while (rc == 0 && issued - done >= ns - 1) {
			struct job *j = &pool.rxjobs[done % ns];
			wait_job(j, t.rx.ctx);
			if (j->err != 0) {
				settle(j->err == -3 ? (long)j->out : j->err, j->type, j->head);
				rc = -1;
			} else {
				if (j->dst != p + got)
					memmove(p + got, j->dst, j->out); /* a padded record came before */
				got += j->out;
			}
			done++;
		}
		if (rc != 0)
			break;
		struct job *j = setup(&pool.rxjobs[issued % ns], 1, &t.rx, seq);
		j->buf = s + a;
		j->nrec = nrec;
		j->dst = p + next;
		submit(j);
		issued++;
		seq += nrec;
		next += opt;
		unsigned nx = (cur + 1) % ns;
		memcpy(pool.rxs[nx], s + at, e - at);
		e -= at;
		a = 0;
		s = pool.rxs[nx];
		cur = nx;
		if (!more)
			break;
	}
	for (; done < issued; done++) {
		struct job *j = &pool.rxjobs[done % ns];
		wait_job(j, t.rx.ctx);
		if (rc != 0)
			continue;
		if (j->err != 0) {
			settle(j->err == -3 ? (long)j->out : j->err, j->type, j->head);
			rc = -1;
		} else {
			if (j->dst != p + got)
				memmove(p + got, j->dst, j->out);
			got += j->out;
		}
	}
	/* What was read and not opened stays for the next read, in the slot
	 * that becomes the receive buffer. */
	uint8_t *keep = pool.rxs[cur];
	pool.rxs[cur] = pool.rxs[0];
	pool.rxs[0] = keep;
	t.rxbuf = keep;
	t.rpos = a;
	t.rlen = e;
	t.rx.seq = seq;
	return rc < 0 ? rc : (long)got;
}

/* ---- sending and receiving -------------------------------------------- */

int gc_tls_send(int fd, const struct iovec *iov, int n)
{
	size_t total = 0;
	for (int i = 0; i < n; i++)
		total += iov[i].iov_len;
	if (total >= PAR_MIN && pool_ready()) {
		int r = par_send(fd, iov, n, total);
		if (r <= 0)
			return r;
	}
	struct cur c = { iov, n, 0, 0 };
	while (total > 0) {
		size_t used = 0;
		/* Records into txbuf while one more full record fits. */
		while (total > 0 && TX_CAP - used >= HDR + MAX_PLAIN + 1 + TAG) {
			size_t want = total < MAX_PLAIN ? total : MAX_PLAIN;
			long r = seal_one(t.tx.ctx, t.tx.iv, t.tx.seq, t.txbuf + used, &c, want);
			if (r < 0)
				return -1;
			t.tx.seq++;
			used += (size_t)r;
			total -= want;
		}
		if (send_all(fd, t.txbuf, used) < 0)
			return -1;
	}
	return 0;
}

/* fill reads until a whole record is buffered. 0, -1, or -2 when the
 * socket's receive timeout (the silence bound) ran out. */
static int fill(int fd)
{
	for (;;) {
		size_t have = t.rlen - t.rpos, need = HDR;
		if (have >= HDR) {
			size_t clen = (size_t)t.rxbuf[t.rpos + 3] << 8 | t.rxbuf[t.rpos + 4];
			if (clen > MAX_CIPHER) {
				gc_log("gpud sent a TLS record of %zu bytes, over the limit; reconnecting", clen);
				return -1;
			}
			need += clen;
		}
		if (have >= need)
			return 0;
		if (RX_CAP - t.rpos < need) {
			memmove(t.rxbuf, t.rxbuf + t.rpos, have);
			t.rpos = 0;
			t.rlen = have;
		}
		ssize_t m = recv(fd, t.rxbuf + t.rlen, RX_CAP - t.rlen, 0);
		if (m < 0 && errno == EINTR)
			continue;
		if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -2;
		if (m <= 0)
			return -1;
		t.rlen += (size_t)m;
	}
}

/* open_record opens the buffered record into dst (room for its inner
 * plaintext less one byte) and returns the application data's length, or
 * -1. */
static long open_record(uint8_t *dst)
{
	const uint8_t *hdr = t.rxbuf + t.rpos;
	size_t clen = (size_t)hdr[3] << 8 | hdr[4];
	if (hdr[0] != 23 || clen < TAG + 1) {
		gc_log("gpud sent a TLS record this library does not take (type %u, %zu bytes); reconnecting", hdr[0], clen);
		return -1;
	}
	uint8_t type = 0;
	long k = open_one(t.rx.ctx, t.rx.iv, t.rx.seq, hdr, dst, &type);
	if (settle(k, type, dst) < 0)
		return -1;
	t.rx.seq++;
	t.rpos += HDR + clen;
	return k;
}

int gc_tls_recv(int fd, void *p, size_t n)
{
	uint8_t *b = p;
	while (n > 0) {
		if (t.ppos < t.plen) {
			size_t k = t.plen - t.ppos < n ? t.plen - t.ppos : n;
			memcpy(b, t.plain + t.ppos, k);
			t.ppos += k;
			b += k;
			n -= k;
			continue;
		}
		if (n >= PAR_MIN && pool_ready()) {
			long k = par_recv(fd, b, n);
			if (k < 0)
				return (int)k;
			b += k;
			n -= (size_t)k;
			if (n == 0)
				break;
		}
		int rc = fill(fd);
		if (rc < 0)
			return rc;
		size_t inner = (((size_t)t.rxbuf[t.rpos + 3] << 8) | t.rxbuf[t.rpos + 4]) - TAG;
		if (inner >= 1 && n >= inner - 1) {
			/* Straight into the caller's buffer: a bulk reply is
			 * opened where it is to land. */
			long k = open_record(b);
			if (k < 0)
				return -1;
			b += k;
			n -= (size_t)k;
		} else {
			long k = open_record(t.plain);
			if (k < 0)
				return -1;
			t.ppos = 0;
			t.plen = (size_t)k;
		}
	}
	return 0;
}
