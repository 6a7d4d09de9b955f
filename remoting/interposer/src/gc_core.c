/* gpuctl client transport: one connection to gpud per process, a ring of
 * requests, a flusher thread, leader/follower reply reading, and
 * reconnect with replay.
 *
 * The ring holds every request from the moment it is queued until the
 * server has executed it (and, for a synchronous request, until its reply
 * arrived), so that after a lost connection everything not executed can
 * be sent again. A request's sequence number is its ring position plus
 * one: positions only grow, so sequence numbers are strictly increasing in
 * send order, as the protocol requires.
 *
 * Producers reserve ring space with a compare-and-swap on head and publish
 * a record by storing its state with release order: queuing an
 * asynchronous request takes no lock and allocates nothing. The flusher
 * thread (or a synchronous caller, to save a thread hand-off) writes
 * published records in ring order with writev; bulk data of synchronous
 * copies goes from the caller's buffer straight to the socket.
 *
 * Replies are read by whichever waiting thread is the current reader (the
 * leader); it delivers other threads' replies into their buffers, bulk
 * data straight into the destination, and wakes them.
 *
 * Lock order: reader role, then tx_mu, then rx_mu.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "gc_core.h"
#include "gc_tls.h"
#include "../gen/gc_ops.h"

#define RING_SIZE ((uint64_t)8 << 20)
#define RING_MASK (RING_SIZE - 1)
#define ASYNC_INLINE_MAX ((uint64_t)64 << 10)
#define IOV_BATCH 64

enum { REC_EMPTY = 0, REC_READY = 1, REC_PAD = 2 };

struct gc_waiter {
	int done; /* under rx_mu */
	int deferred; /* lives in its ring record; nobody waits for it */
	CUresult res;
	uint8_t *out;
	size_t out_cap;
	uint32_t out_len;
	uint8_t *bulk;
	uint64_t bulk_len;
};

/* A ring record: bookkeeping, then the request frame as sent. */
struct gc_rec {
	_Atomic uint32_t state;
	uint32_t size; /* bytes this record takes in the ring */
	const void *bulk; /* synchronous bulk by reference */
	uint64_t bulk_len;
	struct gc_waiter *w; /* synchronous waiter */
	uint64_t seq;
	uint32_t replied; /* under rx_mu */
	uint32_t frame_len;
	uint8_t frame[];
};
_Static_assert(sizeof(struct gc_rec) == 48, "ring record header");

static struct {
	pthread_once_t once;
	CUresult init_res;
	_Atomic int inited;

	char server[GC_MAX_MESSAGE + 1];
	char token[GC_MAX_TOKEN + 1];
	char sid[GC_MAX_SESSION_ID + 1];
	char secret[GC_MAX_SECRET + 1];
	/* The new session's attributes (GPUCTL_PRIORITY, GPUCTL_LABELS), as
	 * the Hello carries them; attrs_len 0 when neither is set. */
	uint8_t attrs[GC_MAX_ATTRS];
	size_t attrs_len;
	_Atomic uint32_t max_frame; /* the server's, from the latest Welcome */
	double reconnect_timeout;
	/* reply_timeout: GPUCTL_REPLY_TIMEOUT, the silence a waiting reader
	 * accepts from a server that sends keepalives; silence_s: the bound
	 * in force on the current connection (0: none). */
	double reply_timeout;
	_Atomic double silence_s;

	uint8_t *ring;
	_Atomic uint64_t head;     /* reserved up to */
	_Atomic uint64_t tail;     /* freed up to */
	_Atomic uint64_t sent_pub; /* sent, for readers without tx_mu */
	/* handed: handed to the socket up to. It moves before the write,
	 * sent_pub after it: a reply can arrive, and be read by another
	 * thread, as soon as the request's last byte leaves, before sendmsg
	 * returns, so the reader matches replies to records below handed.
	 * Records are freed only below sent_pub, never while being written. */
	_Atomic uint64_t handed;
	uint64_t sent; /* written to the socket up to; tx_mu */
	_Atomic int ack_pending;

	pthread_mutex_t tx_mu;
	_Atomic int fd;
	_Atomic uint64_t gen; /* connection generation */

	pthread_mutex_t rx_mu;
	pthread_cond_t rx_cond;
	int rx_leader;     /* rx_mu */
	uint64_t executed; /* rx_mu */

	_Atomic int dead;
	CUresult dead_res;
	_Atomic uint32_t doorbell;
	_Atomic int flusher_sleeping;

	/* Deferred requests (device-to-host copies into page-locked memory)
	 * whose replies have not been delivered; the deferred reader thread
	 * reads while it is not 0. features: the current server's Welcome. */
	_Atomic uint32_t deferred_pending;
	_Atomic uint32_t features;
	pthread_once_t dreader_once;
	_Atomic int dreader_running;

	/* opener: the process that opened the session, the only one that
	 * says goodbye for it (a forked child shares the connection, not the
	 * session). bye: the goodbye was sent; the session is over. */
	pid_t opener;
	_Atomic int bye;
} g = {
	.dreader_once = PTHREAD_ONCE_INIT,
	.once = PTHREAD_ONCE_INIT,
	.tx_mu = PTHREAD_MUTEX_INITIALIZER,
	.rx_mu = PTHREAD_MUTEX_INITIALIZER,
	.rx_cond = PTHREAD_COND_INITIALIZER,
	.fd = -1,
};

void gc_log(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if (n > (int)sizeof buf - 2)
		n = sizeof buf - 2;
	buf[n++] = '\n';
	/* One write so that lines of concurrent threads do not interleave. */
	char line[1100];
	int m = snprintf(line, sizeof line, "gpuctl: %.*s", n, buf);
	if (m > 0) {
		ssize_t rc = write(2, line, (size_t)m < sizeof line ? (size_t)m : sizeof line - 1);
		(void)rc;
	}
}

