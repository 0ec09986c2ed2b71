#pragma once
// The CIFAR-10 binary releases trainbench knows, pinned: what `trainbench
// data fetch` accepts and `trainbench data list` checks a folder against.
//
// The official release (the dataset authors' cifar-10-binary.tar.gz) is
// pinned by its archive: size and SHA-256 (its MD5 is the one the CIFAR page
// publishes). Files are pinned one by one where their digests are known.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainbench::data {

/// The dataset authors' address of the binary release.
inline constexpr const char* kCifar10Url = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
/// The archive's file name (also what a download is kept as until it checks out).
inline constexpr const char* kCifar10Archive = "cifar-10-binary.tar.gz";
/// Bytes of each of the six .bin files: 10,000 records of 3,073 bytes.
inline constexpr std::uint64_t kCifar10FileBytes = 30'730'000;

/// The six files a release must hold, training files first.
const std::vector<std::string>& Cifar10Files();
/// Small files a release may hold that are installed when present (the class
/// names), with their largest accepted size.
const std::map<std::string, std::uint64_t>& Cifar10ExtraFiles();

/// One known release.
struct Cifar10Release {
  std::string id;                   ///< short name recorded in the install's manifest
  std::string description;          ///< one line for people
  std::uint64_t archive_bytes = 0;  ///< 0: not pinned by archive
  std::string archive_sha256;       ///< empty: not pinned by archive
  /// File name to SHA-256 for each of Cifar10Files(); empty: not pinned by file.
  std::map<std::string, std::string> file_sha256;
};

/// Every release trainbench knows.
const std::vector<Cifar10Release>& KnownCifar10Releases();

/// The release whose archive has this size and digest, or nullptr.
const Cifar10Release* ReleaseOfArchive(std::uint64_t bytes, const std::string& sha256);

/// The release every one of whose pinned files has the digest given for it
/// in `files` (name to SHA-256), or nullptr.
const Cifar10Release* ReleaseOfFiles(const std::map<std::string, std::string>& files);

/// A release by its id, or nullptr.
const Cifar10Release* ReleaseById(const std::string& id);

}  // namespace trainbench::data
