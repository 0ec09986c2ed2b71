#include "download.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "file_descriptor.h"

namespace trainbench::data {
namespace fs = std::filesystem;

namespace {

struct Transfer {
  int fd = -1;
  CURL* curl = nullptr;
  std::uint64_t offset = 0;   // bytes in the file when this request started
  std::uint64_t written = 0;  // bytes this request appended
  std::uint64_t max_bytes = 0;
  bool checked_status = false;
  std::string error;
  const ByteProgress* progress = nullptr;
};

size_t WriteBody(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  if (!t->checked_status) {
    t->checked_status = true;
    long code = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &code);
    // Asked for a range, sent the whole file: start the file again.
    if (t->offset > 0 && code == 200) {
      if (::ftruncate(t->fd, 0) != 0 || ::lseek(t->fd, 0, SEEK_SET) != 0) {
        t->error = std::string("cannot restart the download file: ") + std::strerror(errno);
        return 0;
      }
      t->offset = 0;
    }
  }
  if (t->offset + t->written + bytes > t->max_bytes) {
    t->error = "more than " + std::to_string(t->max_bytes) + " bytes: not the archive expected";
    return 0;
  }
  for (size_t off = 0; off < bytes;) {
    const ssize_t w = ::write(t->fd, data + off, bytes - off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      t->error = std::string("cannot write the download: ") + std::strerror(errno);
      return 0;
    }
    off += static_cast<size_t>(w);
  }
  t->written += bytes;
  return bytes;
}

int OnProgress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (*t->progress && now > 0)
    (*t->progress)(t->offset + static_cast<std::uint64_t>(now),
                   total > 0 ? t->offset + static_cast<std::uint64_t>(total) : 0);
  return 0;
}

// Errors after which asking again, for the rest, can succeed.
bool Transient(CURLcode code) {
  switch (code) {
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
  }
}

}  // namespace

void DownloadTo(const std::string& url, const fs::path& part, std::uint64_t max_bytes, int attempts,
                const ByteProgress& progress) {
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK) throw DownloadError(url + ": cannot start libcurl: " + curl_easy_strerror(global));
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw DownloadError(part.string() + ": cannot write: " + std::strerror(errno));
  const FileDescriptor closer(fd);
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw DownloadError(url + ": cannot start libcurl");
  char error[CURL_ERROR_SIZE] = "";
  for (int attempt = 1;; ++attempt) {
    Transfer t;
    t.fd = fd;
    t.curl = curl.get();
    t.max_bytes = max_bytes;
    t.progress = &progress;
    const off_t end = ::lseek(fd, 0, SEEK_END);
    t.offset = end > 0 ? static_cast<std::uint64_t>(end) : 0;
    error[0] = '\0';
    CURL* c = curl.get();
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    // A stalled transfer (under 1 KiB/s for a minute) is cut and resumed.
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "trainbench");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, OnProgress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    if (t.offset > 0) curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(t.offset));
    const CURLcode code = curl_easy_perform(c);
    if (code == CURLE_OK) return;
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    // 416: the file holds all there is (or more); a range error: the server
    // cannot resume. Either way, ask again from the start.
    if ((status == 416 || code == CURLE_RANGE_ERROR) && t.offset > 0 && attempt < attempts) {
      if (::ftruncate(fd, 0) != 0) throw DownloadError(part.string() + ": cannot restart: " + std::strerror(errno));
      continue;
    }
    const std::string why = !t.error.empty() ? t.error : (error[0] != '\0' ? error : curl_easy_strerror(code));
    if (Transient(code) && attempt < attempts) {
      std::this_thread::sleep_for(std::chrono::seconds(attempt));
      continue;
    }
    throw DownloadError("cannot download " + url + ": " + why);
  }
}

}  // namespace trainbench::data
