// Progress for steps that run longer than about a second: a line on stderr, refreshed by a
// background thread, so even a single long library call shows that it is alive. Nothing is
// printed for short steps, and nothing at all unless enabled (stderr is a terminal, or
// --progress was given).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace quantkv::tool {

// Whether progress lines should be shown: `forced` (--progress), or stderr is a terminal.
bool progress_enabled(bool forced);

class Progress {
 public:
  // `total` units of work (0: unknown, only the elapsed time is shown).
  Progress(std::string label, int64_t total, bool enabled);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void advance(int64_t units = 1) { done_.fetch_add(units, std::memory_order_relaxed); }
  // What the step is doing now, shown after the label (a string that outlives the step).
  void stage(const char* text) { stage_.store(text, std::memory_order_relaxed); }

 private:
  void loop();
  void draw(double elapsed);

  using Clock = std::chrono::steady_clock;
  std::string label_;
  int64_t total_;
  std::atomic<int64_t> done_{0};
  std::atomic<const char*> stage_{nullptr};
  Clock::time_point start_;
  bool shown_ = false;
  bool stop_ = false;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace quantkv::tool
