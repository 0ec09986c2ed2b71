#pragma once
// The supervisor's own settings, declared as the worker's are
// (trainbench/protocol/settings.h): a member with its default, and here its
// key, range or choices and documentation.

#include "experiment.h"
#include "trainbench/protocol/settings.h"

namespace trainbench {

using protocol::Field;
using protocol::SettingsToJson;
using protocol::VisitFields;

/// `measurement:`: the worker's part first, then the supervisor's.
template <class V>
void VisitFields(MeasurementSpec& m, V& v) {
  protocol::VisitFields(static_cast<protocol::StepMeasurement&>(m), v);
  v(Field{"repeats",
          "run each cell this many times; the repeat of median throughput is kept, every repeat's rate recorded", 1,
          100},
    m.repeats);
  v(Field{"stall_timeout_seconds", "a worker that sends no event this long is killed and its cell failed", 1, 1e6},
    m.stall_timeout_seconds);
  v(Field{"stop_on_failure", "end the run at the first failed cell (the rest are recorded as skipped)"},
    m.stop_on_failure);
  v(Field{"baseline",
          "the device label speedups are against (left out: cpu, or the first device where none is labelled cpu)"},
    m.baseline);
  v(Field{"peak_tflops",
          "the hardware's peak TFLOP/s at the cells' precision, for mfu (default: a datasheet table of GPUs; none "
          "for CPUs)",
          1e-3, 1e6},
    m.peak_tflops);
}

template <class V>
void VisitFields(MetricsSpec::BasicAuth& a, V& v) {
  v(Field{"username", "user of HTTP basic authentication for /metrics"}, a.username);
  v(Field{"password_file", "file whose first line is the password (relative to the config file)"}, a.password_file);
}

template <class V>
void VisitFields(MetricsSpec::Tls& t, V& v) {
  v(Field{"cert_file", "PEM certificate (chain): serve /metrics over HTTPS (relative to the config file)"},
    t.cert_file);
  v(Field{"key_file", "its PEM private key (relative to the config file)"}, t.key_file);
}

/// `metrics:`. Command-line flags (--metrics-addr, ...) override each.
template <class V>
void VisitFields(MetricsSpec& m, V& v) {
  v(Field{"address", "serve Prometheus metrics on HOST:PORT (PORT alone: loopback; port 0: a free one)"}, m.address);
  v(Field{"linger_seconds", "keep serving this long after the run", 0, 86400}, m.linger_seconds);
  v(Field{"push_url", "push the final metrics to this Pushgateway (http://HOST:PORT)"}, m.push_url);
  v.Section("basic_auth", "HTTP basic authentication (both keys or neither)", m.basic_auth);
  v.Section("tls", "HTTPS (both keys or neither)", m.tls);
}

}  // namespace trainbench