int gc_unsupported(const char *name, int *once)
{
	if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
		gc_log("%s is not supported; returning CUDA_ERROR_NOT_SUPPORTED", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static inline struct gc_rec *rec_at(uint64_t pos) { return (struct gc_rec *)(g.ring + (pos & RING_MASK)); }

static void set_dead(CUresult res, const char *why)
{
	if (atomic_exchange(&g.dead, 1))
		return;
	g.dead_res = res;
	gc_log("the session is lost (%s); every CUDA call now fails with error %d", why, (int)res);
	pthread_mutex_lock(&g.rx_mu);
	pthread_cond_broadcast(&g.rx_cond);
	pthread_mutex_unlock(&g.rx_mu);
}

CUresult gc_rd_check(struct gc_rd *d, const char *op)
{
	if (d->bad || d->off != d->n) {
		gc_log("malformed reply to %s (%zu bytes); the server speaks another protocol", op, d->n);
		return CUDA_ERROR_UNKNOWN;
	}
	return CUDA_SUCCESS;
}

/* ---- connection ------------------------------------------------------ */

static int write_full(int fd, const void *p, size_t n)
{
	if (gc_tls_user_tx()) {
		struct iovec v = { (void *)p, n };
		return gc_tls_send(fd, &v, 1);
	}
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t m = send(fd, b, n, MSG_NOSIGNAL);
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		b += m;
		n -= (size_t)m;
	}
	return 0;
}

/* read_full reads n bytes: 0, or -1 when the connection failed, or -2
 * when the socket's receive timeout (the silence bound) ran out. */
static int read_full(int fd, void *p, size_t n)
{
	if (gc_tls_user_rx())
		return gc_tls_recv(fd, p, n);
	uint8_t *b = p;
	while (n > 0) {
		ssize_t m = recv(fd, b, n, MSG_WAITALL);
		if (m < 0 && errno == EINTR)
			continue;
		if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return -2;
		if (m <= 0)
			return -1;
		b += m;
		n -= (size_t)m;
	}
	return 0;
}

static int discard(int fd, uint64_t n)
{
	uint8_t buf[4096];
	while (n > 0) {
		size_t m = n < sizeof buf ? n : sizeof buf;
		int rc = read_full(fd, buf, m);
		if (rc < 0)
			return rc;
		n -= m;
	}
	return 0;
}

static int dial(const char *addr)
{
	char host[256], port[16];
	const char *colon = strrchr(addr, ':');
	if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof host || strlen(colon + 1) >= sizeof port)
		return -1;
	memcpy(host, addr, colon - addr);
	host[colon - addr] = 0;
	strcpy(port, colon + 1);
	/* Accept [v6]:port. */
	char *h = host;
	if (h[0] == '[' && h[strlen(h) - 1] == ']') {
		h[strlen(h) - 1] = 0;
		h++;
	}
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	if (getaddrinfo(h, port, &hints, &res) != 0)
		return -1;
	int fd = -1;
	for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			continue;
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
			struct pollfd pfd = { fd, POLLOUT, 0 };
			int err = 0;
			socklen_t el = sizeof err;
			if (poll(&pfd, 1, 3000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
				break;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return -1;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	/* Notice a peer that vanished without closing (a cut link): keepalive
	 * for an idle connection, a user timeout for unacknowledged data. */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
	int idle = 10, intvl = 3, cnt = 4, utimeout = 30000;
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &utimeout, sizeof utimeout);
	return fd;
}

/* connect_server dials addr and, with TLS on, runs the TLS handshake.
 * Returns the socket, -1 when it failed in a way worth retrying, or -2 when
 * it cannot work (why is in err). */
static int connect_server(const char *addr, char *err, size_t errlen)
{
	err[0] = 0;
	int fd = dial(addr);
	if (fd < 0 || !gc_tls_enabled())
		return fd;
	int rc = gc_tls_connect(fd, addr, err, errlen);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

/* tls_required is the one line for a plaintext client that reached a gpud
 * serving --listen over TLS. */
#define TLS_REQUIRED_FMT \
	"gpud at %s serves --listen over TLS: set GPUCTL_TLS_CA to the CA that signed its certificate (gpuctl run --tls-ca FILE)"

struct welcome {
	uint16_t status;
	uint16_t features;
	uint32_t max_frame;
	uint32_t keepalive_ms;
	uint64_t last_executed;
	char sid[GC_MAX_SESSION_ID + 1];
	char secret[GC_MAX_SECRET + 1];
	char msg[GC_MAX_MESSAGE + 1];
};

/* handshake sends a Hello and reads the Welcome. -1: I/O failure (the
 * connection broke); -2: the peer is not a gpuctl server of this
 * protocol version. */
static int handshake(int fd, int resume, uint64_t last_seq, struct welcome *w)
{
	size_t tl = strlen(g.token), sl = resume ? strlen(g.sid) : 0, cl = resume ? strlen(g.secret) : 0;
	size_t al = resume ? 0 : g.attrs_len; /* a resumed session has its attributes */
	uint8_t b[GC_HELLO_SIZE + GC_MAX_TOKEN + GC_MAX_SESSION_ID + GC_MAX_SECRET + GC_MAX_ATTRS];
	struct gc_hello_hdr hh = {
		.version = GC_PROTO_VERSION,
		.flags = (resume ? GC_HELLO_RESUME : 0) | GC_HELLO_KEEPALIVE,
		.token_len = (uint16_t)tl,
		.session_id_len = (uint16_t)sl,
		.secret_len = (uint16_t)cl,
		.attrs_len = (uint16_t)al,
		.last_seq = last_seq,
	};
	memcpy(hh.magic, GC_HELLO_MAGIC, 4);
	memcpy(b, &hh, sizeof hh);
	memcpy(b + GC_HELLO_SIZE, g.token, tl);
	memcpy(b + GC_HELLO_SIZE + tl, g.sid, sl);
	memcpy(b + GC_HELLO_SIZE + tl + sl, g.secret, cl);
	memcpy(b + GC_HELLO_SIZE + tl + sl + cl, g.attrs, al);
	struct timeval tv = { 10, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	if (write_full(fd, b, GC_HELLO_SIZE + tl + sl + cl + al) < 0)
		return -1;
	struct gc_welcome_hdr wh;
	if (read_full(fd, &wh, sizeof wh) < 0)
		return -1;
	if (memcmp(wh.magic, GC_WELCOME_MAGIC, 4) != 0 || wh.version != GC_PROTO_VERSION)
		return -2;
	w->status = wh.status;
	size_t wsl = wh.session_id_len, wcl = wh.secret_len, wml = wh.message_len;
	w->max_frame = wh.max_frame;
	w->features = wh.features;
	w->keepalive_ms = wh.keepalive_ms;
	w->last_executed = wh.last_executed;
	if (wsl > GC_MAX_SESSION_ID || wcl > GC_MAX_SECRET || wml > GC_MAX_MESSAGE)
		return -2;
	if (read_full(fd, w->sid, wsl) < 0 || read_full(fd, w->secret, wcl) < 0 || read_full(fd, w->msg, wml) < 0)
		return -1;
	w->sid[wsl] = w->secret[wcl] = w->msg[wml] = 0;
	if (w->status == GC_STATUS_OK && w->max_frame < GC_MIN_MAX_FRAME)
		return -2;
	/* A server that sends keepalives is never silent while it works for
	 * us: from now on a read that waits longer than the bound gives up on
	 * the connection, and the reconnect replays. Without keepalives a
	 * long call could not be told from a stall, and reads wait. */
	double bound = 0;
	if (w->status == GC_STATUS_OK && w->keepalive_ms > 0 && g.reply_timeout > 0) {
		bound = g.reply_timeout;
		if (bound < 3 * w->keepalive_ms / 1000.0)
			bound = 3 * w->keepalive_ms / 1000.0;
	}
	tv.tv_sec = (time_t)bound;
	tv.tv_usec = (suseconds_t)((bound - (double)tv.tv_sec) * 1e6);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	atomic_store(&g.silence_s, bound);
	return 0;
}

/* ---- failpoints (test builds only) ------------------------------------ */

#ifdef GC_FAILPOINTS
/* Built with -DGC_FAILPOINTS by the interposer's tests, never by make.
 * GPUCTL_FAILPOINT=after-resend holds the flusher thread, once it has
 * written again, after a reconnect, a synchronous request that another
 * thread waits on, until the reader has handled the next reply, for at
 * most two seconds: the reply to the request is then read while the
 * flusher is still inside flush_some, the window in which a reply can
 * overtake the sender's bookkeeping. */
static _Atomic uint64_t fp_frames; /* replies rx_one has delivered or dropped */
static uint64_t fp_resend_end;      /* records below it are resends; tx_mu */

static void fp_after_resend(void)
{
	static int armed = -1;
	if (armed < 0) {
		const char *v = getenv("GPUCTL_FAILPOINT");
		armed = v != NULL && strcmp(v, "after-resend") == 0;
	}
	if (!armed)
		return;
	static _Atomic int logged;
	if (!atomic_exchange(&logged, 1))
		gc_log("failpoint after-resend: holding the sender until the reply is handled");
	uint64_t seen = atomic_load(&fp_frames);
	for (int i = 0; i < 2000 && atomic_load(&fp_frames) == seen; i++)
		sleep_s(0.001);
}
#endif

/* ---- sending --------------------------------------------------------- */

/* flush_some writes published records from g.sent on, up to limit.
 * Returns the number of records written, 0 if none is ready, -1 on a
 * connection failure. tx_mu held. */
static int flush_some(uint64_t limit)
{
	struct iovec iov[IOV_BATCH];
	int n = 0, recs = 0;
#ifdef GC_FAILPOINTS
	int syncs = 0;
#endif
	uint64_t pos = g.sent, head = atomic_load(&g.head);
	if (head > limit)
		head = limit;
	while (pos < head && n < IOV_BATCH - 1) {
		struct gc_rec *r = rec_at(pos);
		uint32_t st = atomic_load_explicit(&r->state, memory_order_acquire);
		if (st == REC_PAD) {
			pos += r->size;
			continue;
		}
		if (st != REC_READY)
			break;
#ifdef GC_FAILPOINTS
		syncs += r->w != NULL && pos < fp_resend_end;
#endif
		iov[n].iov_base = r->frame;
		iov[n++].iov_len = r->frame_len;
		if (r->bulk_len > 0) {
			iov[n].iov_base = (void *)r->bulk;
			iov[n++].iov_len = r->bulk_len;
		}
		pos += r->size;
		recs++;
	}
	if (n == 0) {
		if (pos != g.sent) {
			g.sent = pos;
			atomic_store(&g.handed, pos);
			atomic_store(&g.sent_pub, pos);
		}
		return 0;
	}
	/* Before the write: the reply to the last record may be read by
	 * another thread before sendmsg returns here. A failed write is
	 * followed by a reconnect, which sets the mark back. */
	atomic_store(&g.handed, pos);
	int fd = atomic_load(&g.fd);
	if (gc_tls_user_tx()) {
		if (gc_tls_send(fd, iov, n) < 0)
			return -1;
		n = 0;
	}
	struct iovec *v = iov;
	while (n > 0) {
		/* sendmsg rather than writev: MSG_NOSIGNAL keeps a closed
		 * connection from raising SIGPIPE in the application. */
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = (size_t)n };
		ssize_t m = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			return -1;
		while (n > 0 && (size_t)m >= v->iov_len) {
			m -= v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (uint8_t *)v->iov_base + m;
			v->iov_len -= m;
		}
	}
	g.sent = pos;
#ifdef GC_FAILPOINTS
	if (limit == UINT64_MAX && syncs > 0)
		fp_after_resend();
#endif
	atomic_store(&g.sent_pub, pos);
	return recs;
}

static void conn_lost(uint64_t gen, int is_leader, const char *why, const char *moved);

/* tx_flush_to makes sure everything before end is on the wire. It never
 * writes past end and never waits for tx_mu once end has been sent by
 * someone else: a caller that must read its reply next must not be held
 * up behind a writer the server is not reading from. */
static void tx_flush_to(uint64_t end)
{
	int spins = 0;
	while (atomic_load(&g.sent_pub) < end && !atomic_load(&g.dead)) {
		if (pthread_mutex_trylock(&g.tx_mu) != 0) {
			if (++spins < 50)
				sched_yield();
			else
				sleep_s(20e-6);
			continue;
		}
		int rc = 0;
		while (g.sent < end && !atomic_load(&g.dead) && (rc = flush_some(end)) > 0)
			;
		uint64_t gen = atomic_load(&g.gen);
		pthread_mutex_unlock(&g.tx_mu);
		if (rc < 0)
			conn_lost(gen, 0, "write failed", NULL);
		else if (rc == 0 && atomic_load(&g.sent_pub) < end)
			sched_yield(); /* an earlier producer is still filling in its record */
	}
}

static void futex_wait(_Atomic uint32_t *addr, uint32_t val, long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* ready_unsent: a published record waits to be sent. tx_mu held, which
 * keeps the record at g.sent from being freed while it is looked at. */
static int ready_unsent_locked(void)
{
	return g.sent < atomic_load(&g.head) &&
	       atomic_load_explicit(&rec_at(g.sent)->state, memory_order_acquire) != REC_EMPTY;
}

static void *flusher(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&g.tx_mu);
		int rc = 0;
		while (!atomic_load(&g.dead) && (rc = flush_some(UINT64_MAX)) > 0)
			;
		uint64_t gen = atomic_load(&g.gen);
		pthread_mutex_unlock(&g.tx_mu);
		if (rc < 0) {
			conn_lost(gen, 0, "write failed", NULL);
			continue;
		}
		/* Sleep until a producer rings. Producers ring only while the
		 * flag is set, so look once more after setting it. */
		atomic_store(&g.flusher_sleeping, 1);
		atomic_thread_fence(memory_order_seq_cst);
		uint32_t db = atomic_load(&g.doorbell);
		pthread_mutex_lock(&g.tx_mu);
		int more = ready_unsent_locked();
		pthread_mutex_unlock(&g.tx_mu);
		if (!more || atomic_load(&g.dead))
			futex_wait(&g.doorbell, db, 200);
		atomic_store(&g.flusher_sleeping, 0);
	}
	return NULL;
}

static inline void ring_doorbell(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&g.flusher_sleeping, memory_order_relaxed)) {
		atomic_fetch_add(&g.doorbell, 1);
		futex_wake(&g.doorbell);
	}
}

