/* Decodes a hex-encoded header with the library's C structs and prints
 * its fields; TestHeaderLayouts compares them with package wire. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gc_wirefmt.h"

int main(int argc, char **argv)
{
	unsigned char b[64] = { 0 };
	size_t n = argc > 2 ? strlen(argv[2]) / 2 : 0;
	if (argc < 3 || n > sizeof b)
		return 2;
	for (size_t i = 0; i < n; i++)
		sscanf(argv[2] + 2 * i, "%2hhx", &b[i]);
	if (strcmp(argv[1], "req") == 0 && n == sizeof(struct gc_req_hdr)) {
		struct gc_req_hdr h;
		memcpy(&h, b, sizeof h);
		printf("len=%x op=%x flags=%x seq=%llx bulk=%llx\n", h.len, h.op, h.flags, (unsigned long long)h.seq,
		       (unsigned long long)h.bulk);
	} else if (strcmp(argv[1], "rep") == 0 && n == sizeof(struct gc_rep_hdr)) {
		struct gc_rep_hdr h;
		memcpy(&h, b, sizeof h);
		printf("len=%x kind=%x flags=%x result=%x seq=%llx executed=%llx bulk=%llx\n", h.len, h.kind, h.flags, h.result,
		       (unsigned long long)h.seq, (unsigned long long)h.executed, (unsigned long long)h.bulk);
	} else if (strcmp(argv[1], "hello") == 0 && n == sizeof(struct gc_hello_hdr)) {
		struct gc_hello_hdr h;
		memcpy(&h, b, sizeof h);
		printf("magic=%.4s version=%u flags=%u token=%u sid=%u secret=%u last=%llx\n", h.magic, h.version, h.flags,
		       h.token_len, h.session_id_len, h.secret_len, (unsigned long long)h.last_seq);
	} else if (strcmp(argv[1], "welcome") == 0 && n == sizeof(struct gc_welcome_hdr)) {
		struct gc_welcome_hdr h;
		memcpy(&h, b, sizeof h);
		printf("magic=%.4s version=%u status=%u sid=%u secret=%u msg=%u features=%x maxframe=%x keepalive=%x last=%llx\n",
		       h.magic, h.version, h.status, h.session_id_len, h.secret_len, h.message_len, h.features, h.max_frame,
		       h.keepalive_ms, (unsigned long long)h.last_executed);
	} else {
		fprintf(stderr, "unknown kind %s or wrong size %zu\n", argv[1], n);
		return 2;
	}
	return 0;
}
