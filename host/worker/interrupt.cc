#include "interrupt.h"

namespace trainbench::worker {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void OnInterrupt(int sig) { g_signal = sig; }
}  // namespace

void InstallInterruptHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second signal gets the default action
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int InterruptSignal() { return g_signal; }

}  // namespace trainbench::worker
