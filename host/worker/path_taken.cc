#include "path_taken.h"

#include <string>

namespace trainbench::worker {

namespace {

// The SDK's shape for a path: names to numbers, strings, booleans or objects
// of those, at most kMaxDepth objects deep and kMaxValues values in all.
// Checked as the text is read (nothing deeper is ever built): a plugin's
// answer must not make results.json huge, or too deep for other tools.
class PathShape : public nlohmann::json_sax<nlohmann::json> {
 public:
  static constexpr int kMaxDepth = 8;
  static constexpr std::size_t kMaxValues = 4096;
  std::string problem;

  bool null() override { return Refuse("a null"); }
  bool boolean(bool) override { return Count(); }
  bool number_integer(number_integer_t) override { return Count(); }
  bool number_unsigned(number_unsigned_t) override { return Count(); }
  bool number_float(number_float_t, const string_t&) override { return Count(); }
  bool string(string_t&) override { return Count(); }
  bool binary(binary_t&) override { return Refuse("binary data"); }
  bool start_object(std::size_t) override {
    if (++depth_ > kMaxDepth) return Refuse("objects nested deeper than " + std::to_string(kMaxDepth));
    return Count();
  }
  bool key(string_t&) override { return true; }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    return Refuse(depth_ == 0 ? "no JSON object" : "an array (a path holds numbers, strings, booleans or objects)");
  }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return Refuse("no JSON object");
  }

 private:
  bool Count() {
    if (depth_ == 0) return Refuse("no JSON object");
    if (++values_ > kMaxValues) return Refuse("more than " + std::to_string(kMaxValues) + " values");
    return true;
  }
  bool Refuse(const std::string& what) {
    if (problem.empty()) problem = what;
    return false;
  }
  int depth_ = 0;
  std::size_t values_ = 0;
};

}  // namespace

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
      throw PathRefused("its PathTaken gave " + std::to_string(text.size()) + " bytes (at most 64 KiB)");
    } else if (!text.empty()) {
      PathShape shape;
      if (!nlohmann::json::sax_parse(text, &shape) || !shape.problem.empty())
        throw PathRefused("its PathTaken gave " + (shape.problem.empty() ? "no JSON object" : shape.problem));
      path["model"] = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    }
  }
  if (graphed != nullptr) {
    const GraphedStep::Path g = graphed->path();
    path["worker"] = {{"graphs_captured", g.captures}, {"graph_replays", g.replays}};
    if (g.memsets_as_kernels >= 0) path["worker"]["memsets_as_kernels"] = g.memsets_as_kernels;
    if (g.captures > 0) path["worker"]["capture_reuses_cross_stream_memory"] = g.cross_stream_reuse;
  }
  if (copies != nullptr && copies->Groups() > 0) {
    path["worker"]["working_copies"] = {{"parameters", copies->Parameters().size()},
                                        {"groups", copies->Groups()},
                                        {"updates", copies->Updates() ? "sgd_in_backward" : "optimizer"}};
  }
  return path;
}

}  // namespace trainbench::worker
