// Choosing tokens for runner/decoding/csrc/fast_decode.cpp, as runner/decoding/decode.py and
// runner/decoding/speculative.py choose them: one uniform per token, inverse CDF.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace sampling {

// The sampling distribution softmax(logits / temperature) into `probabilities` (one-hot argmax at
// temperature 0, the first maximum on ties as torch.argmax), and the token where its cumulative sum
// first exceeds `uniform` (inverse CDF: one uniform per token, as the eager loops draw them).
inline int64_t choose(const float* logits, int64_t vocab, double temperature, double uniform, float* probabilities) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (logits[v] > logits[best]) best = v;
  if (temperature == 0.0) {
    for (int64_t v = 0; v < vocab; ++v) probabilities[v] = v == best ? 1.f : 0.f;
    return best;
  }
  const float inverse = static_cast<float>(1.0 / temperature);
  float total = 0.f;
  for (int64_t v = 0; v < vocab; ++v) {
    probabilities[v] = std::exp((logits[v] - logits[best]) * inverse);
    total += probabilities[v];
  }
  double cumulative_total = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    probabilities[v] /= total;
    cumulative_total += probabilities[v];
  }
  const double threshold = uniform * cumulative_total;
  double cumulative = 0.0;
  for (int64_t v = 0; v < vocab; ++v) {
    cumulative += probabilities[v];
    if (probabilities[v] > 0.f && cumulative > threshold) return v;
  }
  return best;  // rounding left the threshold unreached
}

// softmax(logits / temperature) into out (one-hot argmax at temperature 0), as runner.decoding.accept_rule's
// probabilities().
inline void distribution(const float* logits, int64_t vocab, double temperature, float* out) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (logits[v] > logits[best]) best = v;
  if (temperature == 0.0) {
    for (int64_t v = 0; v < vocab; ++v) out[v] = v == best ? 1.f : 0.f;
    return;
  }
  const float t = static_cast<float>(temperature), top = logits[best] / t;
  float total = 0.f;
  for (int64_t v = 0; v < vocab; ++v) total += out[v] = std::exp(logits[v] / t - top);
  for (int64_t v = 0; v < vocab; ++v) out[v] /= total;
}

// The first index of the largest weight.
inline int64_t argmax(const double* weights, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (weights[i] > weights[best]) best = i;
  return best;
}

// The index where the cumulative weights first exceed draw x their total (runner.decoding.accept_rule.sample_index).
inline int64_t sample_index(const double* weights, int64_t n, double draw) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += weights[i];
  const double threshold = draw * total;
  double running = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    running += weights[i];
    if (weights[i] > 0.0 && running > threshold) return i;
  }
  return argmax(weights, n);  // rounding left the threshold unreached
}

// The accept rule's bug variants, controls for the distribution check (runner.decoding.accept_rule.RULE_VARIANTS).
enum Variant : int32_t {
  kCorrect = 0,
  kAcceptAll = 1,             // keep every proposal
  kInvertedRatio = 2,         // keep with min(1, q/p)
  kResidualUnnormalised = 3,  // compare the residual's cumulative sum with the draw, not draw x total
  kBonusFromDraft = 4,        // the bonus token drawn from the draft's row k (q then holds k + 1 rows)
};

// The speculative accept rule over k proposals (runner.decoding.speculative.verify, which this mirrors): p holds the
// target's k + 1 distributions, q the draft's k, randoms 2k + 1 uniforms. Proposal x at row i is kept when
// randoms[2i] * q(x) < p(x); else the row's correction is drawn from normalize(max(0, p - q)) at
// randoms[2i + 1] and the rest discarded; all k kept, a bonus token from p's last row at randoms[2k]
// (its argmax at temperature 0). Writes the emitted tokens and TV(p, q) of every decided row; returns
// the number of proposals kept. `residual` holds vocab doubles of scratch. `variant` other than
// kCorrect runs a deliberately broken rule.
inline int64_t accept(const float* p, const float* q, const int64_t* proposals, int64_t k, int64_t vocab,
                      double temperature, const double* randoms, int64_t* emitted, float* variations, double* residual,
                      int32_t variant = kCorrect) {
  for (int64_t i = 0; i < k; ++i) {
    const float* pi = p + i * vocab;
    const float* qi = q + i * vocab;
    float variation = 0.f;
    for (int64_t v = 0; v < vocab; ++v) variation += std::fabs(pi[v] - qi[v]);
    variations[i] = 0.5f * variation;
    const int64_t x = proposals[i];
    const double px = pi[x], qx = qi[x];
    const bool kept = variant == kAcceptAll       ? true
                      : variant == kInvertedRatio ? randoms[2 * i] * px < qx
                                                  : randoms[2 * i] * qx < px;
    if (kept) {
      emitted[i] = x;
      continue;
    }
    double total = 0.0;
    for (int64_t v = 0; v < vocab; ++v) total += residual[v] = std::max(0.0, static_cast<double>(pi[v]) - qi[v]);
    if (total <= 0.0)  // p == q: nothing to correct towards
      for (int64_t v = 0; v < vocab; ++v) residual[v] = pi[v];
    const double draw = variant == kResidualUnnormalised ? randoms[2 * i + 1] / total : randoms[2 * i + 1];
    emitted[i] = sample_index(residual, vocab, draw);
    return i;
  }
  const float* last = (variant == kBonusFromDraft ? q : p) + k * vocab;
  for (int64_t v = 0; v < vocab; ++v) residual[v] = last[v];
  emitted[k] = temperature == 0.0 ? argmax(residual, vocab) : sample_index(residual, vocab, randoms[2 * k]);
  return k;
}

}  // namespace sampling
