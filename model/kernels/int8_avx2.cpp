// int8 Linear for x86 CPUs with AVX2 and no VNNI (int8_native.py builds and loads it): y = x·Wᵀ·scales + bias, each
// row of x rounded to 7-bit integers on a scale of its own and multiplied by the int8 weights with exact int32 sums.
//
// Why our own: oneDNN's u8 × s8 AVX2 kernel takes longer for one row than the float32 product, which reads four
// times the bytes. Here a row is rounded and multiplied in one call, and the weights are read once per block of rows
// in a layout made for the instruction that multiplies them:
// - vpmaddubsw multiplies 32 u8 activations by 32 s8 weights and adds neighbouring pairs in 16 bits, saturating
//   above 32,767; activations shifted to 0..2·limit (limit 64) times weights of at most 127 stay below it, so the
//   pair sums are exact, and vpmaddwd by ones adds the pairs into int32 (exact as well).
// - The shift is taken back in int32: Σ (q + limit)·w − limit·Σ w = Σ q·w, with each column's Σ w found at packing.
// A row's int32 sums are therefore the same whatever the blocking or the other rows (batch invariance), and the
// float epilogue is per element: (float)sum · channel scale · row scale + bias, in that order (no FMA contraction),
// as quantize.py computes it around oneDNN's product.

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>
#include <immintrin.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

constexpr int kCols = 8;    // int32 sums in one ymm register: a column block
constexpr int kDepth = 4;   // k values per column per 32 weight bytes
constexpr int kBlockBytes = kCols * kDepth;

// One row of x (K floats) → u8 (q + limit) in out[0..K4·4), zero past K, and the row's scale.
float round_row(const float* x, int64_t K, int64_t padded_K, int limit, uint8_t* out) {
  __m256 largest = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) largest = _mm256_max_ps(largest, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, largest);
  float amax = 0.0f;
  for (float lane : lanes) amax = std::fmax(amax, lane);
  for (; k < K; ++k) amax = std::fmax(amax, std::fabs(x[k]));
  const float scale = std::fmax(amax, FLT_MIN) / static_cast<float>(limit);  // as quantize._row_scales
  const __m256 scales = _mm256_set1_ps(scale);
  const __m256i shift = _mm256_set1_epi32(limit);
  k = 0;
  for (; k + 8 <= K; k += 8) {  // round half to even, as torch.round: x / scale, not x · (1 / scale)
    __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + k), scales),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    alignas(32) int32_t shifted[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(shifted), _mm256_add_epi32(_mm256_cvtps_epi32(q), shift));
    for (int i = 0; i < 8; ++i) out[k + i] = static_cast<uint8_t>(shifted[i]);
  }
  for (; k < K; ++k) out[k] = static_cast<uint8_t>(static_cast<int32_t>(std::nearbyint(x[k] / scale)) + limit);
  for (; k < padded_K; ++k) out[k] = 0;  // multiplies the packing's zero weights
  return scale;
}

// Rows [0, R) × column blocks [0, NB) of the product: R ≤ 4 rows of u8 activations (stride lda) against NB column
// blocks of packed weights (each depth·32 bytes, one after the other), sums into acc[r][j]. `next`, when not null,
// is the next column blocks' weights, fetched into the cache meanwhile: at a few rows the product waits on memory
// otherwise, a block's multiplies and the next one's reads one after the other.
template <int R, int NB>
inline void multiply(const uint8_t* a, int64_t lda, const int8_t* w, int64_t block_stride, int64_t depth,
                     const int8_t* next, __m256i (&acc)[R][NB]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i sums[R][NB];  // local, so that they stay in registers (acc may alias the weights for the compiler)
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j) sums[r][j] = _mm256_setzero_si256();
  for (int64_t d = 0; d < depth; ++d) {
    if (next) _mm_prefetch(reinterpret_cast<const char*>(next + d * NB * kBlockBytes), _MM_HINT_T0);
    __m256i weights[NB];
    for (int j = 0; j < NB; ++j)
      weights[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * block_stride + d * kBlockBytes));
    for (int r = 0; r < R; ++r) {
      int32_t four;
      __builtin_memcpy(&four, a + r * lda + d * kDepth, 4);
      const __m256i activations = _mm256_set1_epi32(four);
      for (int j = 0; j < NB; ++j) {
        const __m256i pairs = _mm256_maddubs_epi16(activations, weights[j]);  // exact: see the file's comment
        sums[r][j] = _mm256_add_epi32(sums[r][j], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j) acc[r][j] = sums[r][j];
}

struct Epilogue {
  const int32_t* column_sums;  // Σ_k w[n, k]
  const float* channel_scales;
  const float* bias;           // nullptr for none
  int limit;
  int64_t N;
};

// 8 floats of a per-column vector from column n on; zeros past N (the last block's).
inline __m256 columns(const float* v, int64_t n, int64_t N) {
  if (n + kCols <= N) return _mm256_loadu_ps(v + n);
  alignas(32) float lanes[kCols] = {};
  for (int64_t i = 0; i < N - n; ++i) lanes[i] = v[n + i];
  return _mm256_load_ps(lanes);
}

inline __m256i columns(const int32_t* v, int64_t n, int64_t N) {
  if (n + kCols <= N) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + n));
  alignas(32) int32_t lanes[kCols] = {};
  for (int64_t i = 0; i < N - n; ++i) lanes[i] = v[n + i];
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
}

