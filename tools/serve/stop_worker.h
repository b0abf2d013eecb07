// How a serve:: component's worker thread ends: its loop waits on `wake`
// under `mutex` until `stopping` (or work) and returns once stopping with
// nothing left to do.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace qkv::serve {

// Sets `stopping` under `mutex`, wakes the loop and waits for it to return.
inline void stop_worker(std::mutex& mutex, bool& stopping, std::condition_variable& wake,
                        std::thread& worker) {
  {
    std::lock_guard lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  worker.join();
}

}  // namespace qkv::serve
