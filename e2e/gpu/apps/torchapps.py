"""PyTorch workloads for the GPU suite's real-application step.

Every mode prints lines that must be identical natively and through gpuctl
(losses and checksums as exact float hex), plus lines starting with
"time " or "rate " that carry measurements and are left out of the
comparison.

    python3 torchapps.py matmul | mlp | resnet50 | first-kernel
    python3 torchapps.py gpt2 --steps N [--pause-file F --pause-at K]
    python3 torchapps.py bench-step --steps N [--warmup W]

gpt2 with --pause-at K prints "ready K" after step K and waits until
--pause-file exists before going on: the suite checkpoints or migrates the
session in that window, so the comparison shows the move changed nothing.
"""
import argparse
import os
import sys
import time

T0 = time.perf_counter()

import torch  # noqa: E402


def setup(seed=1234):
    # Deterministic kernels so that two runs of the same program on the
    # same GPU give the same bits; cuBLAS needs a fixed workspace for that.
    torch.manual_seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)


def hexsum(t):
    return float(t.detach().double().sum().item()).hex()


def matmul():
    setup()
    a = torch.randn(1024, 1024, device="cuda")
    b = torch.randn(1024, 1024, device="cuda")
    c = a @ b
    print("matmul", hexsum(c))
    d = (a.half() @ b.half()).float()
    print("matmul fp16", hexsum(d))


def mlp(steps=20):
    setup()
    model = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 512, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        print("mlp step", i, loss.item().hex())


def gpt2_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=256, vocab_size=50257)
    # Eager attention: its backward is deterministic, unlike the fused
    # kernels' atomics.
    cfg._attn_implementation = "eager"
    return GPT2LMHeadModel(cfg).cuda()


def gpt2(steps, pause_file=None, pause_at=-1, batch=4, seq=128):
    setup()
    model = gpt2_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(99)
    for i in range(steps):
        ids = torch.randint(0, 50257, (batch, seq), generator=g).cuda()
        opt.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        print("gpt2 step", i, out.loss.item().hex(), flush=True)
        if i == pause_at and pause_file:
            print("ready", i, flush=True)
            while not os.path.exists(pause_file):
                time.sleep(0.05)
    # The weights after training, all of them: what a migration must keep.
    print("gpt2 weights", hexsum(torch.cat([p.detach().flatten() for p in model.parameters()])))


def bench_step(steps, warmup):
    setup()
    model = gpt2_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (4, 128), device="cuda")

    def one():
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    # Warm up: lazy module loads, the allocator's growth, cuBLAS's
    # heuristics; the timed steps then repeat one steady state.
    for _ in range(warmup):
        one()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(steps):
        one()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(f"rate gpt2_steps_per_s {steps / dt:.3f}")
    print(f"time gpt2_bench_steps {steps} warmup {warmup}")


def resnet50(batches=10, batch=32):
    import torchvision

    setup()
    model = torchvision.models.resnet50(weights=None).cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    with torch.no_grad():
        out = model(x)
        print("resnet50", hexsum(out), int(out.argmax(dim=1)[0]))
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(batches):
            model(x)
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(f"rate resnet50_images_per_s {batches * batch / dt:.1f}")


def first_kernel():
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print(f"time first_kernel_s {time.perf_counter() - T0:.3f}")
    print("first kernel ok")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--pause-file")
    p.add_argument("--pause-at", type=int, default=-1)
    a = p.parse_args()
    if a.mode == "matmul":
        matmul()
    elif a.mode == "mlp":
        mlp()
    elif a.mode == "gpt2":
        gpt2(a.steps, a.pause_file, a.pause_at)
    elif a.mode == "bench-step":
        bench_step(a.steps, a.warmup)
    elif a.mode == "resnet50":
        resnet50()
    elif a.mode == "first-kernel":
        first_kernel()
    else:
        sys.exit(f"unknown mode {a.mode!r}: matmul, mlp, gpt2, bench-step, resnet50, first-kernel")


if __name__ == "__main__":
    main()
