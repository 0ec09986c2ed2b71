#include "epoch_energy.h"

namespace trainbench::worker {

void EpochEnergy::Drop(const std::string& reason) {
  meter_.reset();
  reason_ = reason;
  epochs_.clear();
}

void EpochEnergy::StartEpoch() {
  epoch_joules_ = 0;
  Resume();
}

void EpochEnergy::Pause() {
  if (!meter_ || !mark_) return;
  const auto now = meter_->ReadJoules();
  if (!now) return Failed();
  epoch_joules_ += *now - *mark_;
  mark_.reset();
}

void EpochEnergy::Resume() {
  if (!meter_) return;
  mark_ = meter_->ReadJoules();
  if (!mark_) Failed();
}

void EpochEnergy::EndEpoch() {
  Pause();
  if (meter_) epochs_.push_back(epoch_joules_);
}

void EpochEnergy::Failed() { Drop("the " + meter_->source() + " energy counter stopped answering during training"); }

void EpochEnergy::Fill(protocol::Result& result, double trained_seconds, int64_t samples) const {
  if (!meter_ || epochs_.empty()) {
    result.energy_reason = reason_.empty() ? "no energy counter was read" : reason_;
    return;
  }
  double joules = 0;
  for (const double j : epochs_) joules += j;
  result.energy_source = meter_->source();
  result.energy_joules = joules;
  result.epoch_energy_joules = epochs_;
  if (meter_->glitches() > 0) result.energy_counter_glitches = meter_->glitches();
  result.joules_per_sample = joules / static_cast<double>(samples);
  if (trained_seconds > 0) result.average_power_watts = joules / trained_seconds;
}

}  // namespace trainbench::worker
