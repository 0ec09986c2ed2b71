#pragma once
// The version of the supervisor-worker protocol. Both processes are built
// from one tree and installed together; the version catches the cases where
// they are not (a stale worker on TRAINBENCH_WORKER, a half-upgraded
// installation). Any change to a message bumps it.

namespace trainbench::protocol {

/// 1: JSON lines on the worker's stdout (until 0.1.0).
/// 2: framed messages on a channel of their own; `hello` first.
inline constexpr int kProtocolVersion = 2;

}  // namespace trainbench::protocol
