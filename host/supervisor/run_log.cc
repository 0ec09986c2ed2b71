#include "run_log.h"

#include <fmt/format.h>

#include <cmath>

#include "logging.h"

namespace trainbench {
using nlohmann::json;

std::string DurationText(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(seconds, 0.0)));
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {} s", s / 60, s % 60);
  return fmt::format("{} h {} min", s / 3600, s % 3600 / 60);
}

void RunLog::OnRunStarted(const Experiment& experiment, size_t cells) {
  eta_ = RunEta(experiment);
  cells_ = cells;
}

void RunLog::OnCellStarted(size_t index, const CellRecord&) {
  eta_.CellStarted(index);
  last_line_ = {};
}

void RunLog::OnEvent(size_t index, const CellRecord& cell, const protocol::Event& event) {
  const std::string where = fmt::format("[{}/{}] {} on {}", index + 1, cells_, cell.model, cell.device);
  if (std::holds_alternative<protocol::Started>(event)) {
    eta_.AttemptStarted();
  } else if (const auto* p = std::get_if<protocol::Progress>(&event)) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_line_ < std::chrono::seconds(3)) return;
    last_line_ = now;
    json fields = {{"event", "progress"},
                   {"epoch", p->epoch},
                   {"step", p->step},
                   {"steps_per_epoch", p->steps_per_epoch},
                   {"loss", p->loss}};
    std::string rate = "(warm-up)";
    if (p->samples_per_second > 0) {
      fields["samples_per_second"] = p->samples_per_second;
      rate = fmt::format("{:.1f} samples/s", p->samples_per_second);
    }
    std::string eta;
    if (const auto estimate = eta_.OnProgress(*p)) {
      fields["eta_seconds"] = estimate->cell_seconds;
      fields["run_eta_seconds"] = estimate->run_seconds;
      eta = fmt::format(", cell ETA {}, run ETA {}", DurationText(estimate->cell_seconds),
                        DurationText(estimate->run_seconds));
    }
    LogWith(spdlog::level::info, std::move(fields), "{}: epoch {} step {}/{} loss {:.4f} {}{}", where, p->epoch,
            p->step, p->steps_per_epoch, p->loss, rate, eta);
  } else if (const auto* ep = std::get_if<protocol::Epoch>(&event)) {
    LogWith(spdlog::level::info,
            {{"event", "epoch"},
             {"epoch", ep->epoch},
             {"epoch_seconds", ep->seconds},
             {"loss", ep->train_loss},
             {"test_accuracy", ep->test_accuracy}},
            "{}: epoch {} done in {:.1f} s{}, loss {:.4f}, test accuracy {:.2f}%", where, ep->epoch, ep->seconds,
            ep->complete ? "" : " (partial: budget reached)", ep->train_loss, 100.0 * ep->test_accuracy);
  }
}

void RunLog::OnCellFinished(size_t index, const CellRecord& cell) { eta_.CellFinished(index, cell); }

}  // namespace trainbench
