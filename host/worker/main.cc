// trainbench-worker: the process that has LibTorch loaded. The supervising
// `trainbench` host starts one per cell (and one to describe plugins), so a
// crash, a sticky CUDA error or LibTorch's thread-local storage never reach
// the host. Events go to the channel the host passes (--events-fd), framed;
// stdout and stderr, which plugins and LibTorch also write to, go to the
// cell's log. Run by hand without --events-fd, events are JSON lines on stdout.

#include <fcntl.h>
#include <sys/prctl.h>
#include <torch/version.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "distributed.h"
#include "event_sink.h"
#include "interrupt.h"
#include "plugin_loader.h"
#include "trainbench/protocol/error.h"
#include "trainbench/protocol/version.h"
#include "trainer.h"

namespace {

using nlohmann::json;
using trainbench::worker::EventSink;

void Describe(const std::vector<std::string>& files, EventSink& sink) {
  for (const auto& file : files) {
    trainbench::protocol::PluginDescribed event;
    event.path = file;
    try {
      auto plugin = trainbench::worker::LoadPlugin(file);
      event.descriptor = trainbench::worker::DescriptorJson(*plugin.descriptor);
      event.loaded = true;
      if (plugin.descriptor->kind == TB_PLUGIN_DEVICE) {
        try {
          auto device = trainbench::worker::CreateDevice(plugin, trainbench::worker::DefaultOptions(event.descriptor));
          std::string why_not;
          event.available = device->Available(&why_not);
          event.unavailable_reason = why_not;
        } catch (const std::exception& e) {
          event.available = false;
          event.unavailable_reason = e.what();
        }
      }
    } catch (const std::exception& e) {
      event.loaded = false;
      event.descriptor = nullptr;
      event.reason = e.what();
    }
    sink.Emit(event);
  }
}

// A worker must not outlive the host that started it (an ssh drop, a
// SIGKILL): the kernel ends it when its parent goes. The host names itself
// (--supervisor-pid); if it is already gone, end now.
void EndWithSupervisor(pid_t supervisor) {
  if (supervisor <= 0) return;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != supervisor) std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();  // setup_seconds counts from here
  CLI::App app{"trainbench worker: runs one cell or describes plugins (started by trainbench)"};
  app.require_subcommand(1);
  std::vector<std::string> files;
  auto* describe = app.add_subcommand("describe", "load plugins and print their descriptors");
  describe->add_option("files", files, "plugin shared libraries")->required();
  auto* run = app.add_subcommand("run", "run the cell given as JSON on stdin");
  auto* info = app.add_subcommand("info", "print this worker's LibTorch build");
  int events_fd = -1;
  app.add_option("--events-fd", events_fd, "write framed events to this file descriptor (the host's channel)");
  pid_t supervisor = 0;
  app.add_option("--supervisor-pid", supervisor, "end when this process, the parent, has gone");
  CLI11_PARSE(app, argc, argv);

  EndWithSupervisor(supervisor);
  if (events_fd >= 0) {
    // Off the well-known number, so that a plugin writing to fd 3 reaches
    // nothing; close-on-exec, so that programs a plugin starts do not hold
    // the channel open.
    const int moved = ::fcntl(events_fd, F_DUPFD_CLOEXEC, 100);
    if (moved < 0) {
      std::perror("trainbench-worker: --events-fd");
      return 2;
    }
    ::close(events_fd);
    events_fd = moved;
  }
  EventSink sink(events_fd);
  sink.Emit(trainbench::protocol::Hello{trainbench::protocol::kProtocolVersion, TRAINBENCH_VERSION});
  if (describe->parsed()) {
    Describe(files, sink);
    return 0;
  }
  if (info->parsed()) {
    const TbBuildFingerprint& f = trainbench::worker::HostFingerprint();
    sink.Emit(trainbench::protocol::Info{TORCH_VERSION, f.compiler, f.cxx_abi, f.cuda_version,
                                         trainbench::worker::DistributedBackends()});
    return 0;
  }
  if (run->parsed()) {
    trainbench::worker::InstallInterruptHandlers();
    trainbench::worker::CellSpec spec;
    try {
      std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      const json parsed = json::parse(text, nullptr, false);
      if (parsed.is_discarded()) throw trainbench::protocol::ProtocolError("cell spec: not JSON");
      spec = trainbench::protocol::CellSpecFromJson(parsed);
    } catch (const std::exception& e) {
      sink.Emit(trainbench::protocol::Error{std::string("bad cell specification: ") + e.what(), false});
      return 2;
    }
    return trainbench::worker::RunCell(spec, sink, started);
  }
  return 2;
}