template <int R, int NB>
inline void finish(const __m256i (&acc)[R][NB], const float* row_scales, int64_t n0, const Epilogue& e,
                   float* y, int64_t ldy) {
  const __m256i shift = _mm256_set1_epi32(e.limit);
  for (int j = 0; j < NB; ++j) {
    const int64_t n = n0 + j * kCols;
    const __m256i shifted_sums = _mm256_mullo_epi32(shift, columns(e.column_sums, n, e.N));
    const __m256 channel = columns(e.channel_scales, n, e.N);
    const __m256 bias = e.bias ? columns(e.bias, n, e.N) : _mm256_setzero_ps();
    for (int r = 0; r < R; ++r) {
      __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[r][j], shifted_sums));
      v = _mm256_mul_ps(_mm256_mul_ps(v, channel), _mm256_set1_ps(row_scales[r]));
      if (e.bias) v = _mm256_add_ps(v, bias);
      float* out = y + r * ldy + n;
      if (n + kCols <= e.N) {
        _mm256_storeu_ps(out, v);
      } else {
        alignas(32) float lanes[kCols];
        _mm256_store_ps(lanes, v);
        for (int64_t i = 0; i < e.N - n; ++i) out[i] = lanes[i];
      }
    }
  }
}

template <int NB>
void rows_times_blocks(const uint8_t* a, int64_t lda, const float* row_scales, int64_t rows, const int8_t* w,
                       int64_t block_stride, int64_t depth, const int8_t* next, int64_t n0, const Epilogue& e,
                       float* y, int64_t ldy) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {  // the first rows read the weights from memory, the others from the cache
    __m256i acc[4][NB];
    multiply<4, NB>(a + r * lda, lda, w, block_stride, depth, r == 0 ? next : nullptr, acc);
    finish<4, NB>(acc, row_scales + r, n0, e, y + r * ldy, ldy);
  }
  for (; r < rows; ++r) {
    __m256i acc[1][NB];
    multiply<1, NB>(a + r * lda, lda, w, block_stride, depth, r == 0 ? next : nullptr, acc);
    finish<1, NB>(acc, row_scales + r, n0, e, y + r * ldy, ldy);
  }
}

// x (M, K) float32 · packed weights (⌈N/8⌉, ⌈K/4⌉, 8, 4) int8 → (M, N) float32; column_sums (N,) int32,
// channel_scales and bias (N,) float32.
at::Tensor int8_linear(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& column_sums,
                       const at::Tensor& channel_scales, const std::optional<at::Tensor>& bias, int64_t limit) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x: contiguous float32 (M, K)");
  TORCH_CHECK(packed.dim() == 4 && packed.size(2) == kCols && packed.size(3) == kDepth && packed.is_contiguous(),
              "packed: contiguous int8 (N/8, K/4, 8, 4)");
  TORCH_CHECK(limit >= 1 && limit <= 64, "limit: the activations' range must keep vpmaddubsw's pair sums exact");
  const int64_t M = x.size(0), K = x.size(1), N = channel_scales.size(0), blocks = packed.size(0),
                depth = packed.size(1);
  TORCH_CHECK((K + kDepth - 1) / kDepth == depth && (N + kCols - 1) / kCols == blocks, "packed: shape of x and N");
  TORCH_CHECK(column_sums.scalar_type() == at::kInt && column_sums.numel() == N && column_sums.is_contiguous() &&
              channel_scales.scalar_type() == at::kFloat && channel_scales.is_contiguous() &&
              (!bias.has_value() || (bias->scalar_type() == at::kFloat && bias->numel() == N &&
                                     bias->is_contiguous())), "column_sums, channel_scales, bias: (N,) each");
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const int64_t lda = depth * kDepth;
  std::vector<uint8_t> a(M * lda);
  std::vector<float> row_scales(M);
  const float* xs = x.data_ptr<float>();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) row_scales[m] = round_row(xs + m * K, K, lda, limit, a.data() + m * lda);
  });
  const Epilogue e{column_sums.data_ptr<int32_t>(), channel_scales.data_ptr<float>(),
                   bias.has_value() ? bias->data_ptr<float>() : nullptr, static_cast<int>(limit), N};
  const int8_t* w = packed.data_ptr<int8_t>();
  const int64_t block_stride = depth * kBlockBytes;
  constexpr int kPair = 2;  // column blocks per pass over the rows: 4 × 2 sums, 2 weight registers
  const int64_t pairs = (blocks + kPair - 1) / kPair;
  float* ys = y.data_ptr<float>();
  at::parallel_for(0, pairs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t b = p * kPair;
      const int8_t* next = b + 2 * kPair <= blocks ? w + (b + kPair) * block_stride : nullptr;
      if (b + kPair <= blocks)
        rows_times_blocks<kPair>(a.data(), lda, row_scales.data(), M, w + b * block_stride, block_stride, depth,
                                 next, b * kCols, e, ys, N);
      else
        rows_times_blocks<1>(a.data(), lda, row_scales.data(), M, w + b * block_stride, block_stride, depth,
                             nullptr, b * kCols, e, ys, N);
    }
  });
  return y;
}

}  // namespace

TORCH_LIBRARY(seq2seq_int8, m) {
  m.def("linear(Tensor x, Tensor packed, Tensor column_sums, Tensor channel_scales, Tensor? bias, "
        "int limit) -> Tensor");
}

TORCH_LIBRARY_IMPL(seq2seq_int8, CPU, m) { m.impl("linear", int8_linear); }
