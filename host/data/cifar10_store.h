#pragma once
// CIFAR-10 on a user's machine: fetched (downloaded, or from an archive or a
// folder on disk), verified against the pinned releases (cifar10_release.h)
// and installed atomically; an installed folder checked again on request.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace trainbench::data {

/// The manifest an install writes beside the files: the release, where it
/// came from and each file's size and SHA-256.
inline constexpr const char* kManifestFile = "trainbench-data.json";

/// What `trainbench data fetch cifar10` was asked.
struct FetchRequest {
  std::filesystem::path data_home;  ///< the set goes into data_home/cifar-10-batches-bin
  std::string url;                  ///< download from here when `from` is empty
  std::filesystem::path from;       ///< an archive or a folder already on disk
  bool force = false;               ///< install even over a folder that verifies
};

/// Called as work advances: the stage ("download", "unpack", "verify"),
/// bytes done and the total (0 when unknown).
using FetchProgress = std::function<void(const std::string& stage, std::uint64_t done, std::uint64_t total)>;

/// The state of a folder that should hold CIFAR-10.
struct FolderCheck {
  enum class State {
    kMissing,     ///< no folder, or a file is missing
    kVerified,    ///< every file matches a pinned release or the install's manifest
    kUnverified,  ///< sizes right, but the files match no pinned release
    kDamaged,     ///< a file's size is wrong, or it differs from the manifest
  };
  State state = State::kMissing;
  std::filesystem::path folder;
  std::string release;  ///< the release's id when verified
  std::string detail;   ///< one line for people
};

/// Fetches, verifies and installs the set into data_home/cifar-10-batches-bin:
/// unpacked into a temporary folder beside it and renamed into place only
/// when every file checks out, so configs never see a partial set. A
/// download is kept as data_home/cifar-10-binary.tar.gz.part until it
/// verifies (a later fetch resumes it) and removed once installed. Throws
/// DataError (or DownloadError) with one line naming the file that failed,
/// leaving nothing new where configs look.
FolderCheck FetchCifar10(const FetchRequest& request, const FetchProgress& progress);

/// Checks `folder` (every file's size and SHA-256). Reads ~185 MB.
FolderCheck CheckCifar10Folder(const std::filesystem::path& folder);

}  // namespace trainbench::data
