// The whole speculative loop of runner.decoding.speculative.speculative_decode in one call, for a fast
// target and a draft that proposes without Python: a fast model draft (runner.decoding.fast_loop.speculate)
// or a context table, an n-gram or bigram draft (fast_loop.speculate_table). On the EPYC a pass of the Python
// loop spent about as long between its two compiled calls (uniforms, tensors, bookkeeping) as a plain step
// takes, so the loop itself decided whether speculation won, as gpt-fast keeps its loop tight.
//
// It mirrors the Python loop step for step, reading the same uniforms in the same order (the draft's
// `length` per pass, then 2 x proposals + 1 for the verification: torch's float64 stream is the same
// drawn at once or in parts), so both loops emit the same tokens (tests/test_speculative_loop.py).
// Included by fast_decode.cpp after dl_sample and dl_verify, which it calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace speculative {

// Schedules (runner.decoding.speculative.Schedule.kind).
enum ScheduleKind : int32_t { kFixed = 0, kHeuristic = 1, kConfidence = 2 };

// A fast model draft with its own cache: it holds `length` positions of the committed text, and `feed` the
// committed tokens it has not fed yet (fed with the next proposal's pass).
struct ModelProposer {
  const void* model;
  float *keys, *values;
  int64_t capacity, length;
  std::vector<int64_t> feed;
  int64_t committed = 0, fed_proposals = 0;

  // Proposes up to `count` tokens into `proposals` and their distributions into q; returns how many, or -1.
  int32_t propose(int64_t count, double temperature, const double* uniforms, double threshold, int64_t* proposals,
                  float* q) {
    const int64_t feed_count = static_cast<int64_t>(feed.size());
    committed = length + feed_count;
    const int32_t drafted = dl_sample(model, feed.data(), feed_count, length, count, temperature, uniforms, keys,
                                      values, capacity, 0, proposals, q, threshold);
    // dl_sample fed every proposal but the last, or all of them when it stopped early.
    fed_proposals = drafted == count ? drafted - 1 : drafted;
    return drafted;
  }

  // The pass kept `accepted` proposals and emitted out[0..accepted]: roll the cache back to the committed
  // text and the kept proposals it fed; the rest waits to be fed.
  void commit(int64_t accepted, const int64_t* out) {
    const int64_t kept = std::min<int64_t>(accepted, fed_proposals);
    length = committed + kept;
    feed.assign(out + kept, out + accepted + 1);
  }
};

// A context-table draft (runner.decoding.drafts.ContextTableDraft) prepared at the loop's temperature: per context
// length L (a level), the contexts with a row of their own as numbers in base `vocab` (first token most
// significant), sorted, at keys[level_keys[L] .. level_keys[L + 1]), each with its row in that level's arrays
// (`rows`): distributions (rows x vocab), the float64 cumulative sums they are drawn from, top probabilities.
// The next token after a history reads the row of the longest suffix (at most history_length tokens) that has
// one; level 0 (the unigram) when none has. The arrays are the draft's own, read in place.
struct Table {
  int64_t vocab, history_length;
  const int64_t* level_keys;  // history_length + 2 offsets
  const int64_t* keys;
  const int64_t* rows;
  const float* const* distributions;  // per level
  const double* const* cumulative;
  const float* const* tops;

  struct Row {
    int64_t level, row;
  };

  // The row after `history` (its last tokens); level -1 where no level holds one (a table without level 0).
  Row locate(const std::vector<int64_t>& history) const {
    const int64_t size = static_cast<int64_t>(history.size());
    for (int64_t length = std::min(size, history_length); length >= 0; --length) {
      int64_t key = 0;
      for (int64_t i = size - length; i < size; ++i) key = key * vocab + history[i];
      const int64_t* begin = keys + level_keys[length];
      const int64_t* end = keys + level_keys[length + 1];
      const int64_t* found = std::lower_bound(begin, end, key);
      if (found != end && *found == key) return {length, rows[found - keys]};
    }
    return {-1, 0};
  }
};

// A context table's proposals: dictionary lookups and a bisection per token, as ContextTableDraft.propose.
struct TableProposer {
  const Table& table;
  std::vector<int64_t> history;  // the committed text's last history_length tokens

