#pragma once
// Unpacks CIFAR-10's files from a .tar.gz in-process (libarchive: gzip and
// tar only), refusing what could write outside the folder it is given.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "cifar10.h"

namespace trainbench::data {

/// Called as work advances: bytes done of `total` (0 when unknown).
using ByteProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

/// A file written, with its size and SHA-256.
struct WrittenFile {
  std::uint64_t bytes = 0;
  std::string sha256;
};

/// What an archive held.
struct UnpackedArchive {
  std::uint64_t archive_bytes = 0;
  std::string archive_sha256;
  std::map<std::string, WrittenFile> files;  ///< by file name, as written into the folder
};

/// Reads the gzip-compressed tar `archive` and writes the CIFAR-10 files it
/// holds under cifar-10-batches-bin/ (Cifar10Files() and Cifar10ExtraFiles())
/// into `dest`, an existing folder, never following or replacing a link
/// there. Other regular entries are read past. Throws DataError naming the
/// archive and the entry, writing nothing more, for an entry that is a link,
/// a device, absolute, names "..", repeats a file or is larger than a
/// CIFAR-10 file can be, and for a damaged, truncated or unreadable archive
/// or a file that cannot be written (a full disk). What it wrote before
/// throwing stays in `dest` for the caller to remove.
UnpackedArchive UnpackCifar10Archive(const std::filesystem::path& archive, const std::filesystem::path& dest,
                                     const ByteProgress& progress);

/// Writes `size` bytes to a new file `dest/name` (created exclusively, never
/// through a link) and returns its digest; `source` is read with `read`
/// until it returns 0. Throws DataError naming the file on a write error.
WrittenFile WriteNewFile(const std::filesystem::path& dest, const std::string& name,
                         const std::function<std::int64_t(char* buffer, std::size_t size)>& read);

}  // namespace trainbench::data
