// Helper threads for runner/decoding/csrc: a caller splits a loop of independent items (chunks of a layer's rows,
// attention heads) with them. Items are claimed one at a time from a shared ticket, and the caller claims
// too, so a helper that the OS has not scheduled costs nothing: the caller does its items. The caller
// waits only for items a helper has already claimed. Helpers spin while calls keep coming (a decode step
// posts about a dozen loops) and sleep after a millisecond without work.
#pragma once

#include <immintrin.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace pool {

using Task = void (*)(const void* context, int64_t item);

class Pool {
 public:
  explicit Pool(int helpers) {
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { serve(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }
  int helpers() const { return static_cast<int>(threads_.size()); }

  // Runs task(context, i) for i in [0, count), on this thread and the helpers; returns when all are done.
  void run(Task task, const void* context, int64_t count) {
    if (threads_.empty() || count <= 1) {
      for (int64_t i = 0; i < count; ++i) task(context, i);
      return;
    }
    task_.store(task, std::memory_order_relaxed);
    context_.store(context, std::memory_order_relaxed);
    count_.store(count, std::memory_order_relaxed);
    finished_.store(0, std::memory_order_relaxed);
    const uint64_t generation = (ticket_.load(std::memory_order_relaxed) >> 32) + 1;
    // seq_cst store, then load: a helper about to sleep either sees this loop or is counted as sleeping.
    ticket_.store(generation << 32, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    while (claim(generation, task, context)) {
    }
    while (finished_.load(std::memory_order_acquire) < count) _mm_pause();
  }

 private:
  // Claims and runs one item of `generation`; false when none is left (or a newer loop began). The task
  // and context were read after the ticket that named `generation`: if a newer loop replaced them since,
  // the ticket changed too and the claim fails.
  bool claim(uint64_t generation, Task task, const void* context) {
    uint64_t ticket = ticket_.load(std::memory_order_acquire);
    while (true) {
      if ((ticket >> 32) != generation) return false;
      const int64_t item = static_cast<int64_t>(ticket & 0xffffffffu);
      if (item >= count_.load(std::memory_order_relaxed)) return false;
      if (ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acq_rel)) {
        task(context, item);
        finished_.fetch_add(1, std::memory_order_release);
        return true;
      }
    }
  }

  void serve() {
    using clock = std::chrono::steady_clock;
    uint64_t done_generation = 0;
    auto idle_since = clock::now();
    while (true) {
      const uint64_t ticket = ticket_.load(std::memory_order_acquire);
      const uint64_t generation = ticket >> 32;
      if (generation != done_generation) {
        while (claim(generation, task_.load(std::memory_order_relaxed), context_.load(std::memory_order_relaxed))) {
        }
        done_generation = generation;
        idle_since = clock::now();
        continue;
      }
      if (clock::now() - idle_since < std::chrono::milliseconds(1)) {
        _mm_pause();
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return stopping_ || (ticket_.load(std::memory_order_acquire) >> 32) != done_generation; });
      sleeping_.fetch_sub(1, std::memory_order_acq_rel);
      if (stopping_) return;
      idle_since = clock::now();
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<uint64_t> ticket_{0};  // generation << 32 | next item
  std::atomic<int64_t> count_{0}, finished_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<Task> task_{nullptr};
  std::atomic<const void*> context_{nullptr};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
};

}  // namespace pool