/* ---- receiving ------------------------------------------------------- */

/* advance_tail frees records the server has executed (and, if
 * synchronous, answered). rx_mu held. Freed bytes are zeroed so that a
 * stale record state can never be mistaken for a published one. */
static void advance_tail(void)
{
	uint64_t t0 = atomic_load(&g.tail), t = t0, s = atomic_load(&g.sent_pub);
	while (t < s) {
		struct gc_rec *r = rec_at(t);
		uint32_t st = atomic_load_explicit(&r->state, memory_order_acquire);
		if (st != REC_PAD) {
			if (r->seq > g.executed || (r->w != NULL && !r->replied))
				break;
		}
		t += r->size;
	}
	if (t == t0)
		return;
	for (uint64_t p = t0; p < t;) {
		uint64_t off = p & RING_MASK, n = t - p;
		if (off + n > RING_SIZE)
			n = RING_SIZE - off;
		memset(g.ring + off, 0, n);
		p += n;
	}
	atomic_store_explicit(&g.tail, t, memory_order_release);
	/* A producer waiting for ring space may be a follower of a reader
	 * that stays (the deferred reader): tell it. */
	pthread_cond_broadcast(&g.rx_cond);
}

static void note_executed(uint64_t e)
{
	if (e > g.executed) {
		g.executed = e;
		advance_tail();
	}
}

