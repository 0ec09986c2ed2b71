#pragma once
// Where the metrics go: /metrics served by civetweb (under prometheus-cpp's
// Exposer) with basic authentication and, in front of it, TLS as the
// settings say; and the final push to a Pushgateway. What is measured lives
// in metric_families.h and metrics.h.

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "experiment.h"
#include "tls_front.h"

namespace trainbench {

/// Normalises "9464" / ":9464" to "127.0.0.1:9464"; throws
/// std::invalid_argument for anything that is not HOST:PORT.
std::string NormaliseListenAddress(const std::string& address);

/// Serves `registry` on options.address (HOST:PORT, or PORT: loopback) while
/// alive; with an empty address serves nothing. Not copyable.
class MetricsServer {
 public:
  /// Starts listening; throws std::runtime_error with a one-line message when
  /// the address cannot be bound (port in use, say) or the password file
  /// cannot be read.
  MetricsServer(const MetricsSpec& options, std::shared_ptr<prometheus::Registry> registry);
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// The address actually bound ("127.0.0.1:9464"), or "".
  const std::string& address() const { return address_; }
  bool serving() const { return exposer_ != nullptr; }
  /// "https" behind TLS, else "http".
  std::string scheme() const { return tls_ ? "https" : "http"; }

 private:
  std::string address_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::unique_ptr<TlsFront> tls_;
};

/// Pushes `registry` to the Pushgateway at `url` ("http://HOST:PORT") under
/// job "trainbench" and the experiment's label; logs the outcome, never throws.
void PushMetrics(const std::string& url, const std::string& experiment,
                 const std::shared_ptr<prometheus::Registry>& registry);

}  // namespace trainbench
