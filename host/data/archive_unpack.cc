#include "archive_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "cifar10_release.h"
#include "data_home.h"
#include "file_descriptor.h"
#include "sha256.h"

namespace trainbench::data {
namespace fs = std::filesystem;

namespace {

// No entry of the release is larger; a bigger one is not CIFAR-10 (or a
// decompression bomb), refused before it is inflated.
constexpr std::int64_t kLargestEntry = static_cast<std::int64_t>(kCifar10FileBytes);
// All entries together, skipped ones included (the release: ~185 MB).
constexpr std::int64_t kLargestArchiveContents = INT64_C(512) << 20;

// The archive file, read in blocks through libarchive, hashed on the way.
struct Source {
  int fd = -1;
  std::uint64_t size = 0;
  std::uint64_t read = 0;
  Sha256 hash;
  std::vector<char> buffer = std::vector<char>(1 << 16);
  const ByteProgress* progress = nullptr;
  std::string error;
};

la_ssize_t ReadBlock(struct archive*, void* data, const void** block) {
  auto* s = static_cast<Source*>(data);
  ssize_t n;
  do n = ::read(s->fd, s->buffer.data(), s->buffer.size());
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    s->error = std::strerror(errno);
    return -1;
  }
  s->hash.Update(s->buffer.data(), static_cast<size_t>(n));
  s->read += static_cast<std::uint64_t>(n);
  if (*s->progress) (*s->progress)(s->read, s->size);
  *block = s->buffer.data();
  return n;
}

// Entry names as tar writes them: "./a/b" and "a//b" are "a/b".
std::string Normalized(const std::string& name) {
  std::string out;
  for (const auto& part : fs::path(name)) {
    const std::string p = part.string();
    if (p.empty() || p == "." || p == "/") continue;
    out += (out.empty() ? "" : "/") + p;
  }
  return out;
}

bool NamesParent(const std::string& name) {
  for (const auto& part : fs::path(name))
    if (part == "..") return true;
  return false;
}

// The archive cannot be read on: why, as libarchive or the reader says.
[[noreturn]] void Damaged(struct archive* a, const Source& source, const std::string& where, const std::string& what) {
  const char* detail = archive_error_string(a);
  throw DataError(where + ": " + what + ": " +
                  (!source.error.empty() ? source.error
                   : detail != nullptr   ? detail
                                         : "unreadable") +
                  " (a damaged, truncated or unfinished download, or not a .tar.gz: fetch it again)");
}

// The size of a plain file's entry, -1 for a folder's; what a CIFAR-10
// archive never holds is refused (an absolute path, '..', a link, a device
// or pipe, a file larger than any of its files).
std::int64_t EntrySize(struct archive_entry* entry, const std::string& name, const std::string& at) {
  if (name.empty() || name.front() == '/')
    throw DataError(at + " is an absolute path: refused (not a CIFAR-10 archive)");
  if (NamesParent(name)) throw DataError(at + " names '..' (it would leave its folder): refused");
  if (archive_entry_hardlink(entry) != nullptr || archive_entry_filetype(entry) == AE_IFLNK)
    throw DataError(at + " is a link: refused (CIFAR-10 archives hold plain files)");
  if (archive_entry_filetype(entry) == AE_IFDIR) return -1;
  if (archive_entry_filetype(entry) != AE_IFREG)
    throw DataError(at + " is not a plain file (a device or pipe): refused");
  const std::int64_t size = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : -1;
  if (size < 0 || size > kLargestEntry)
    throw DataError(at + " is " + std::to_string(size) + " bytes, more than any CIFAR-10 file: refused");
  return size;
}

}  // namespace