/* silence_why says why the reader gave up on a silent connection. */
static const char *silence_why(void)
{
	static _Thread_local char why[96];
	snprintf(why, sizeof why, "no reply and no keepalive for %.0f s (GPUCTL_REPLY_TIMEOUT)", atomic_load(&g.silence_s));
	return why;
}

/* rx_one reads and handles one server frame. The caller is the reader.
 * Returns 0, or -1 when the connection failed (conn_lost was called). */
static int rx_one(void)
{
	int fd = atomic_load(&g.fd);
	uint64_t gen = atomic_load(&g.gen);
	struct gc_rep_hdr h;
	int hrc = fd < 0 ? -1 : read_full(fd, &h, sizeof h);
	if (hrc < 0) {
		conn_lost(gen, 1, hrc == -2 ? silence_why() : "connection closed", NULL);
		return -1;
	}
	uint32_t len = h.len;
	uint16_t kind = h.kind;
	CUresult res = (CUresult)h.result;
	uint64_t seq = h.seq, executed = h.executed, bulk = h.bulk;
	int rc0;
	if (len > g.max_frame) {
		set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, "the server sent an oversized frame");
		return -1;
	}
	switch (kind) {
	case GC_KIND_ACK:
	case GC_KIND_KEEPALIVE:
		pthread_mutex_lock(&g.rx_mu);
		if (kind == GC_KIND_ACK)
			atomic_store(&g.ack_pending, 0);
		note_executed(executed); /* 0 from gpud's keepalives: no change */
		pthread_mutex_unlock(&g.rx_mu);
		if ((rc0 = discard(fd, len + bulk)) < 0) {
			conn_lost(gen, 1, rc0 == -2 ? silence_why() : "connection closed", NULL);
			return -1;
		}
		return 0;
	case GC_KIND_MOVED:
	case GC_KIND_CLOSING: {
		char msg[GC_MAX_MESSAGE + 1];
		if (len > GC_MAX_MESSAGE || (rc0 = read_full(fd, msg, len)) < 0) {
			conn_lost(gen, 1, len <= GC_MAX_MESSAGE && rc0 == -2 ? silence_why() : "connection closed", NULL);
			return -1;
		}
		msg[len] = 0;
		if (kind == GC_KIND_MOVED) {
			conn_lost(gen, 1, "session moved", msg);
		} else {
			char why[GC_MAX_MESSAGE + 64];
			snprintf(why, sizeof why, "the server closed the connection: %s", msg);
			set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, why);
		}
		return -1;
	}
	case GC_KIND_REPLY:
		break;
	default:
		set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, "the server sent an unknown frame kind");
		return -1;
	}

	/* Find the waiting request. Its record stays in the ring until it is
	 * marked replied, so the lookup is safe without a lock. The bound is
	 * handed, what was handed to the socket, not sent_pub: the reply to a
	 * request can arrive before the thread that wrote it has returned
	 * from the write and published it as sent (the flusher resending
	 * after a reconnect while this thread reads, or another thread's
	 * request), and a reply dropped as a duplicate leaves its caller
	 * waiting forever. */
	struct gc_waiter *w = NULL;
	struct gc_rec *r = NULL;
	uint64_t pos = seq - 1;
	if (seq != 0 && pos >= atomic_load(&g.tail) && pos < atomic_load(&g.handed)) {
		r = rec_at(pos);
		if (r->seq == seq && r->w != NULL && !r->replied)
			w = r->w;
	}
	int rc = 0;
	CUresult wres = res;
	uint32_t out_len = 0;
	if (w == NULL) {
		/* A reply to a request already answered (resent after a
		 * reconnect): drop it. */
		rc = discard(fd, len + bulk);
	} else {
		if (len <= w->out_cap) {
			rc = read_full(fd, w->out, len);
			out_len = len;
		} else {
			rc = discard(fd, len);
			wres = CUDA_ERROR_UNKNOWN;
			gc_log("reply of %u bytes exceeds the %zu expected", len, w->out_cap);
		}
		if (rc == 0 && bulk > 0) {
			if (bulk == w->bulk_len)
				rc = read_full(fd, w->bulk, bulk);
			else {
				rc = discard(fd, bulk);
				wres = CUDA_ERROR_UNKNOWN;
				gc_log("bulk reply of %llu bytes where %llu were expected", (unsigned long long)bulk,
				       (unsigned long long)w->bulk_len);
			}
		}
	}
	if (rc < 0) {
		/* A reply cut short is asked for again after the reconnect. */
		conn_lost(gen, 1, rc == -2 ? silence_why() : "connection closed", NULL);
		return -1;
	}
	pthread_mutex_lock(&g.rx_mu);
	if (w != NULL) {
		int deferred = w->deferred;
		w->res = wres;
		w->out_len = out_len;
		w->done = 1;
		r->replied = 1;
		/* A deferred reply's data is in place: from now on a later
		 * reply (a stream or event query) may say so. Its failure was
		 * kept by the server as the context's pending error. */
		if (deferred)
			atomic_fetch_sub(&g.deferred_pending, 1);
		pthread_cond_broadcast(&g.rx_cond);
		/* A replayed reply can answer a request the server executed
		 * long ago, so the tail may move without executed changing. */
		advance_tail();
	}
	note_executed(executed);
	pthread_mutex_unlock(&g.rx_mu);
#ifdef GC_FAILPOINTS
	atomic_fetch_add(&fp_frames, 1); /* this reply is delivered or dropped */
#endif
	return 0;
}

/* RX_DEFERRED as rx_wait's want_tail: wait until no deferred reply is
 * outstanding. */
#define RX_DEFERRED UINT64_MAX

static int rx_done(struct gc_waiter *w, uint64_t want_tail)
{
	if (w != NULL)
		return w->done;
	if (want_tail == RX_DEFERRED)
		return atomic_load(&g.deferred_pending) == 0;
	return atomic_load(&g.tail) >= want_tail;
}

/* rx_wait waits until w is answered (w != NULL) or the ring's tail
 * reaches want_tail, reading replies itself when no other thread is. */
static void rx_wait(struct gc_waiter *w, uint64_t want_tail)
{
	pthread_mutex_lock(&g.rx_mu);
	for (;;) {
		if (rx_done(w, want_tail))
			break;
		if (atomic_load(&g.dead)) {
			if (w != NULL) {
				w->res = g.dead_res;
				w->done = 1;
			}
			break;
		}
		if (g.rx_leader) {
			pthread_cond_wait(&g.rx_cond, &g.rx_mu);
			continue;
		}
		g.rx_leader = 1;
		while (!rx_done(w, want_tail) && !atomic_load(&g.dead)) {
			pthread_mutex_unlock(&g.rx_mu);
			rx_one();
			pthread_mutex_lock(&g.rx_mu);
		}
		g.rx_leader = 0;
		pthread_cond_broadcast(&g.rx_cond);
	}
	pthread_mutex_unlock(&g.rx_mu);
}

/* ---- known gpuds ----------------------------------------------------- */

