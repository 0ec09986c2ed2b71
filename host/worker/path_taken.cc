#include "path_taken.h"

#include <string>

namespace trainbench::worker {

nlohmann::json PathTaken(sdk::Model& model, int abi_minor, const GraphedStep* graphed, const MixedPrecision* copies) {
  constexpr size_t kMaxBytes = 64 * 1024;
  nlohmann::json path = nlohmann::json::object();
  if (abi_minor >= 4) {
    std::string text;
    const sdk::Status status = model.PathTaken(&text);
    if (!status.ok()) {
      std::string shown;  // printable ASCII: a plugin's bytes need not be UTF-8
      for (const char c : status.message().substr(0, 200)) shown += c >= 0x20 && c < 0x7f ? c : '?';
      path["model_error"] = "the model's PathTaken failed: " + shown;
    } else if (text.size() > kMaxBytes) {
      path["model_error"] = "the model's PathTaken gave " + std::to_string(text.size()) + " bytes (at most 64 KiB)";
    } else if (!text.empty()) {
      nlohmann::json answer = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (answer.is_object())
        path["model"] = std::move(answer);
      else
        path["model_error"] = "the model's PathTaken gave no JSON object";
    }
  }
  if (graphed != nullptr) {
    const GraphedStep::Path g = graphed->path();
    path["worker"] = {{"graphs_captured", g.captures}};
    if (g.memsets_as_kernels >= 0) path["worker"]["memsets_as_kernels"] = g.memsets_as_kernels;
  }
  if (copies != nullptr && copies->Groups() > 0) {
    path["worker"]["working_copies"] = {{"parameters", copies->Parameters().size()},
                                        {"groups", copies->Groups()},
                                        {"updates", copies->Updates() ? "sgd_in_backward" : "optimizer"}};
  }
  return path;
}

}  // namespace trainbench::worker
