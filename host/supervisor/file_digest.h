#pragma once
// SHA-256 of a file (OpenSSL's libcrypto), recorded for every plugin used.
#include <filesystem>
#include <string>

namespace trainbench {

/// Lowercase hex SHA-256 of the file, or "" when it cannot be read.
std::string Sha256OfFile(const std::filesystem::path& file);

}  // namespace trainbench
