#include "metrics_server.h"

#include <prometheus/gateway.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <regex>
#include <stdexcept>
#include <vector>

#include "net.h"

namespace trainbench {

std::string NormaliseListenAddress(const std::string& address) {
  static const std::regex kPortOnly(R"(:?(\d{1,5}))");
  static const std::regex kHostPort(R"((\[[0-9a-fA-F:]+\]|[A-Za-z0-9.\-]+):(\d{1,5}))");
  std::smatch m;
  std::string host, port;
  if (std::regex_match(address, m, kPortOnly)) {
    host = "127.0.0.1";
    port = m[1];
  } else if (std::regex_match(address, m, kHostPort)) {
    host = m[1];
    port = m[2];
  } else {
    throw std::invalid_argument("metrics address '" + address +
                                "' is not HOST:PORT (e.g. 127.0.0.1:9464, or 0.0.0.0:9464 to "
                                "listen on every interface)");
  }
  if (std::stoi(port) < 1 || std::stoi(port) > 65535)
    throw std::invalid_argument("metrics address '" + address + "': port must be 1-65535");
  return host + ":" + port;
}

namespace {

// The first line of a password file; never logged.
std::string ReadPassword(const std::string& file) {
  std::ifstream in(file);
  std::string password;
  if (!in || !std::getline(in, password) || password.empty()) {
    throw std::runtime_error("metrics password file " + file + ": cannot read a password from its first line");
  }
  return password;
}

// Compares without an early exit, so timing does not reveal a prefix.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0;
}

}  // namespace

namespace {
// Connections served at once by /metrics, and how long one may take to send
// its request (see the constructor).
constexpr int kHttpThreads = 128;
constexpr int kRequestTimeoutMs = 5000;
}  // namespace

MetricsServer::MetricsServer(const MetricsSpec& options, std::shared_ptr<prometheus::Registry> registry) {
  if (!options.address.empty()) address_ = NormaliseListenAddress(options.address);
  std::string password;
  if (!options.basic_auth.username.empty()) password = ReadPassword(options.basic_auth.password_file);
  // With TLS, civetweb serves plain HTTP on a loopback port and TlsFront
  // holds the public address (civetweb's own TLS cannot work with OpenSSL 3:
  // see tls_front.h).
  const bool tls = !options.tls.cert_file.empty() && !address_.empty();
  const std::string http_address = tls ? "127.0.0.1:" + std::to_string(FreeTcpPort()) : address_;
  try {
    // No address: push only (--metrics-push), nothing served.
    // civetweb gives each connection a thread until its request is read: a
    // few clients that trickle bytes would hold them all (a slowloris). So:
    // threads to spare, and a request must arrive whole within 5 s (the
    // timeout counts from the first byte; a scraper sends it at once).
    if (!http_address.empty()) {
      exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
          "listening_ports", http_address, "num_threads", std::to_string(kHttpThreads), "request_timeout_ms",
          std::to_string(kRequestTimeoutMs), "keep_alive_timeout_ms", std::to_string(kRequestTimeoutMs)});
    }
  } catch (const std::exception& e) {
    throw std::runtime_error("metrics address " + http_address + ": cannot listen (" + e.what() +
                             "); is the port in use? choose another with --metrics-addr");
  }
  if (tls) {
    tls_ = std::make_unique<TlsFront>(address_, http_address, options.tls.cert_file, options.tls.key_file);
  }
  if (!options.basic_auth.username.empty() && exposer_) {
    exposer_->RegisterAuth(
        [user = options.basic_auth.username, password](const std::string& u, const std::string& p) {
          return SameSecret(u, user) & SameSecret(p, password);
        },
        "trainbench");
  }
  if (exposer_) exposer_->RegisterCollectable(registry);
  // Every interface, nobody asked who they are: say so once.
  const std::string host = address_.substr(0, address_.rfind(':'));
  if ((host == "0.0.0.0" || host == "[::]") && options.basic_auth.username.empty()) {
    spdlog::warn(
        "metrics on {} without authentication: anyone who can reach this machine can read them; set "
        "--metrics-user and --metrics-password-file (metrics.basic_auth), or listen on 127.0.0.1",
        address_);
  }
}

void PushMetrics(const std::string& url, const std::string& experiment,
                 const std::shared_ptr<prometheus::Registry>& registry) {
  static const std::regex kUrl(R"((https?://[^:/]+):(\d+)/?)");
  std::smatch m;
  if (!std::regex_match(url, m, kUrl)) {
    spdlog::error("metrics push URL '{}' is not http://HOST:PORT; not pushed", url);
    return;
  }
  prometheus::Gateway gateway(m[1], m[2], "trainbench", {{"experiment", experiment}});
  gateway.RegisterCollectable(registry);
  const int code = gateway.Push();
  if (code >= 200 && code < 300)
    spdlog::info("metrics pushed to {}", url);
  else
    spdlog::error("metrics push to {} failed (HTTP {})", url, code);
}

}  // namespace trainbench
