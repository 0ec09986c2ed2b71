#pragma once
// SIGINT/SIGTERM in a worker: the first asks the training loop to stop at the
// next step (the cell is reported as interrupted); the second, with the
// default action restored, ends the process at once.

#include <csignal>

namespace trainbench::worker {

/// Installs the handlers (once, at start).
void InstallInterruptHandlers();

/// The signal received, or 0.
int InterruptSignal();

}  // namespace trainbench::worker