/* The gpuds this client knows: GPUCTL_SERVER, the GPUCTL_SERVERS list,
 * and every address it was sent to (a migration's "moved", a clustered
 * gpud's answer from the registry). A reconnect that fails at the current
 * one asks the others, which send it on to where its session lives now.
 * Touched only at start and by the reconnecting thread (tx_mu held). */
#define GC_MAX_SERVERS 16
static struct {
	char addr[GC_MAX_SERVERS][GC_MAX_MESSAGE + 1];
	int n;
} known;

static void known_add(const char *addr)
{
	if (addr == NULL || addr[0] == 0)
		return;
	for (int i = 0; i < known.n; i++)
		if (strcmp(known.addr[i], addr) == 0)
			return;
	if (known.n == GC_MAX_SERVERS)
		return;
	snprintf(known.addr[known.n++], sizeof known.addr[0], "%s", addr);
}

/* known_index is g.server's place in the list (known.n if absent). */
static int known_index(void)
{
	int i = 0;
	while (i < known.n && strcmp(known.addr[i], g.server) != 0)
		i++;
	return i;
}

/* known_next makes g.server the known gpud after it. */
static void known_next(void)
{
	int i = known_index();
	snprintf(g.server, sizeof g.server, "%s", known.addr[i < known.n ? (i + 1) % known.n : 0]);
}

/* known_parse adds a comma-separated list of HOST:PORT. */
static void known_parse(const char *list)
{
	while (list != NULL && *list != 0) {
		const char *end = strchr(list, ',');
		size_t n = end != NULL ? (size_t)(end - list) : strlen(list);
		char a[GC_MAX_MESSAGE + 1];
		while (n > 0 && *list == ' ')
			list++, n--;
		while (n > 0 && list[n - 1] == ' ')
			n--;
		if (n > 0 && n < sizeof a) {
			memcpy(a, list, n);
			a[n] = 0;
			known_add(a);
		}
		list = end != NULL ? end + 1 : NULL;
	}
}

/* ---- reconnect ------------------------------------------------------- */

/* reconnect_locked replaces the connection and resends every request the
 * server has not executed (and every synchronous request not answered:
 * the server replays its reply). The caller is the reader and holds
 * tx_mu. */
static void reconnect_locked(const char *why, const char *moved)
{
	int old = atomic_exchange(&g.fd, -1);
	if (old >= 0)
		close(old);
	if (moved != NULL) {
		snprintf(g.server, sizeof g.server, "%s", moved);
		known_add(g.server);
		gc_log("session moved to %s; reconnecting", g.server);
	} else {
		gc_log("lost the connection to %s (%s); reconnecting", g.server, why);
	}
	double deadline = now_s() + g.reconnect_timeout, backoff = 0.01;
	/* tried counts this round over the known gpuds; unknown marks those
	 * that said they do not know the session. */
	int moves = 0, tried = 0, told = 0, told_preempted = 0;
	uint32_t unknown = 0;
	for (;;) {
		struct welcome w;
		char terr[GC_MAX_MESSAGE + 512];
		int fd = connect_server(g.server, terr, sizeof terr);
		if (fd == -2) {
			set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, terr);
			return;
		}
		if (fd >= 0 && handshake(fd, 1, atomic_load(&g.head), &w) == 0) {
			pthread_mutex_lock(&g.rx_mu);
			uint64_t seen = g.executed;
			pthread_mutex_unlock(&g.rx_mu);
			if (w.status == GC_STATUS_OK && w.last_executed < seen) {
				/* The session went back in time: it was restored
				 * from a state older than what the server already
				 * acknowledged, and the requests in between were
				 * freed here. Continuing would hang or compute on
				 * stale device memory; fail every call instead. */
				char m[GC_MAX_MESSAGE + 192];
				snprintf(m, sizeof m,
					 "%s resumed the session at request %llu, but requests up to %llu had been acknowledged; "
					 "device state was lost, restart the program",
					 g.server, (unsigned long long)w.last_executed, (unsigned long long)seen);
				close(fd);
				set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, m);
				return;
			}
			if (w.status == GC_STATUS_OK) {
				atomic_store(&g.fd, fd);
				g.max_frame = w.max_frame;
				atomic_store(&g.features, w.features);
				pthread_mutex_lock(&g.rx_mu);
				note_executed(w.last_executed);
				pthread_mutex_unlock(&g.rx_mu);
#ifdef GC_FAILPOINTS
				fp_resend_end = g.sent;
#endif
				g.sent = atomic_load(&g.tail);
				atomic_store(&g.handed, g.sent);
				atomic_store(&g.sent_pub, g.sent);
				atomic_store(&g.ack_pending, 0);
				atomic_fetch_add(&g.gen, 1);
				/* Threads waiting in conn_lost for this generation
				 * to change go back to their calls. */
				pthread_mutex_lock(&g.rx_mu);
				pthread_cond_broadcast(&g.rx_cond);
				pthread_mutex_unlock(&g.rx_mu);
				/* The flusher resends; this thread goes back to
				 * reading, so that replies to resent requests are
				 * consumed while the rest is written. */
				atomic_fetch_add(&g.doorbell, 1);
				futex_wake(&g.doorbell);
				gc_log("reconnected to %s; the server had executed up to request %llu", g.server,
				       (unsigned long long)w.last_executed);
				return;
			} else if (w.status == GC_STATUS_MOVED && w.msg[0] != 0 && moves++ < 8) {
				snprintf(g.server, sizeof g.server, "%s", w.msg);
				known_add(g.server);
				close(fd);
				continue;
			} else if (w.status == GC_STATUS_PREEMPTED) {
				/* The session waits in its image for room on the
				 * device: however long that takes, the program
				 * stalls and then goes on. */
				if (!told_preempted++)
					gc_log("session preempted by %s%s%s; waiting for it to be resumed", g.server,
					       w.msg[0] ? ": " : "", w.msg);
				deadline = now_s() + g.reconnect_timeout + 1.0;
			} else if (w.status == GC_STATUS_MOVED || (w.status == GC_STATUS_UNKNOWN_SESSION && known.n > 1)) {
				/* Redirected in circles, or a gpud that does not know
				 * the session while others may: ask the next. */
				int i = known_index();
				if (w.status == GC_STATUS_UNKNOWN_SESSION && i < known.n)
					unknown |= 1u << i;
			} else if (w.status == GC_STATUS_TLS_REQUIRED) {
				char m[GC_MAX_MESSAGE + 192];
				snprintf(m, sizeof m, TLS_REQUIRED_FMT, g.server);
				close(fd);
				set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, m);
				return;
			} else if (w.status != GC_STATUS_REFUSED) {
				char m[2 * GC_MAX_MESSAGE + 128];
				snprintf(m, sizeof m, "%s answered the resume with status %u%s%s", g.server, w.status,
					 w.msg[0] ? ": " : "", w.msg);
				close(fd);
				set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, m);
				return;
			}
		}
		if (fd >= 0)
			close(fd);
		if (known.n > 1) {
			/* Ask every gpud this client knows before pausing; a
			 * round in which all of them said they do not know the
			 * session ends it. */
			if (!told++)
				gc_log("%s did not take the session back; asking the other %d gpuds this client knows", g.server,
				       known.n - 1);
			known_next();
			if (++tried < known.n)
				continue;
			if (unknown == (1u << known.n) - 1) {
				char m[GC_MAX_MESSAGE + 128];
				snprintf(m, sizeof m, "none of the %d gpuds this client knows has the session (last asked: %s)", known.n,
					 g.server);
				set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, m);
				return;
			}
			tried = unknown = moves = 0;
		}
		if (now_s() + backoff > deadline) {
			char m[GC_MAX_MESSAGE + 128];
			snprintf(m, sizeof m, "no gpud answered at %s for %.0f s (GPUCTL_RECONNECT_TIMEOUT)", g.server,
				 g.reconnect_timeout);
			set_dead(CUDA_ERROR_DEVICE_UNAVAILABLE, m);
			return;
		}
		sleep_s(backoff);
		backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
	}
}

