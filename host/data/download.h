#pragma once
// Downloads a file over HTTP(S) with libcurl: the proxy variables libcurl
// reads (http_proxy, https_proxy, no_proxy) are honoured, and a download cut
// short is resumed where it stopped.

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "archive_unpack.h"

namespace trainbench::data {

/// A download that failed; what() is one line naming the URL.
class DownloadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Appends the bytes of `url` that `part` does not hold yet (an HTTP Range
/// request; from the start when the server ignores it), retrying a
/// connection cut short up to `attempts` times in all. Refuses a body that
/// would make `part` larger than `max_bytes`. Throws DownloadError.
/// Not thread-safe (libcurl's global state is set up on first use).
void DownloadTo(const std::string& url, const std::filesystem::path& part, std::uint64_t max_bytes, int attempts,
                const ByteProgress& progress);

}  // namespace trainbench::data
