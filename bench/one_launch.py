# bench/one_launch.py: one kda_capi_inter_solve launch (B8 T4096 H32 bf16, K 128, tf32) at chunk size argv[1]
# (32 or 64), gate argv[2] (safe or notsafe), through compare_fla.py's helpers: the program Nsight Compute profiles,
#   ncu --set full -k regex:chunk_kernel -c 1 python3 bench/one_launch.py 32 safe
import sys, torch
sys.path.insert(0, "bench")
import compare_fla as cf
bt, safe = int(sys.argv[1]), sys.argv[2] == "safe"
cf.BT, cf.NC = bt, bt // cf.BC
lib = cf.load_capi(".dev/libkda_capi.so")
B, T, H, K, dt = 8, 4096, 32, 128, torch.bfloat16
q, k, g, beta, Akkd, pos = cf.make_inputs(B, T, H, H, K, dt, None, safe)
Aqk = torch.zeros(B, T, H, bt, device="cuda", dtype=dt)
Akk = torch.zeros_like(Aqk)
run = cf.kda_runner(lib.kda_capi_inter_solve, B, T, H, H, K, dt, None, safe, K ** -0.5, q, k, g, beta, Akkd, Aqk, Akk)
run(1)
torch.cuda.synchronize()
print("ran BT", bt, "safe" if safe else "not safe")
