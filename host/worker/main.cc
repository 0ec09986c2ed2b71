// trainbench-worker: the process that has LibTorch loaded. The supervising
// `trainbench` host starts one per cell (and one to describe plugins), so a
// crash, a sticky CUDA error or LibTorch's thread-local storage never reach
// the host. Events go to stdout as JSON lines; logs go to stderr.

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "cell_spec.h"
#include "distributed.h"
#include "event_sink.h"
#include "interrupt.h"
#include "plugin_loader.h"
#include "trainer.h"

namespace {

using nlohmann::json;
using trainbench::worker::EventSink;

// Default options of a plugin, from its schema.
json DefaultOptions(const json& descriptor) {
  json options = json::object();
  for (const auto& p : descriptor.at("params")) options[p.at("name").get<std::string>()] = p.at("default");
  return options;
}

void Describe(const std::vector<std::string>& files, EventSink& sink) {
  for (const auto& file : files) {
    json event{{"event", "plugin"}, {"path", file}};
    try {
      auto plugin = trainbench::worker::LoadPlugin(file);
      json descriptor = trainbench::worker::DescriptorJson(*plugin.descriptor);
      event["status"] = "loaded";
      event["descriptor"] = descriptor;
      if (plugin.descriptor->kind == TB_PLUGIN_DEVICE) {
        try {
          auto device = trainbench::worker::CreateDevice(plugin, DefaultOptions(descriptor));
          std::string why_not;
          event["available"] = device->Available(&why_not);
          if (!why_not.empty()) event["unavailable_reason"] = why_not;
        } catch (const std::exception& e) {
          event["available"] = false;
          event["unavailable_reason"] = e.what();
        }
      }
    } catch (const std::exception& e) {
      event["status"] = "rejected";
      event["reason"] = e.what();
    }
    sink.Emit(event);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainbench worker: runs one cell or describes plugins (started by trainbench)"};
  app.require_subcommand(1);
  std::vector<std::string> files;
  auto* describe = app.add_subcommand("describe", "load plugins and print their descriptors");
  describe->add_option("files", files, "plugin shared libraries")->required();
  auto* run = app.add_subcommand("run", "run the cell given as JSON on stdin");
  auto* info = app.add_subcommand("info", "print this worker's LibTorch build");
  CLI11_PARSE(app, argc, argv);

  EventSink sink(stdout);
  if (describe->parsed()) {
    Describe(files, sink);
    return 0;
  }
  if (info->parsed()) {
    const TbBuildFingerprint& f = trainbench::worker::HostFingerprint();
    sink.Emit({{"event", "info"},
               {"torch_version", TORCH_VERSION},
               {"compiler", f.compiler},
               {"cxx_abi", f.cxx_abi},
               {"cuda_version", f.cuda_version},
               {"distributed_backends", trainbench::worker::DistributedBackends()}});
    return 0;
  }
  if (run->parsed()) {
    trainbench::worker::InstallInterruptHandlers();
    trainbench::worker::CellSpec spec;
    try {
      std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      spec = trainbench::worker::CellSpec::FromJson(json::parse(text));
    } catch (const std::exception& e) {
      sink.Emit({{"event", "error"}, {"reason", std::string("bad cell specification: ") + e.what()}});
      return 2;
    }
    return trainbench::worker::RunCell(spec, sink);
  }
  return 2;
}
