#pragma once

namespace trainbench {

/// A TCP port free on this machine now (bound to port 0 and released):
/// for a data-parallel cell's store, a metrics port of 0, the TLS backend.
/// Throws std::runtime_error when none can be had.
int FreeTcpPort();

}  // namespace trainbench