  int32_t propose(int64_t count, double, const double* uniforms, double threshold, int64_t* proposals, float* q) {
    KernelClock clock(kSample);  // priced as a draft's turn, as dl_sample is
    const int64_t vocab = table.vocab;
    std::vector<int64_t> context(history);
    for (int64_t i = 0; i < count; ++i) {
      const Table::Row found = table.locate(context);
      if (found.level < 0) return -1;
      const int64_t level = found.level, row = found.row;
      if (i > 0 && static_cast<double>(table.tops[level][row]) < threshold) return static_cast<int32_t>(i);
      // runner.decoding.decode.inverse_cdf: the first index whose cumulative sum exceeds uniform x the total.
      const double* cumulative = table.cumulative[level] + row * vocab;
      const int64_t index = std::upper_bound(cumulative, cumulative + vocab, uniforms[i] * cumulative[vocab - 1]) -
                            cumulative;
      proposals[i] = std::min<int64_t>(index, vocab - 1);
      const float* distribution = table.distributions[level] + row * vocab;
      std::copy(distribution, distribution + vocab, q + i * vocab);
      context.push_back(proposals[i]);
    }
    return static_cast<int32_t>(count);
  }

  void commit(int64_t accepted, const int64_t* out) {
    history.insert(history.end(), out, out + accepted + 1);
    const int64_t excess = static_cast<int64_t>(history.size()) - table.history_length;
    if (excess > 0) history.erase(history.begin(), history.begin() + excess);
  }
};

// What both loops share: the target, the schedule, the uniforms and what the loop reports (see dl_speculate).
struct Loop {
  const void* target;
  int64_t last, new_tokens;
  int32_t schedule;
  int64_t k, k_max;
  double p_min, temperature;
  const double* uniforms;
  int64_t uniforms_count;
  float *target_keys, *target_values;
  int64_t target_capacity, target_length;
  int64_t* emitted;
  int32_t *drafted_per_pass, *accepted_per_pass;
  float* variations;
  int64_t* state;
  const int32_t* replay_kept;
  int64_t replay_count;
  const int64_t* replay_tokens;
};

template <typename Proposer>
int32_t run(Loop& loop, Proposer& draft) {
  const int64_t vocab = static_cast<const Model*>(loop.target)->vocab;
  const int32_t schedule = loop.schedule;
  const int64_t longest = schedule == kFixed ? loop.k : loop.k_max;
  const double threshold = schedule == kConfidence ? loop.p_min : 0.0;
  int64_t length = schedule == kConfidence ? loop.k_max : loop.k;
  std::vector<int64_t> verified(longest + 1);
  std::vector<float> q(longest * vocab);
  int64_t count = 0, passes = 0, draft_calls = 0, read = 0, decided = 0, last = loop.last;
  while (count < loop.new_tokens && (loop.replay_kept == nullptr || passes < loop.replay_count)) {
    // The draft proposes `length` (fewer when the confidence schedule stops).
    if (read + 3 * length + 1 > loop.uniforms_count) return -1;
    int64_t* proposals = verified.data() + 1;
    const int32_t drafted =
        draft.propose(length, loop.temperature, loop.uniforms + read, threshold, proposals, q.data());
    if (drafted < 0) return -1;
    read += length;
    draft_calls += drafted + (drafted < length ? 1 : 0);
    // The target: the last committed token and the proposals in one pass, and the accept rule.
    verified[0] = last;
    int64_t* out = loop.emitted + count;
    int64_t accepted = dl_verify(loop.target, verified.data(), drafted, loop.target_length, loop.target_keys,
                                 loop.target_values, loop.target_capacity, q.data(), loop.temperature,
                                 loop.uniforms + read, out, loop.variations + decided, 0);
    if (accepted < 0) return -1;
    if (loop.replay_kept != nullptr) {
      accepted = std::min<int64_t>(std::max(loop.replay_kept[passes], 0), drafted);
      std::copy(loop.replay_tokens + count, loop.replay_tokens + count + accepted + 1, out);
    }
    read += 2 * drafted + 1;
    decided += std::min<int64_t>(accepted + 1, drafted);
    loop.drafted_per_pass[passes] = drafted;
    loop.accepted_per_pass[passes] = static_cast<int32_t>(accepted);
    ++passes;
    // Roll the target's cache back to the committed text; the draft follows it.
    loop.target_length += accepted + 1;
    draft.commit(accepted, out);
    last = out[accepted];
    count += accepted + 1;
    if (schedule == kHeuristic)
      length = accepted == drafted ? std::min(loop.k_max, length + 2) : std::max<int64_t>(1, length - 1);
  }
  int64_t* state = loop.state;
  state[0] = count;
  state[1] = passes;
  state[2] = draft_calls;
  state[3] = read;
  state[4] = decided;
  state[5] = loop.target_length;
  return 0;
}

}  // namespace speculative