static void conn_lost(uint64_t gen, int is_leader, const char *why, const char *moved)
{
	if (!is_leader) {
		/* Wake the reader, if any, so that it notices too and one of
		 * us takes over. */
		int fd = atomic_load(&g.fd);
		if (fd >= 0 && atomic_load(&g.gen) == gen)
			shutdown(fd, SHUT_RDWR);
		pthread_mutex_lock(&g.rx_mu);
		while (g.rx_leader && atomic_load(&g.gen) == gen && !atomic_load(&g.dead))
			pthread_cond_wait(&g.rx_cond, &g.rx_mu);
		if (atomic_load(&g.gen) != gen || atomic_load(&g.dead)) {
			pthread_mutex_unlock(&g.rx_mu);
			return;
		}
		g.rx_leader = 1;
		pthread_mutex_unlock(&g.rx_mu);
	}
	pthread_mutex_lock(&g.tx_mu);
	if (atomic_load(&g.gen) == gen && !atomic_load(&g.dead))
		reconnect_locked(why, moved);
	pthread_mutex_unlock(&g.tx_mu);
	if (!is_leader) {
		pthread_mutex_lock(&g.rx_mu);
		g.rx_leader = 0;
		pthread_cond_broadcast(&g.rx_cond);
		pthread_mutex_unlock(&g.rx_mu);
	}
}

/* ---- requests -------------------------------------------------------- */

/* make_room waits until the ring has room for a request, flushing and
 * reading acknowledgements as needed. */
static void make_room(uint64_t need)
{
	/* A request asking for an acknowledgement was queued when the ring
	 * passed half full; once it is sent, its ack frees that half. */
	uint64_t want = atomic_load(&g.head) + need - RING_SIZE;
	tx_flush_to(atomic_load(&g.head));
	rx_wait(NULL, want);
}

uint8_t *gc_begin(struct gc_call *k, uint16_t op, uint64_t alen, uint16_t flags, const void *bulk, uint64_t bulk_len)
{
	if (!atomic_load_explicit(&g.inited, memory_order_acquire)) {
		k->res = CUDA_ERROR_NOT_INITIALIZED;
		return NULL;
	}
	if (atomic_load_explicit(&g.dead, memory_order_relaxed)) {
		k->res = g.dead_res;
		if (atomic_load_explicit(&g.bye, memory_order_relaxed))
			gc_after_goodbye(op);
		return NULL;
	}
	/* An asynchronous request copies its bulk into the ring, unless the
	 * caller keeps the buffer until the server has executed it
	 * (GC_BULK_BY_REF: page-locked memory). A deferred one keeps its
	 * waiter in its record. */
	uint64_t inl = (flags & GC_FLAG_ASYNC) && !(flags & GC_BULK_BY_REF) ? bulk_len : 0;
	uint64_t wsz = (flags & GC_FLAG_DEFERRED) ? sizeof(struct gc_waiter) : 0;
	flags &= (uint16_t)~GC_BULK_BY_REF;
	if (alen > g.max_frame || inl > ASYNC_INLINE_MAX) {
		gc_log("request for op %u with %llu argument bytes exceeds the server's frame limit", op,
		       (unsigned long long)alen);
		k->res = CUDA_ERROR_INVALID_VALUE;
		return NULL;
	}
	gc_stats_note(op, (flags & (GC_FLAG_ASYNC | GC_FLAG_DEFERRED)) != 0);
	uint64_t flen = GC_REQ_HDR_SIZE + alen + inl;
	uint64_t size = ((sizeof(struct gc_rec) + flen + 7) & ~(uint64_t)7) + wsz;
	uint64_t h, pos;
	for (;;) {
		h = atomic_load(&g.head);
		uint64_t off = h & RING_MASK;
		uint64_t pad = off + size > RING_SIZE ? RING_SIZE - off : 0;
		if (h + pad + size - atomic_load_explicit(&g.tail, memory_order_acquire) > RING_SIZE) {
			make_room(pad + size);
			if (atomic_load(&g.dead)) {
				k->res = g.dead_res;
				return NULL;
			}
			continue;
		}
		if (atomic_compare_exchange_weak(&g.head, &h, h + pad + size)) {
			if (pad) {
				struct gc_rec *p = rec_at(h);
				p->size = (uint32_t)pad;
				atomic_store_explicit(&p->state, REC_PAD, memory_order_release);
			}
			pos = h + pad;
			break;
		}
	}
	/* Ask for an acknowledgement once the ring is half full, with at
	 * most one request outstanding, so the ring is recycled without a
	 * stream of acks the client might not read. */
	if (pos + size - atomic_load(&g.tail) > RING_SIZE / 2 && !atomic_load(&g.ack_pending) &&
	    !atomic_exchange(&g.ack_pending, 1))
		flags |= GC_FLAG_ACK_REQUEST;
	struct gc_rec *r = rec_at(pos);
	r->size = (uint32_t)size;
	r->bulk = inl ? NULL : bulk;
	r->bulk_len = inl ? 0 : bulk_len;
	r->w = NULL;
	r->seq = pos + 1;
	r->replied = 0;
	r->frame_len = (uint32_t)flen;
	uint8_t *f = r->frame;
	struct gc_req_hdr rh = { .len = (uint32_t)alen, .op = op, .flags = flags, .seq = r->seq, .bulk = bulk_len };
	memcpy(f, &rh, sizeof rh);
	if (inl)
		memcpy(f + GC_REQ_HDR_SIZE + alen, bulk, bulk_len);
	k->pos = pos;
	k->res = CUDA_SUCCESS;
	k->out_len = 0;
	return f + GC_REQ_HDR_SIZE;
}

CUresult gc_async(struct gc_call *k)
{
	struct gc_rec *r = rec_at(k->pos);
	atomic_store_explicit(&r->state, REC_READY, memory_order_release);
	ring_doorbell();
	return CUDA_SUCCESS;
}

CUresult gc_sync(struct gc_call *k, void *out, size_t out_cap, void *bulk_dst, uint64_t bulk_len)
{
	struct gc_waiter w = { .out = out, .out_cap = out_cap, .bulk = bulk_dst, .bulk_len = bulk_len };
	struct gc_rec *r = rec_at(k->pos);
	r->w = &w;
	/* Once published, the record may be sent, answered and freed by
	 * other threads: read nothing from it afterwards. */
	uint64_t end = k->pos + r->size;
	atomic_store_explicit(&r->state, REC_READY, memory_order_release);
	tx_flush_to(end);
	rx_wait(&w, 0);
	k->out_len = w.out_len;
	return w.res;
}

