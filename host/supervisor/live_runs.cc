#include "live_runs.h"

#include <csignal>
#include <stdexcept>
#include <string>

namespace trainbench {
namespace {

// Lock-free, so that a signal handler can walk it.
std::atomic<RunStop*> live[kMaxLiveRuns];
// A stop requested while no run was live, for the next one.
std::atomic<int> pending{0};

extern "C" void OnSignal(int sig) { RequestStopAll(sig); }

// The workers run in a process group of their own, so a terminal's Ctrl-C
// and a service manager's SIGTERM reach only the host: pass it on. The
// worker stops at its next step on SIGINT or SIGTERM; a hang-up is the
// host's business, the worker gets SIGTERM for it.
void Forward(int group, int sig) noexcept {
  if (group > 0 && sig != 0) ::kill(-group, sig == SIGHUP ? SIGTERM : sig);
}

}  // namespace

void RunStop::Request(int sig) noexcept {
  signal_.store(sig);
  Forward(workers_.load(), sig);
}

void RunStop::SetWorkers(int group) noexcept {
  workers_.store(group);
  Forward(group, signal_.load());  // a request made while the group was being set up
}

LiveRun::LiveRun(RunStop& stop) : slot_(-1) {
  for (int i = 0; i < kMaxLiveRuns && slot_ < 0; ++i) {
    RunStop* empty = nullptr;
    if (live[i].compare_exchange_strong(empty, &stop)) slot_ = i;
  }
  if (slot_ < 0)
    throw std::runtime_error("more than " + std::to_string(kMaxLiveRuns) +
                             " trainbench runs at once in one process: wait for one to finish");
  if (const int sig = pending.exchange(0); sig != 0) stop.Request(sig);
}

LiveRun::~LiveRun() { live[slot_].store(nullptr); }

void RequestStopAll(int sig) noexcept {
  bool any = false;
  for (auto& slot : live) {
    if (RunStop* stop = slot.load()) {
      stop->Request(sig);
      any = true;
    }
  }
  if (!any) pending.store(sig);
}

void InstallSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A file-size limit reached (a quota, ulimit -f) fails the write with
  // EFBIG, reported like a full disk, instead of killing the run.
  signal(SIGXFSZ, SIG_IGN);
  // A closed terminal or a dropped ssh session: stop as for SIGTERM, keeping
  // what finished; unless started under nohup, which asked to ignore it.
  struct sigaction hup {};
  if (sigaction(SIGHUP, nullptr, &hup) == 0 && hup.sa_handler != SIG_IGN) sigaction(SIGHUP, &sa, nullptr);
}

}  // namespace trainbench
