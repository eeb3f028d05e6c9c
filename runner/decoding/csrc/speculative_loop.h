// The whole speculative loop of runner.decoding.speculative.speculative_decode in one call, for a fast
// target and a fast model draft (runner.decoding.fast.FastDecoder.speculate): on the EPYC a pass of the
// Python loop spent about as long between its two compiled calls (uniforms, tensors, bookkeeping) as a
// plain step takes, so the loop itself decided whether speculation won, as gpt-fast keeps its loop tight.
//
// It mirrors the Python loop step for step, reading the same uniforms in the same order (the draft's
// `length` per pass, then 2 x proposals + 1 for the verification: torch's float64 stream is the same
// drawn at once or in parts), so both loops emit the same tokens (tests/test_speculative_loop.py).
// Included by fast_decode.cpp after dl_sample and dl_verify, which it calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

extern "C" {

// Schedules (runner.decoding.speculative.Schedule.kind).
enum ScheduleKind : int32_t { kFixed = 0, kHeuristic = 1, kConfidence = 2 };

// Generates until `new_tokens` are emitted. The target's cache holds the committed text but its last
// token `last` (target_length positions); the draft's cache holds draft_length positions of the
// committed text, and `pending` (pending_count tokens) the committed text it has not fed yet.
//
// Writes the emitted tokens (all passes': up to new_tokens + longest of them) to `emitted`, and per pass
// the proposals drafted and kept to `drafted_per_pass` and `accepted_per_pass`, the TV of every decided
// position to `variations` (room for passes x longest). `state` returns: [0] tokens emitted, [1] passes,
// [2] draft calls, [3] uniforms read, [4] variations written, [5] the target's cache length, [6] the
// draft's cache length, [7] how many of the emitted tokens the draft has not fed (its pending tail).
// Returns 0, or -1 when a pass would run past either cache or the uniforms (the caller sizes them).
//
// With `replay_kept` (else null) it replays given passes, as a cost session does
// (runner.experiments.parts.speculative_costs): pass i keeps min(replay_kept[i], drafted) proposals whatever
// the accept rule says and emits the next tokens of `replay_tokens` instead of its own, for at most
// `replay_count` passes, so that both models feed as many tokens per pass as those passes did.
int32_t dl_speculate(const void* target, const void* draft, int64_t last, int64_t new_tokens, int32_t schedule,
                     int64_t k, int64_t k_max, double p_min, double temperature, const double* uniforms,
                     int64_t uniforms_count, float* target_keys, float* target_values, int64_t target_capacity,
                     int64_t target_length, float* draft_keys, float* draft_values, int64_t draft_capacity,
                     int64_t draft_length, const int64_t* pending, int64_t pending_count, int64_t* emitted,
                     int32_t* drafted_per_pass, int32_t* accepted_per_pass, float* variations, int64_t* state,
                     const int32_t* replay_kept, int64_t replay_count, const int64_t* replay_tokens) {
  const int64_t vocab = static_cast<const Model*>(target)->vocab;
  if (static_cast<const Model*>(draft)->vocab != vocab || pending_count < 1 || k < 1 || k > k_max) return -1;
  const int64_t longest = schedule == kFixed ? k : k_max;
  const double threshold = schedule == kConfidence ? p_min : 0.0;
  int64_t length = schedule == kConfidence ? k_max : k;
  std::vector<int64_t> feed(pending, pending + pending_count), verified(longest + 1);
  std::vector<float> q(longest * vocab);
  int64_t count = 0, passes = 0, draft_calls = 0, read = 0, decided = 0;
  while (count < new_tokens && (replay_kept == nullptr || passes < replay_count)) {
    // The draft: feed what it has not seen, then propose `length` (fewer when the confidence schedule stops).
    if (read + 3 * length + 1 > uniforms_count) return -1;
    const int64_t feed_count = static_cast<int64_t>(feed.size());
    const int64_t draft_committed = draft_length + feed_count;
    int64_t* proposals = verified.data() + 1;
    const int32_t drafted =
        dl_sample(draft, feed.data(), feed_count, draft_length, length, temperature, uniforms + read, draft_keys,
                  draft_values, draft_capacity, 0, proposals, q.data(), threshold);
    if (drafted < 0) return -1;
    read += length;
    // dl_sample fed every proposal but the last, or all of them when it stopped early.
    const int64_t fed_proposals = drafted == length ? drafted - 1 : drafted;
    draft_calls += drafted + (drafted < length ? 1 : 0);
    // The target: the last committed token and the proposals in one pass, and the accept rule.
    verified[0] = last;
    int64_t* out = emitted + count;
    int64_t accepted =
        dl_verify(target, verified.data(), drafted, target_length, target_keys, target_values, target_capacity,
                  q.data(), temperature, uniforms + read, out, variations + decided, 0);
    if (accepted < 0) return -1;
    if (replay_kept != nullptr) {
      accepted = std::min<int64_t>(std::max(replay_kept[passes], 0), drafted);
      std::copy(replay_tokens + count, replay_tokens + count + accepted + 1, out);
    }
    read += 2 * drafted + 1;
    decided += std::min<int64_t>(accepted + 1, drafted);
    drafted_per_pass[passes] = drafted;
    accepted_per_pass[passes] = static_cast<int32_t>(accepted);
    ++passes;
    // Roll both caches back to the committed text (and, in the draft's, the kept proposals it fed).
    target_length += accepted + 1;
    const int64_t kept = std::min<int64_t>(accepted, fed_proposals);
    draft_length = draft_committed + kept;
    feed.assign(out + kept, out + accepted + 1);
    last = out[accepted];
    count += accepted + 1;
    if (schedule == kHeuristic)
      length = accepted == drafted ? std::min(k_max, length + 2) : std::max<int64_t>(1, length - 1);
  }
  state[0] = count;
  state[1] = passes;
  state[2] = draft_calls;
  state[3] = read;
  state[4] = decided;
  state[5] = target_length;
  state[6] = draft_length;
  state[7] = static_cast<int64_t>(feed.size());
  return 0;
}

}  // extern "C"
