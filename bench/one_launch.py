# bench/one_launch.py: one kda_capi_inter_solve launch (B8 T4096 H32 bf16, tf32) at chunk size argv[1] (32 or
# 64), gate argv[2] (safe or notsafe), K argv[3] (default 128), from the library argv[4] (default
# .dev/libkda_capi.so), through compare_fla.py's helpers: the program Nsight Compute profiles,
#   ncu --set full -k regex:chunk_kernel -c 1 python3 bench/one_launch.py 32 safe [K] [LIB]
import sys, torch
sys.path.insert(0, "bench")
import compare_fla as cf
bt, safe = int(sys.argv[1]), sys.argv[2] == "safe"
cf.BT, cf.NC = bt, bt // cf.BC
K = int(sys.argv[3]) if len(sys.argv) > 3 else 128
lib = cf.load_capi(sys.argv[4] if len(sys.argv) > 4 else ".dev/libkda_capi.so")
B, T, H, dt = 8, 4096, 32, torch.bfloat16
q, k, g, beta, Akkd, pos = cf.make_inputs(B, T, H, H, K, dt, None, safe)
Aqk = torch.zeros(B, T, H, bt, device="cuda", dtype=dt)
Akk = torch.zeros_like(Aqk)
run = cf.kda_runner(lib.kda_capi_inter_solve, B, T, H, H, K, dt, None, safe, K ** -0.5, q, k, g, beta, Akkd, Aqk, Akk)
run(1)
torch.cuda.synchronize()
print("ran BT", bt, "K", K, "safe" if safe else "not safe")
