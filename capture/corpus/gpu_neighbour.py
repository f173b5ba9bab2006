# A noisy neighbour: another process's matrix products on the same GPU, for SECONDS.
# Used by capture/corpus/run_ddp.sh: a neighbour process that shares GPU 1 with rank 1.
import sys, time, torch
secs = float(sys.argv[1]); n = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
t0 = time.time(); k = 0
while time.time() - t0 < secs:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize(); k += 10
print(f"neighbour: {k} products of {n}^3 in {time.time()-t0:.1f} s", flush=True)
