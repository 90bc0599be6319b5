/* cuda_emu_wmma.h: nvcuda::wmma (<mma.h>) under the emulation, for bf16
 * 16x16x16 fragments with fp32 accumulators (what sm_80 offers for bf16).
 *
 * As documented in the CUDA C++ Programming Guide, every lane of the warp
 * must call load_matrix_sync, store_matrix_sync and mma_sync, each of which
 * waits until all lanes have arrived and then loads, stores or multiplies.
 * Here each is a warp collective over the full mask (a lane that diverges
 * or calls a different one is reported, as for shuffles), after which each
 * lane reads or writes its own elements at its own pace: lanes do not run
 * in lockstep, so a lane reading what another lane stored needs a
 * __syncwarp, as on the hardware.
 *
 * Which lane holds which element of a fragment is unspecified in CUDA; the
 * emulation picks a different mapping for matrix_a, matrix_b and the
 * accumulator, so code that assumes one (or assumes they agree) computes
 * wrong numbers here. Element-wise loops over frag.x[0 .. num_elements)
 * that do not depend on the mapping (fill, scale, convert) are fine.
 * Pointers must be 256-bit aligned and ldm a multiple of 16 bytes, as
 * documented; anything else fails the launch.
 *
 * mma_sync: bf16 x bf16 products are exact in fp32; they are added to the
 * accumulator in fp32 in k order (the hardware's order is unspecified). */
#ifndef TP_CUDA_EMU_WMMA_H
#define TP_CUDA_EMU_WMMA_H

namespace tp_emu {
/* A warp collective over all 32 lanes named `name`: each lane passes
 * `args`; when the last arrives, fn (when not null) runs once with every
 * lane's args, before any lane resumes. */
void warp_call(const char *name, void *args, void (*fn)(void *const lanes[32]));
} // namespace tp_emu

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has the 16x16x16 shape only");
    static_assert(std::is_same<Use, accumulator>::value ? std::is_same<T, float>::value
                                                        : std::is_same<T, __nv_bfloat16>::value,
                  "the emulation has bf16 matrix_a / matrix_b with float accumulators only");
    static_assert(std::is_same<Use, accumulator>::value == std::is_same<Layout, void>::value,
                  "matrix_a and matrix_b take a layout, accumulators none");
    enum { num_elements = 8 };
    T x[num_elements];
};

namespace emu {
/* (row, column) of element i of lane l's fragment */
inline void place(matrix_a, int l, int i, int *r, int *c) { *r = l % 16, *c = l / 16 * 8 + i; }
inline void place(matrix_b, int l, int i, int *r, int *c) { *r = l / 16 * 8 + i, *c = l % 16; }
inline void place(accumulator, int l, int i, int *r, int *c) { *r = 2 * i + l / 16, *c = (l * 7) % 16; }

inline int lane() { return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32; }

template <typename T> inline void check(const char *what, const T *p, unsigned ldm)
{
    if ((uintptr_t)p % 32)
        tp_emu::fail_in_kernel("%s: pointer %p is not 256-bit aligned", what, (const void *)p);
    if (ldm * sizeof(T) % 16 || ldm < 16)
        tp_emu::fail_in_kernel("%s: ldm %u is not a multiple of 16 bytes of at least 16 elements", what, ldm);
}

inline size_t offset(bool row_major, int r, int c, unsigned ldm)
{
    return row_major ? (size_t)r * ldm + (size_t)c : (size_t)c * ldm + (size_t)r;
}

template <typename Frag, typename Use, typename T>
inline void load(Frag &a, Use use, const T *p, unsigned ldm, bool row_major)
{
    check("wmma::load_matrix_sync", p, ldm);
    tp_emu::warp_call("wmma::load_matrix_sync", nullptr, nullptr);
    const int l = lane();
    for (int i = 0; i < Frag::num_elements; i++) {
        int r, c;
        place(use, l, i, &r, &c);
        a.x[i] = p[offset(row_major, r, c, ldm)];
    }
}

struct mma_args {
    const __nv_bfloat16 *a, *b;
    const float *c;
    float *d;
};

inline void mma_all(void *const lanes[32])
{
    float A[16][16], B[16][16], C[16][16];
    for (int l = 0; l < 32; l++) {
        const mma_args &m = *static_cast<const mma_args *>(lanes[l]);
        for (int i = 0; i < 8; i++) {
            int r, c;
            place(matrix_a(), l, i, &r, &c);
            A[r][c] = __bfloat162float(m.a[i]);
            place(matrix_b(), l, i, &r, &c);
            B[r][c] = __bfloat162float(m.b[i]);
            place(accumulator(), l, i, &r, &c);
            C[r][c] = m.c[i];
        }
    }
    for (int l = 0; l < 32; l++) {
        const mma_args &m = *static_cast<const mma_args *>(lanes[l]);
        for (int i = 0; i < 8; i++) {
            int r, c;
            place(accumulator(), l, i, &r, &c);
            float acc = C[r][c];
            for (int k = 0; k < 16; k++)
                acc += A[r][k] * B[k][c];
            m.d[i] = acc;
        }
    }
}
} // namespace emu

template <typename T, typename Layout>
inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, Layout> &a, const T *p, unsigned ldm)
{
    emu::load(a, matrix_a(), p, ldm, std::is_same<Layout, row_major>::value);
}
template <typename T, typename Layout>
inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, Layout> &b, const T *p, unsigned ldm)
{
    emu::load(b, matrix_b(), p, ldm, std::is_same<Layout, row_major>::value);
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &c, const float *p, unsigned ldm, layout_t layout)
{
    emu::load(c, accumulator(), p, ldm, layout == mem_row_major);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &c, unsigned ldm,
                              layout_t layout)
{
    emu::check("wmma::store_matrix_sync", p, ldm);
    tp_emu::warp_call("wmma::store_matrix_sync", nullptr, nullptr);
    const int l = emu::lane();
    for (int i = 0; i < 8; i++) {
        int r, col;
        emu::place(accumulator(), l, i, &r, &col);
        p[emu::offset(layout == mem_row_major, r, col, ldm)] = c.x[i];
    }
}

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, T v)
{
    for (int i = 0; i < 8; i++)
        f.x[i] = v;
}

/* d = a b + c; d may be c */
template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    float out[8];
    emu::mma_args args = {a.x, b.x, c.x, out};
    tp_emu::warp_call("wmma::mma_sync", &args, emu::mma_all);
    for (int i = 0; i < 8; i++)
        d.x[i] = out[i];
}

} // namespace wmma
} // namespace nvcuda

#endif /* TP_CUDA_EMU_WMMA_H */
