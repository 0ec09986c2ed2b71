#pragma once
// The energy of a cell's training epochs (evaluation excluded): read from the
// device's meter (energy.h) at each epoch's start and end and around each
// evaluation inside it. A meter that stops answering ends the measurement
// with its reason; the cell's result then says why there is none.

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "energy.h"
#include "trainbench/protocol/events.h"

namespace trainbench::worker {

class EpochEnergy {
 public:
  /// Measures with `choice`'s meter (none: its reason is the result's).
  explicit EpochEnergy(EnergyChoice choice) : meter_(std::move(choice.meter)), reason_(std::move(choice.reason)) {}

  /// No measurement, for `reason` (a data-parallel rank whose package
  /// counter another rank reads).
  void Drop(const std::string& reason);
  /// Whether a meter is read, and its source ("nvml", "rapl").
  bool measuring() const { return meter_ != nullptr; }
  std::string source() const { return meter_ ? meter_->source() : ""; }

  void StartEpoch();
  /// Around what does not count (an evaluation inside an epoch).
  void Pause();
  void Resume();
  void EndEpoch();

  /// The energy part of the result: joules over the epochs, per epoch, per
  /// sample (`samples` trained), average power over `trained_seconds`; or
  /// why there is none.
  void Fill(protocol::Result& result, double trained_seconds, int64_t samples) const;

 private:
  void Failed();

  std::unique_ptr<EnergyMeter> meter_;
  std::string reason_;
  std::optional<double> mark_;
  double epoch_joules_ = 0;
  std::vector<double> epochs_;
};

}  // namespace trainbench::worker