WrittenFile WriteNewFile(const fs::path& dest, const std::string& name,
                         const std::function<std::int64_t(char* buffer, std::size_t size)>& read) {
  const fs::path path = dest / name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw DataError(path.string() + ": cannot create: " + std::strerror(errno));
  const FileDescriptor closer(fd);
  const auto fail = [&](int error) {
    throw DataError(path.string() + ": cannot write: " + std::strerror(error) +
                    (error == ENOSPC || error == EDQUOT ? " (free some space, or fetch into another --dir)" : ""));
  };
  WrittenFile written;
  Sha256 hash;
  std::vector<char> buffer(1 << 16);
  for (;;) {
    const std::int64_t n = read(buffer.data(), buffer.size());
    if (n == 0) break;
    hash.Update(buffer.data(), static_cast<size_t>(n));
    for (std::int64_t off = 0; off < n;) {
      const ssize_t w = ::write(fd, buffer.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail(errno);
      off += w;
    }
    written.bytes += static_cast<std::uint64_t>(n);
  }
  if (::fsync(fd) != 0) fail(errno);
  written.sha256 = hash.HexDigest();
  return written;
}

UnpackedArchive UnpackCifar10Archive(const fs::path& archive, const fs::path& dest, const ByteProgress& progress) {
  const std::string where = archive.string();
  Source source;
  source.progress = &progress;
  source.fd = ::open(archive.c_str(), O_RDONLY | O_CLOEXEC);
  if (source.fd < 0) throw DataError(where + ": cannot open: " + std::strerror(errno));
  const FileDescriptor closer(source.fd);
  std::error_code ec;
  source.size = fs::file_size(archive, ec);
  if (ec) throw DataError(where + ": cannot read: " + ec.message());

  std::unique_ptr<struct archive, decltype(&archive_read_free)> a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_format_tar(a.get());
  const auto damaged = [&](const std::string& what) { Damaged(a.get(), source, where, what); };
  if (archive_read_open(a.get(), &source, nullptr, ReadBlock, nullptr) != ARCHIVE_OK) damaged("not a gzip tar archive");

  UnpackedArchive out;
  std::set<std::string> wanted(Cifar10Files().begin(), Cifar10Files().end());
  for (const auto& [name, bytes] : Cifar10ExtraFiles()) wanted.insert(name);
  std::int64_t contents = 0;
  const std::string folder = std::string(kCifar10Folder) + "/";
  for (;;) {
    struct archive_entry* entry = nullptr;
    const int status = archive_read_next_header(a.get(), &entry);
    if (status == ARCHIVE_EOF) break;
    if (status < ARCHIVE_WARN) damaged("cannot read the next entry");
    const char* raw = archive_entry_pathname(entry);
    const std::string name = raw != nullptr ? raw : "";
    const std::string at = where + ": entry '" + name + "'";
    const std::int64_t size = EntrySize(entry, name, at);
    if (size < 0) continue;  // a folder
    contents += size;
    if (contents > kLargestArchiveContents)
      throw DataError(where + ": holds more than " + std::to_string(kLargestArchiveContents >> 20) +
                      " MiB: not a CIFAR-10 archive, refused");
    const std::string path = Normalized(name);
    if (path.rfind(folder, 0) != 0 || wanted.count(path.substr(folder.size())) == 0) continue;
    const std::string file = path.substr(folder.size());
    if (out.files.count(file) != 0) throw DataError(at + " repeats " + file + ": refused");
    const auto extra = Cifar10ExtraFiles().find(file);
    if (extra != Cifar10ExtraFiles().end() && static_cast<std::uint64_t>(size) > extra->second)
      throw DataError(at + " is " + std::to_string(size) + " bytes, too large for " + file + ": refused");
    out.files[file] = WriteNewFile(dest, file, [&](char* buffer, std::size_t capacity) -> std::int64_t {
      const la_ssize_t n = archive_read_data(a.get(), buffer, capacity);
      if (n < 0) damaged("cannot unpack " + file);
      return n;
    });
    if (out.files[file].bytes != static_cast<std::uint64_t>(size)) damaged(file + " ends early");
  }
  // What follows the last entry (tar's padding) is read too: the digest is
  // the whole file's.
  for (const void* block = nullptr; ReadBlock(a.get(), &source, &block) > 0;) {
  }
  out.archive_bytes = source.read;
  out.archive_sha256 = source.hash.HexDigest();
  return out;
}

}  // namespace trainbench::data
