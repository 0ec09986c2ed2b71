// Embeds the trainbench engine: lists the plugins, builds an experiment in
// code (SimpleCNN and ResNet18 on the CPU), runs it while printing live
// progress from the engine's events, and prints what came out.
//
//   embed_engine CIFAR10_FOLDER OUT_FOLDER
//
// Ctrl-C stops the running cell at its next step; results stay written.

#include <trainbench/engine.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CIFAR10_FOLDER OUT_FOLDER\n", argv[0]);
    return 2;
  }
  try {
    trainbench::Engine engine;  // finds the installation's plugins
    int models = 0, devices = 0;
    for (const auto& p : engine.plugins()) {
      if (p.loaded) (p.kind == "model" ? models : devices) += 1;
    }
    std::printf("engine %s: %d model and %d device plugin(s)\n", trainbench::EngineVersion().c_str(), models, devices);

    auto experiment = trainbench::ExperimentBuilder("embedded")
                          .Seed(7)
                          .Cifar10(argv[1], 256, 128)
                          .Model("simple_cnn")
                          .Model("resnet18", {{"num_classes", 10}}, "resnet18-10")
                          .Device("cpu", {{"threads", 2}})
                          .Epochs(2)
                          .BatchSize(32)
                          .WarmupSteps(1)
                          .Set("/training/optimizer/lr", 0.02);
    const trainbench::ExperimentPlan plan = engine.Build(experiment);
    std::printf("plan '%s': %zu cell(s)\n", plan.name().c_str(), plan.cells().size());

    trainbench::Engine::InstallSignalHandlers();
    int epochs_seen = 0;
    trainbench::RunOptions options;
    options.out_dir = argv[2];
    const auto summary = engine.Run(plan, options, [&](const trainbench::RunEvent& e) {
      using Type = trainbench::RunEvent::Type;
      if (e.type == Type::kCellStarted) {
        std::printf("cell %zu: %s on %s\n", e.cell_index, e.cell.value("model", "").c_str(),
                    e.cell.value("device", "").c_str());
      } else if (e.type == Type::kWorker && e.data.value("event", "") == "epoch") {
        ++epochs_seen;
        std::printf("  epoch %d: loss %.4f, test accuracy %.1f%%\n", e.data.value("epoch", 0),
                    e.data.value("train_loss", 0.0), 100 * e.data.value("test_accuracy", 0.0));
      }
    });
    for (const auto& cell : summary.cells) {
      std::printf("result: %s on %s: %s, %.1f samples/s, %lld parameters, accuracy %.3f\n", cell.model.c_str(),
                  cell.device.c_str(), cell.status.c_str(), cell.samples_per_second, cell.params,
                  cell.test_accuracy.value_or(-1));
    }
    std::printf("epoch events: %d; results in %s; exit code %d\n", epochs_seen, summary.results_json.c_str(),
                summary.exit_code);
    return summary.exit_code;
  } catch (const trainbench::EngineError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return e.exit_code();
  }
}
