#pragma once
// TLS for /metrics: a TLS listener (Boost.Asio over OpenSSL) in front of
// prometheus-cpp's HTTP server, which then listens on the loopback only.
// Debian 12's civetweb cannot serve TLS with OpenSSL 3 itself (it looks up
// SSL_get_peer_certificate, which libssl.so.3 no longer exports, and calls
// the null pointer: docs/metrics.md), so the handshake happens here and the
// decrypted bytes are relayed to civetweb unchanged (basic authentication
// stays civetweb's).

#include <memory>
#include <string>

namespace trainbench {

class TlsFront {
 public:
  /// Listens on `listen` ("HOST:PORT") with the PEM certificate chain and
  /// private key given; relays each connection to `backend` ("127.0.0.1:PORT").
  /// Throws std::runtime_error with a one-line message naming the file or
  /// address that is wrong.
  TlsFront(const std::string& listen, const std::string& backend, const std::string& cert_file,
           const std::string& key_file);
  ~TlsFront();
  TlsFront(const TlsFront&) = delete;
  TlsFront& operator=(const TlsFront&) = delete;

  /// Connections served at once; beyond them, new clients wait in the
  /// listen backlog (first come, first served) until one ends. A connection
  /// whose TLS handshake has not finished in 2 s, or idle for 5 s, is closed.
  static constexpr int kMaxConnections = 64;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainbench
