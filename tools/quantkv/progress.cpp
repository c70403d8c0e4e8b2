#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace quantkv::tool {
namespace {
constexpr double kShowAfterSeconds = 1.0;  // short steps stay silent
constexpr auto kRefresh = std::chrono::milliseconds(200);
}  // namespace

bool progress_enabled(bool forced) { return forced || isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::string label, int64_t total, bool enabled)
    : label_(std::move(label)), total_(total), start_(Clock::now()) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (shown_) {
    stage_.store(nullptr, std::memory_order_relaxed);
    draw(std::chrono::duration<double>(Clock::now() - start_).count());
    std::fputs(" done\n", stderr);
    std::fflush(stderr);
  }
}

void Progress::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, kRefresh, [this] { return stop_; })) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    if (elapsed < kShowAfterSeconds) continue;
    shown_ = true;
    draw(elapsed);
  }
}

void Progress::draw(double elapsed) {
  // "\r" + erase-to-end keeps one line per step on a terminal.
  const char* stage = stage_.load(std::memory_order_relaxed);
  const std::string label = stage ? label_ + ": " + stage : label_;
  if (total_ > 0) {
    const int64_t done = done_.load(std::memory_order_relaxed);
    const int width = 24;
    const int filled = int(width * (done < total_ ? double(done) / double(total_) : 1.0));
    std::fprintf(stderr, "\r\033[K  %s [%.*s%*s] %lld/%lld  %.1f s", label.c_str(), filled,
                 "########################", width - filled, "", static_cast<long long>(done),
                 static_cast<long long>(total_), elapsed);
  } else {
    std::fprintf(stderr, "\r\033[K  %s ... %.1f s", label.c_str(), elapsed);
  }
  std::fflush(stderr);
}

}  // namespace quantkv::tool
