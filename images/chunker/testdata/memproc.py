# A process whose memory looks like a checkpointed worker's: 64 MiB of page runs,
# zero, random and repetitive. SIGUSR1 rewrites 5% of the pages in runs
# (keeping each page's kind) and maps a new 4 MiB buffer. realdumps.sh drives it.
import os, random, signal, struct, time, sys
random.seed(1)
P = 4096
N = 16384  # 64 MiB
buf = bytearray(N * P)
# kinds in runs: zero, random, repetitive
i = 0
kinds = []
while i < N:
    run = max(1, int(random.expovariate(1/64)))
    k = random.random()
    for p in range(i, min(N, i + run)):
        if k < 0.3:
            pass
        elif k < 0.65:
            buf[p*P:(p+1)*P] = os.urandom(P)
        else:
            buf[p*P:(p+1)*P] = ((b"step %d loss ok " % p) * P)[:P]
    i += run
extra = []
def change(sig, frm):
    # 5% of pages in runs of ~16, same kind; then grow: a new 4 MiB buffer
    changed = 0
    while changed < N // 20:
        p = random.randrange(N)
        for q in range(p, min(N, p + max(1, int(random.expovariate(1/15))))):
            buf[q*P:(q+1)*P] = os.urandom(P) if buf[q*P:q*P+8] != buf[q*P+16:q*P+24] else ((b"step %d loss no " % (q+7)) * P)[:P]
            changed += 1
    extra.append(bytearray(os.urandom(4 << 20)))
    open(os.environ["OUT"] + "/changed", "w").write("ok")
signal.signal(signal.SIGUSR1, change)
open(os.environ["OUT"] + "/ready", "w").write(str(os.getpid()))
while True:
    time.sleep(0.2)
