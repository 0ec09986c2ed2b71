#pragma once
// SHA-256 (OpenSSL's libcrypto), fed in pieces: an archive is hashed while it
// is unpacked and each file while it is written, not read twice.

#include <cstddef>
#include <filesystem>
#include <memory>
#include <string>

struct evp_md_ctx_st;

namespace trainbench::data {

/// A running SHA-256. Not thread-safe; movable, not copyable.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(const void* data, std::size_t size);
  /// Lowercase hex of everything fed so far; ends this hash (Update after it
  /// starts nothing new).
  std::string HexDigest();

 private:
  std::unique_ptr<evp_md_ctx_st, void (*)(evp_md_ctx_st*)> ctx_;
};

/// Lowercase hex SHA-256 of the file, or "" when it cannot be read.
std::string Sha256OfFile(const std::filesystem::path& file);

}  // namespace trainbench::data