extern "C" {

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
  if (static_cast<const Model*>(draft)->vocab != static_cast<const Model*>(target)->vocab || pending_count < 1 ||
      k < 1 || k > k_max)
    return -1;
  speculative::Loop loop{target,        last,          new_tokens,    schedule,         k,
                         k_max,         p_min,         temperature,   uniforms,         uniforms_count,
                         target_keys,   target_values, target_capacity, target_length,  emitted,
                         drafted_per_pass, accepted_per_pass, variations, state,         replay_kept,
                         replay_count,  replay_tokens};
  speculative::ModelProposer proposer{draft, draft_keys, draft_values, draft_capacity, draft_length,
                                      std::vector<int64_t>(pending, pending + pending_count)};
  if (speculative::run(loop, proposer) < 0) return -1;
  state[6] = proposer.length;
  state[7] = static_cast<int64_t>(proposer.feed.size());
  return 0;
}

// The same loop with a context-table draft (speculative::Table's arrays, prepared at `temperature`; see
// runner.decoding.drafts.ContextTableDraft.compiled_table) following `history` (history_count tokens: the
// committed text's last ones, at most history_length). `state` as dl_speculate's, [6] and [7] zero: a table
// keeps no cache. Returns 0, or -1 past the cache or the uniforms, or where a history finds no row.
int32_t dl_speculate_table(const void* target, int64_t history_length, const int64_t* level_keys,
                           const int64_t* keys, const int64_t* rows, const float* const* distributions,
                           const double* const* cumulative, const float* const* tops, const int64_t* history,
                           int64_t history_count, int64_t last, int64_t new_tokens, int32_t schedule, int64_t k,
                           int64_t k_max, double p_min, double temperature, const double* uniforms,
                           int64_t uniforms_count, float* target_keys, float* target_values, int64_t target_capacity,
                           int64_t target_length, int64_t* emitted, int32_t* drafted_per_pass,
                           int32_t* accepted_per_pass, float* variations, int64_t* state, const int32_t* replay_kept,
                           int64_t replay_count, const int64_t* replay_tokens) {
  if (history_length < 1 || history_count < 0 || history_count > history_length || k < 1 || k > k_max) return -1;
  const speculative::Table table{static_cast<const Model*>(target)->vocab,
                                 history_length,
                                 level_keys,
                                 keys,
                                 rows,
                                 distributions,
                                 cumulative,
                                 tops};
  speculative::Loop loop{target,        last,          new_tokens,    schedule,         k,
                         k_max,         p_min,         temperature,   uniforms,         uniforms_count,
                         target_keys,   target_values, target_capacity, target_length,  emitted,
                         drafted_per_pass, accepted_per_pass, variations, state,         replay_kept,
                         replay_count,  replay_tokens};
  speculative::TableProposer proposer{table, std::vector<int64_t>(history, history + history_count)};
  if (speculative::run(loop, proposer) < 0) return -1;
  state[6] = 0;
  state[7] = 0;
  return 0;
}

// One turn of a context-table draft alone, as dl_speculate_table runs it (clocked as a draft's turn): up to
// `count` proposals after `history` at `uniforms`, stopping before one whose row's top probability is below
// `threshold` (never before the first), into `proposals` and their rows into q (count x vocab). Returns how many,
// or -1 where a history finds no row. What a cost session times a table draft's call by
// (runner.experiments.parts.speculative_costs.single_call_costs), where the loop runs in C++.
int32_t dl_propose_table(int64_t vocab, int64_t history_length, const int64_t* level_keys, const int64_t* keys,
                         const int64_t* rows, const float* const* distributions, const double* const* cumulative,
                         const float* const* tops, const int64_t* history, int64_t history_count, int64_t count,
                         double threshold, const double* uniforms, int64_t* proposals, float* q) {
  if (history_length < 1 || history_count < 0 || history_count > history_length || count < 1) return -1;
  const speculative::Table table{vocab, history_length, level_keys, keys, rows, distributions, cumulative, tops};
  speculative::TableProposer proposer{table, std::vector<int64_t>(history, history + history_count)};
  return proposer.propose(count, 0.0, uniforms, threshold, proposals, q);
}

}  // extern "C"
