#include "tls_front.h"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace trainbench {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

tcp::endpoint Endpoint(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) throw std::runtime_error("metrics address " + address + ": expected HOST:PORT");
  boost::system::error_code ec;
  const auto ip = asio::ip::make_address(address.substr(0, colon), ec);
  if (ec) throw std::runtime_error("metrics address " + address + ": not an IP address");
  return {ip, static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))};
}

// One client: TLS on the front socket, plain HTTP to the backend, bytes
// copied both ways until either side closes.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // `open` counts the connections alive (one io thread: no lock needed).
  // `ended` is called when it is gone.
  Connection(tcp::socket socket, asio::ssl::context& ssl, tcp::endpoint backend, int& open, std::function<void()> ended)
      : front_(std::move(socket), ssl),
        back_(front_.get_executor()),
        backend_(backend),
        handshake_timer_(front_.get_executor()),
        open_(open),
        ended_(std::move(ended)) {
    ++open_;
  }
  ~Connection() {
    --open_;
    ended_();
  }

  void Start() {
    auto self = shared_from_this();
    // A client that never finishes its handshake, or then goes quiet, is
    // dropped; the backend cuts one that trickles its request.
    deadline_ = std::chrono::steady_clock::now() + kHandshake;
    handshake_timer_.expires_at(deadline_);
    handshake_timer_.async_wait([self](const boost::system::error_code& ec) { self->OnTimer(ec); });
    front_.async_handshake(asio::ssl::stream_base::server, [self](const boost::system::error_code& ec) {
      if (ec) return self->Close();
      self->Touch();
      self->back_.async_connect(self->backend_, [self](const boost::system::error_code& ec2) {
        if (ec2) return self->Close();
        self->Relay(self->front_, self->back_, self->up_);
        self->Relay(self->back_, self->front_, self->down_);
      });
    });
  }

 private:
  // A connection idle this long (no byte either way) is closed; one whose
  // TLS handshake has not finished within kHandshake too (a scraper's takes
  // milliseconds; clients waiting in the backlog get its place sooner).
  static constexpr auto kIdle = std::chrono::seconds(5);
  static constexpr auto kHandshake = std::chrono::seconds(2);

  void Touch() { deadline_ = std::chrono::steady_clock::now() + kIdle; }

  void OnTimer(const boost::system::error_code& ec) {
    if (ec || closed_) return;
    if (std::chrono::steady_clock::now() >= deadline_) return Close();
    auto self = shared_from_this();
    handshake_timer_.expires_at(deadline_);
    handshake_timer_.async_wait([self](const boost::system::error_code& e) { self->OnTimer(e); });
  }

  // Copies what `from` reads to `to`, until either side fails or closes.
  template <typename From, typename To, typename Buffer>
  void Relay(From& from, To& to, Buffer& buffer) {
    auto self = shared_from_this();
    from.async_read_some(asio::buffer(buffer),
                         [self, &from, &to, &buffer](const boost::system::error_code& ec, size_t n) {
                           if (ec) return self->Close();
                           self->Touch();
                           asio::async_write(to, asio::buffer(buffer, n),
                                             [self, &from, &to, &buffer](const boost::system::error_code& ec2, size_t) {
                                               if (ec2) return self->Close();
                                               self->Relay(from, to, buffer);
                                             });
                         });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    handshake_timer_.cancel();
    back_.close(ignored);
    front_.lowest_layer().close(ignored);
  }

  asio::ssl::stream<tcp::socket> front_;
  tcp::socket back_;
  tcp::endpoint backend_;
  asio::steady_timer handshake_timer_;  // the handshake's, then the idle deadline's
  std::chrono::steady_clock::time_point deadline_;
  std::array<char, 16384> up_{}, down_{};
  bool closed_ = false;
  int& open_;
  std::function<void()> ended_;
};

}  // namespace

struct TlsFront::Impl {
  asio::io_context io;
  asio::ssl::context ssl{asio::ssl::context::tls_server};
  tcp::acceptor acceptor{io};
  tcp::endpoint backend;
  std::vector<std::thread> threads;
  int open = 0;         // connections alive, each holding up to two descriptors
  bool paused = false;  // full: new clients wait in the listen backlog
  // False once the front is being destroyed: connections ending then (their
  // handlers destroyed with the io context) resume nothing.
  std::shared_ptr<bool> running = std::make_shared<bool>(true);
  asio::steady_timer retry{io};

  // When full, stops accepting until a connection ends: new clients wait in
  // the kernel's listen backlog, first come first served, holding none of
  // the run's descriptors, instead of being turned away; idle ones are
  // closed after their deadline, so that a scraper's turn comes within it.
  void Accept() {
    if (open >= TlsFront::kMaxConnections) {
      paused = true;
      return;
    }
    acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        std::make_shared<Connection>(std::move(socket), ssl, backend, open, [this, alive = running] {
          if (*alive) Resume();
        })->Start();
      } else {
        // Out of descriptors (EMFILE) or the like: try again shortly rather
        // than spin on accept.
        retry.expires_after(std::chrono::milliseconds(100));
        retry.async_wait([this](const boost::system::error_code& e) {
          if (!e) Accept();
        });
        return;
      }
      Accept();
    });
  }

  // A connection ended: accept again if full had stopped it.
  void Resume() {
    if (paused && open < TlsFront::kMaxConnections) {
      paused = false;
      Accept();
    }
  }
};

TlsFront::TlsFront(const std::string& listen, const std::string& backend, const std::string& cert_file,
                   const std::string& key_file)
    : impl_(std::make_unique<Impl>()) {
  auto& i = *impl_;
  i.ssl.set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                    asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
  for (const std::string& file : {cert_file, key_file}) {
    if (std::ifstream probe(file); !probe) {
      throw std::runtime_error(file + ": cannot read (" + std::strerror(errno) +
                               "); give a readable PEM file with --metrics-tls-cert / --metrics-tls-key "
                               "(metrics.tls in YAML)");
    }
  }
  boost::system::error_code ec;
  i.ssl.use_certificate_chain_file(cert_file, ec);
  if (ec) throw std::runtime_error(cert_file + ": not a PEM certificate (chain) for TLS: " + ec.message());
  // An expired certificate still serves, but every scraper will refuse it.
  if (X509* cert = SSL_CTX_get0_certificate(i.ssl.native_handle()); cert != nullptr) {
    if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
      spdlog::warn("{}: the TLS certificate has expired; scrapers that check it will refuse /metrics: renew it",
                   cert_file);
    } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
      spdlog::warn("{}: the TLS certificate is not valid yet (check the clock)", cert_file);
    }
  }
  i.ssl.use_private_key_file(key_file, asio::ssl::context::pem, ec);
  if (ec)
    throw std::runtime_error(key_file + ": not a PEM private key for TLS, or not " + cert_file + "'s: " + ec.message());
  i.backend = Endpoint(backend);
  const tcp::endpoint at = Endpoint(listen);
  i.acceptor.open(at.protocol(), ec);
  if (!ec) i.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) i.acceptor.bind(at, ec);
  if (!ec) i.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    throw std::runtime_error("metrics address " + listen + ": cannot listen (" + ec.message() +
                             "); is the port in use? choose another with --metrics-addr");
  }
  i.Accept();
  // One thread: a TLS stream takes one read and one write at a time, unsynchronised.
  i.threads.emplace_back([&i] { i.io.run(); });
}

TlsFront::~TlsFront() {
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
  // No io thread now; connections whose handlers are destroyed with the
  // context must not resume accepting.
  *impl_->running = false;
}

}  // namespace trainbench
