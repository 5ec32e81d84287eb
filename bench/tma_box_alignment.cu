// bench/tma_box_alignment.cu: whether the tensor copy engine takes a box whose first column is not
// 16-byte aligned in memory. One tensor copy of a [64 rows, 16 columns] box of a bf16 [64, cols]
// tensor (rows packed, so every row starts 16-byte aligned when cols is a multiple of 8) at column
// c0, through a 3-d or a 4-d tensor map; prints the kernel's error and how many staged elements
// differ from the tensor (columns past cols: 0). sm_90 only.
//   nvcc -std=c++20 --expt-relaxed-constexpr -O2 -arch=sm_90a -Iinclude bench/tma_box_alignment.cu -o tma_box_alignment
//   ./tma_box_alignment COLS C0 {3|4}
#include "kda/cuda/launch.cuh"
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace kda::cuda;
// a 3-d box on `bar` (kda's own headers stage through 4-d maps only)
__device__ void load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, std::uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
                     smem_addr(dst)),
                 "l"(reinterpret_cast<std::uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
                 : "memory");
}
struct P { CUtensorMap m; int c0; int mode; kda::bf16_t* out; };
__global__ void k(const __grid_constant__ P p) {
    __shared__ alignas(128) kda::bf16_t buf[64 * 16];
    __shared__ alignas(8) std::uint64_t bar;
    if (threadIdx.x == 0) { mbar_init(&bar, 1); mbar_init_fence(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(&bar, 64 * 16 * 2);
        if (p.mode == 3) load_3d(buf, &p.m, p.c0, 0, 0, &bar);
        else tma_load_4d(buf, &p.m, p.c0, 0, 0, 0, &bar);
    }
    mbar_wait(&bar, 0);
    for (int i = threadIdx.x; i < 64 * 16; i += blockDim.x) p.out[i] = buf[i];
}
int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s COLS C0 {3|4}\n", argv[0]);
        return 2;
    }
    const int cols = atoi(argv[1]), c0 = atoi(argv[2]), mode = atoi(argv[3]);
    const int T = 64;
    std::vector<unsigned short> h(T * cols);
    for (int i = 0; i < T * cols; ++i) h[i] = (unsigned short)(i % 60000 + 1);
    void* d; cudaMalloc(&d, h.size() * 2); cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
    kda::bf16_t* out; cudaMalloc(&out, 64 * 16 * 2);
    P p{}; p.c0 = c0; p.mode = mode; p.out = out;
    auto enc = tensor_map_encoder();
    CUresult r;
    if (mode == 3) {
        cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)T, 1}; cuuint64_t st[2] = {(cuuint64_t)cols * 2, (cuuint64_t)cols * 2 * T};
        cuuint32_t box[3] = {16, 64, 1}, el[3] = {1, 1, 1};
        r = enc(&p.m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, d, dims, st, box, el, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    } else {
        cuuint64_t dims[4] = {(cuuint64_t)cols, 1, (cuuint64_t)T, 1}; cuuint64_t st[3] = {(cuuint64_t)((cols * 2 + 15) / 16 * 16), (cuuint64_t)cols * 2, (cuuint64_t)cols * 2 * T};
        cuuint32_t box[4] = {16, 1, 64, 1}, el[4] = {1, 1, 1, 1};
        r = enc(&p.m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, d, dims, st, box, el, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    }
    k<<<1, 128>>>(p);
    cudaError_t e = cudaDeviceSynchronize();
    std::vector<unsigned short> o(64 * 16);
    int bad = -1;
    if (e == cudaSuccess) {
        cudaMemcpy(o.data(), out, o.size() * 2, cudaMemcpyDeviceToHost);
        bad = 0;
        for (int rr = 0; rr < 64; ++rr) for (int cc = 0; cc < 16; ++cc) {
            unsigned short want = c0 + cc < cols ? h[rr * cols + c0 + cc] : 0;
            if (o[rr * 16 + cc] != want) ++bad;
        }
    }
    printf("mode %dd cols %d c0 %d: encode %d, kernel %s, wrong %d\n", mode, cols, c0, (int)r, cudaGetErrorString(e), bad);
}