/* deferred_reader reads replies while deferred requests are outstanding,
 * so that their data lands without any thread waiting for it (and the
 * server never blocks on a reply nobody reads). It takes the reader role
 * like any waiting thread and delivers other threads' replies meanwhile. */
static void *deferred_reader(void *arg)
{
	(void)arg;
	while (!atomic_load(&g.dead)) {
		if (atomic_load(&g.deferred_pending) == 0) {
			futex_wait(&g.deferred_pending, 0, 1000);
			continue;
		}
		rx_wait(NULL, RX_DEFERRED);
	}
	return NULL;
}

/* gc_start_thread starts fn as a detached thread of the library that
 * takes no signal meant for the application; pthread_create's result. */
int gc_start_thread(void *(*fn)(void *))
{
	pthread_t t;
	pthread_attr_t attr;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int rc = pthread_create(&t, &attr, fn, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

static void start_deferred_reader(void)
{
	int rc = gc_start_thread(deferred_reader);
	if (rc != 0)
		gc_log("cannot start the reply reader thread: %s; device-to-host copies wait for their data", strerror(rc));
	else
		atomic_store(&g.dreader_running, 1);
}

int gc_deferred_ok(void)
{
	if (!(atomic_load_explicit(&g.features, memory_order_relaxed) & GC_FEATURE_DEFERRED_REPLIES))
		return 0;
	if (!atomic_load_explicit(&g.dreader_running, memory_order_acquire))
		pthread_once(&g.dreader_once, start_deferred_reader);
	return atomic_load_explicit(&g.dreader_running, memory_order_acquire);
}

CUresult gc_deferred(struct gc_call *k, void *bulk_dst, uint64_t bulk_len)
{
	struct gc_rec *r = rec_at(k->pos);
	struct gc_waiter *w = (struct gc_waiter *)((uint8_t *)r + r->size - sizeof(struct gc_waiter));
	*w = (struct gc_waiter){ .deferred = 1, .bulk = bulk_dst, .bulk_len = bulk_len };
	r->w = w;
	if (atomic_fetch_add(&g.deferred_pending, 1) == 0)
		futex_wake(&g.deferred_pending);
	atomic_store_explicit(&r->state, REC_READY, memory_order_release);
	ring_doorbell();
	return CUDA_SUCCESS;
}

uint64_t gc_async_inline_max(void) { return ASYNC_INLINE_MAX; }

uint64_t gc_epoch(void) { return atomic_load_explicit(&g.gen, memory_order_acquire); }

/* ---- goodbye ---------------------------------------------------------- */

static void add_s(struct timespec *ts, double s)
{
	ts->tv_sec += (time_t)s;
	ts->tv_nsec += (long)((s - (time_t)s) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int gc_goodbye(double bound_s)
{
	if (!atomic_load_explicit(&g.inited, memory_order_acquire) || atomic_load(&g.dead) || getpid() != g.opener)
		return 0;
	/* A server that does not announce it would fail the op and keep the
	 * session anyway: spare the exit the wait. */
	if (!(atomic_load(&g.features) & GC_FEATURE_GOODBYE))
		return 0;
	/* The sender's lock is held for long only by a reconnect or a write
	 * the server does not take: then the session ends by grace. */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	add_s(&until, bound_s);
	if (pthread_mutex_timedlock(&g.tx_mu, &until) != 0)
		return 0;
	int fd = atomic_load(&g.fd), sent = 0;
	if (fd >= 0 && !atomic_load(&g.dead)) {
		struct timeval tv = { (time_t)bound_s, (suseconds_t)((bound_s - (time_t)bound_s) * 1e6) };
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		/* What the program queued goes first: the goodbye is executed
		 * after it. */
		int rc;
		while ((rc = flush_some(UINT64_MAX)) > 0)
			;
		if (rc == 0) {
			/* From here on the session is over for this process:
			 * a call made later (by a destructor that runs after
			 * this one) fails as the driver's calls do during
			 * teardown, and a thread that sees the connection
			 * close does not reconnect. The number is above every
			 * request sent; a record reserved but never published
			 * is not sent at all. */
			g.dead_res = CUDA_ERROR_DEINITIALIZED;
			atomic_store(&g.bye, 1);
			atomic_store(&g.dead, 1);
			struct gc_req_hdr rh = { .len = 0, .op = GC_OP_Goodbye, .flags = GC_FLAG_ASYNC, .seq = atomic_load(&g.head) + 1 };
			sent = write_full(fd, &rh, sizeof rh) == 0;
			gc_stats_note(GC_OP_Goodbye, 1);
		}
	}
	pthread_mutex_unlock(&g.tx_mu);
	if (!sent)
		return 0;
	pthread_mutex_lock(&g.rx_mu);
	pthread_cond_broadcast(&g.rx_cond);
	pthread_mutex_unlock(&g.rx_mu);
	/* Wait, briefly, for gpud to close the connection: the goodbye has
	 * then arrived. Closing first could discard it, since a socket
	 * closed with unread data (a keepalive) is reset. */
	struct pollfd pfd = { fd, POLLRDHUP, 0 };
	double end = now_s() + bound_s, left;
	while ((left = end - now_s()) > 0) {
		int n = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != 0)
			break;
	}
	return 1;
}

void gc_after_goodbye(uint16_t op)
{
	static _Atomic int told;
	if (!atomic_exchange(&told, 1)) {
		const char *name = gc_op_name(op);
		gc_log("%s called after the program's exit ended its session; returning CUDA_ERROR_DEINITIALIZED", name ? name : "a call");
	}
}

/* ---- initialisation --------------------------------------------------- */

static int read_token(void)
{
	const char *t = getenv("GPUCTL_TOKEN");
	if (t != NULL && *t != 0) {
		snprintf(g.token, sizeof g.token, "%s", t);
		return 0;
	}
	const char *path = getenv("GPUCTL_TOKEN_FILE");
	if (path == NULL || *path == 0) {
		g.token[0] = 0;
		return 0;
	}
	FILE *f = fopen(path, "re");
	if (f == NULL) {
		gc_log("cannot read GPUCTL_TOKEN_FILE %s: %s", path, strerror(errno));
		return -1;
	}
	size_t n = fread(g.token, 1, sizeof g.token - 1, f);
	fclose(f);
	while (n > 0 && (g.token[n - 1] == '\n' || g.token[n - 1] == '\r' || g.token[n - 1] == ' '))
		n--;
	g.token[n] = 0;
	return 0;
}

/* With GPUCTL_DEBUG set, a fault in the process prints a native backtrace
 * before the default action ends it: a crash inside this library (or in
 * a library that got an answer it did not expect from it) is otherwise
 * only an exit status. backtrace() and backtrace_symbols_fd() are used
 * because they write straight to the descriptor without allocating. */
static void crash_trace(int sig)
{
	void *pcs[64];
	char head[64];
	int n = snprintf(head, sizeof head, "gpuctl: signal %d; backtrace:\n", sig);
	if (n > 0 && write(2, head, (size_t)n) < 0)
		_exit(128 + sig);
	backtrace_symbols_fd(pcs, backtrace(pcs, 64), 2);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void debug_crash_handlers(void)
{
	static const int sigs[] = { SIGSEGV, SIGFPE, SIGBUS, SIGILL, SIGABRT };
	void *warm[1];
	backtrace(warm, 1); /* loads libgcc now, not inside the handler */
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		struct sigaction sa = { .sa_handler = crash_trace, .sa_flags = (int)SA_RESETHAND };
		sigemptyset(&sa.sa_mask);
		sigaction(sigs[i], &sa, NULL);
	}
}

/* read_attrs fills the Hello's attributes from GPUCTL_PRIORITY (an int32)
 * and GPUCTL_LABELS ("k=v,k2=v2", which gpud checks). */
static int read_attrs(void)
{
	const char *ps = getenv("GPUCTL_PRIORITY"), *ls = getenv("GPUCTL_LABELS");
	long long prio = 0;
	if (ps != NULL && *ps != 0) {
		char *end;
		errno = 0;
		prio = strtoll(ps, &end, 10);
		if (end == ps || *end != 0 || errno != 0 || prio < INT32_MIN || prio > INT32_MAX) {
			gc_log("GPUCTL_PRIORITY=%s: want an integer between %d and %d", ps, INT32_MIN, INT32_MAX);
			return -1;
		}
	}
	size_t ll = ls != NULL ? strlen(ls) : 0;
	if (ll > GC_MAX_ATTRS - 4) {
		gc_log("GPUCTL_LABELS is %zu bytes long; at most %d", ll, GC_MAX_ATTRS - 4);
		return -1;
	}
	if (prio == 0 && ll == 0)
		return 0;
	int32_t p = (int32_t)prio;
	memcpy(g.attrs, &p, 4);
	memcpy(g.attrs + 4, ls, ll);
	g.attrs_len = 4 + ll;
	return 0;
}

static atomic_int exiting;

static void mark_exiting(void) { atomic_store_explicit(&exiting, 1, memory_order_relaxed); }

int gc_exiting(void) { return atomic_load_explicit(&exiting, memory_order_relaxed); }

static void init_once(void)
{
	/* Registered at cuInit, after the runtime's own exit handler (which
	 * its static constructors register), so it runs before that one, as
	 * the driver's does natively. */
	atexit(mark_exiting);
	if (getenv("GPUCTL_DEBUG") != NULL)
		debug_crash_handlers();
	const char *srv = getenv("GPUCTL_SERVER");
	if (srv == NULL || *srv == 0) {
		gc_log("GPUCTL_SERVER is not set; set it to the HOST:PORT of a gpud --listen address");
		g.init_res = CUDA_ERROR_NO_DEVICE;
		return;
	}
	snprintf(g.server, sizeof g.server, "%s", srv);
	known_add(g.server);
	known_parse(getenv("GPUCTL_SERVERS"));
	if (read_token() < 0) {
		g.init_res = CUDA_ERROR_NOT_PERMITTED;
		return;
	}
	g.reconnect_timeout = 60;
	const char *rt = getenv("GPUCTL_RECONNECT_TIMEOUT");
	if (rt != NULL && *rt != 0) {
		char *end;
		double v = strtod(rt, &end);
		if (end != rt && v >= 0)
			g.reconnect_timeout = v;
		else
			gc_log("ignoring GPUCTL_RECONNECT_TIMEOUT=%s: not a number of seconds", rt);
	}
	if (read_attrs() < 0) {
		g.init_res = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	if (gc_tls_setup() < 0) {
		g.init_res = CUDA_ERROR_NO_DEVICE;
		return;
	}
	g.reply_timeout = 30;
	const char *qt = getenv("GPUCTL_REPLY_TIMEOUT");
	if (qt != NULL && *qt != 0) {
		char *end;
		double v = strtod(qt, &end);
		if (end != qt && v >= 0)
			g.reply_timeout = v;
		else
			gc_log("ignoring GPUCTL_REPLY_TIMEOUT=%s: not a number of seconds", qt);
	}
	g.ring = mmap(NULL, RING_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g.ring == MAP_FAILED) {
		g.init_res = CUDA_ERROR_OUT_OF_MEMORY;
		return;
	}
	/* The first connection: retry briefly, gpud may be starting. */
	double deadline = now_s() + (g.reconnect_timeout < 5 ? g.reconnect_timeout : 5), backoff = 0.02;
	struct welcome w;
	int fd;
	char terr[GC_MAX_MESSAGE + 512];
	for (;;) {
		fd = connect_server(g.server, terr, sizeof terr);
		if (fd == -2) {
			gc_log("%s", terr);
			g.init_res = CUDA_ERROR_NO_DEVICE;
			return;
		}
		if (fd >= 0) {
			int hs = handshake(fd, 0, 0, &w);
			if (hs == 0)
				break;
			close(fd);
			if (hs == -2) {
				gc_log("%s does not speak this version of the gpuctl protocol", g.server);
				g.init_res = CUDA_ERROR_NO_DEVICE;
				return;
			}
		}
		if (now_s() + backoff > deadline) {
			gc_log("cannot connect to gpud at %s: %s", g.server, terr[0] ? terr : strerror(errno));
			g.init_res = CUDA_ERROR_NO_DEVICE;
			return;
		}
		sleep_s(backoff);
		backoff *= 2;
	}
	if (w.status != GC_STATUS_OK) {
		close(fd);
		if (w.status == GC_STATUS_BAD_TOKEN) {
			gc_log("gpud at %s refused the token; set GPUCTL_TOKEN or GPUCTL_TOKEN_FILE to the host's token", g.server);
			g.init_res = CUDA_ERROR_NOT_PERMITTED;
		} else if (w.status == GC_STATUS_TLS_REQUIRED) {
			gc_log(TLS_REQUIRED_FMT, g.server);
			g.init_res = CUDA_ERROR_NO_DEVICE;
		} else {
			gc_log("gpud at %s refused the session (status %u)%s%s", g.server, w.status, w.msg[0] ? ": " : "", w.msg);
			g.init_res = CUDA_ERROR_NO_DEVICE;
		}
		return;
	}
	snprintf(g.sid, sizeof g.sid, "%s", w.sid);
	snprintf(g.secret, sizeof g.secret, "%s", w.secret);
	g.max_frame = w.max_frame;
	atomic_store(&g.features, w.features);
	atomic_store(&g.fd, fd);
	int rc = gc_start_thread(flusher);
	if (rc != 0) {
		gc_log("cannot start the sender thread: %s", strerror(rc));
		g.init_res = CUDA_ERROR_OPERATING_SYSTEM;
		return;
	}
	if (getenv("GPUCTL_DEBUG") != NULL)
		gc_log("connected to %s, session %s, TLS %s", g.server, g.sid, gc_tls_describe());
	g.opener = getpid();
	atomic_store_explicit(&g.inited, 1, memory_order_release);
	g.init_res = CUDA_SUCCESS;
}

CUresult gc_connect(void)
{
	pthread_once(&g.once, init_once);
	return g.init_res;
}

CUresult gc_ready(void)
{
	if (!atomic_load_explicit(&g.inited, memory_order_acquire))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (atomic_load_explicit(&g.dead, memory_order_relaxed))
		return g.dead_res;
	return CUDA_SUCCESS;
}
