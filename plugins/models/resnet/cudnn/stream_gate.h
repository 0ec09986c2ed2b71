// Holds a CUDA stream while the host queues work behind it, so that the
// queued kernels then run back to back and events between them time the
// GPU's work alone, not the host's launch overhead (a convolution of a few
// microseconds is otherwise timed at the speed the host launches it).
//
//   StreamGate gate(stream);   // the stream waits here
//   ... record events, launch ...
//   gate.Open();               // everything queued runs
//
// The stream waits in a host function (cudaLaunchHostFunc) until Open(), the
// destructor, or `limit` has passed: a gate left shut, or a queue that fills
// up behind it and blocks the host's next launch, costs at most `limit`,
// never a hang. Keep what is queued behind one gate small (tens of launches).
// Queue behind a shut gate only kernels that have run before in the process:
// a kernel's first launch loads its module (CUDA's lazy loading), which waits
// for the device, and so for the gate (its limit, then it goes on).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace trainbench::plugins {

class StreamGate {
 public:
  static constexpr std::chrono::milliseconds kDefaultLimit{1000};

  explicit StreamGate(cudaStream_t stream, std::chrono::milliseconds limit = kDefaultLimit)
      : state_(std::make_shared<State>()) {
    state_->limit = limit;
    // The host function holds its own reference: it may run after this
    // object is gone.
    auto* held = new std::shared_ptr<State>(state_);
    if (cudaLaunchHostFunc(stream, &Wait, held) != cudaSuccess) {
      delete held;
      cudaGetLastError();  // clear it: the stream simply is not held
      Open();
    }
  }
  ~StreamGate() { Open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void Open() {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->open = true;
    }
    state_->changed.notify_all();
  }

  // Whether the stream was held until Open() (false when the limit let it go
  // first); meaningful once the stream has passed the gate.
  bool HeldUntilOpened() const {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return !state_->timed_out;
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool open = false, timed_out = false;
    std::chrono::milliseconds limit{1000};
  };

  static void CUDART_CB Wait(void* data) {
    std::unique_ptr<std::shared_ptr<State> > held(static_cast<std::shared_ptr<State>*>(data));
    State& state = **held;
    std::unique_lock<std::mutex> lock(state.mutex);
    if (!state.changed.wait_for(lock, state.limit, [&] { return state.open; })) state.timed_out = true;
  }

  std::shared_ptr<State> state_;
};

}  // namespace trainbench::plugins
