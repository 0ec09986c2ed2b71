#include "cifar10_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "archive_unpack.h"
#include "cifar10.h"
#include "cifar10_release.h"
#include "data_home.h"
#include "download.h"
#include "file_descriptor.h"
#include "sha256.h"

namespace trainbench::data {
namespace fs = std::filesystem;

namespace {

// The largest download accepted: the official archive is 162 MiB.
constexpr std::uint64_t kLargestDownload = std::uint64_t{256} << 20;
constexpr int kDownloadAttempts = 5;

std::string Hex12(const std::string& digest) { return digest.substr(0, 12) + "..."; }

// A folder of ours beside the target, removed when this goes out of scope
// unless kept: a failed fetch leaves nothing behind.
class ScratchFolder {
 public:
  ScratchFolder(const fs::path& parent, const std::string& prefix) {
    std::string pattern = (parent / (prefix + "XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw DataError(parent.string() + ": cannot make a folder in it: " + std::strerror(errno));
    path_ = pattern;
  }
  ~ScratchFolder() {
    std::error_code ec;
    if (!kept_) fs::remove_all(path_, ec);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  const fs::path& path() const { return path_; }
  void Keep() { kept_ = true; }

 private:
  fs::path path_;
  bool kept_ = false;
};

// One fetch into a data folder at a time (an exclusive lock on a file there).
class FetchLock {
 public:
  explicit FetchLock(const fs::path& home)
      : file_(home / ".cifar10-fetch.lock"),
        fd_(::open(file_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644)) {
    if (fd_.get() < 0) throw DataError(file_.string() + ": cannot open: " + std::strerror(errno));
    if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0)
      throw DataError(home.string() + ": another `trainbench data fetch` is installing here: wait for it to finish");
  }

 private:
  fs::path file_;
  FileDescriptor fd_;
};

// The files of a folder on disk (the folder itself, or its
// cifar-10-batches-bin), copied into `dest`.
std::map<std::string, WrittenFile> CopyFolder(fs::path from, const fs::path& dest, const ByteProgress& progress) {
  if (!fs::exists(from / Cifar10Files().front()) && fs::is_directory(from / kCifar10Folder)) from /= kCifar10Folder;
  std::map<std::string, WrittenFile> files;
  std::uint64_t done = 0;
  const std::uint64_t total = kCifar10FileBytes * Cifar10Files().size();
  auto copy = [&](const std::string& name, std::uint64_t largest) {
    const fs::path source = from / name;
    std::ifstream in(source, std::ios::binary);
    if (!in) throw DataError(source.string() + ": cannot open: " + std::strerror(errno));
    std::error_code ec;
    if (!fs::is_regular_file(source, ec)) throw DataError(source.string() + ": not a plain file");
    const std::uint64_t size = fs::file_size(source, ec);
    if (ec || size > largest)
      throw DataError(source.string() + ": " + std::to_string(size) + " bytes, more than a CIFAR-10 file holds");
    files[name] = WriteNewFile(dest, name, [&](char* buffer, std::size_t capacity) -> std::int64_t {
      in.read(buffer, static_cast<std::streamsize>(capacity));
      if (in.bad()) throw DataError(source.string() + ": cannot read");
      done += static_cast<std::uint64_t>(in.gcount());
      if (progress) progress(done, total);
      return in.gcount();
    });
  };
  for (const std::string& name : Cifar10Files()) {
    if (!fs::exists(from / name))
      throw DataError(from.string() + ": has no " + name + ": not a complete CIFAR-10 binary release");
    copy(name, kCifar10FileBytes);
  }
  for (const auto& [name, largest] : Cifar10ExtraFiles())
    if (fs::exists(from / name)) copy(name, largest);
  return files;
}

// Which pinned release `files` are, or a DataError naming `source` and the
// first file that matches none.
const Cifar10Release& Identify(const std::string& source, const std::map<std::string, WrittenFile>& files,
                               const UnpackedArchive* archive) {
  for (const std::string& name : Cifar10Files()) {
    const auto it = files.find(name);
    if (it == files.end())
      throw DataError(source + ": has no " + std::string(kCifar10Folder) + "/" + name +
                      ": not a complete CIFAR-10 binary release");
    if (it->second.bytes != kCifar10FileBytes)
      throw DataError(source + ": " + name + " is " + std::to_string(it->second.bytes) + " bytes, not " +
                      std::to_string(kCifar10FileBytes) + ": truncated or not CIFAR-10");
  }
  if (archive != nullptr)
    if (const Cifar10Release* r = ReleaseOfArchive(archive->archive_bytes, archive->archive_sha256)) return *r;
  std::map<std::string, std::string> digests;
  for (const auto& [name, f] : files) digests[name] = f.sha256;
  if (const Cifar10Release* r = ReleaseOfFiles(digests)) return *r;
  // The release most of whose files match: the file that does not is named.
  const Cifar10Release* nearest = nullptr;
  int best = 0;
  for (const auto& r : KnownCifar10Releases()) {
    int matching = 0;
    for (const auto& [name, digest] : r.file_sha256) matching += digests[name] == digest ? 1 : 0;
    if (matching > best) best = matching, nearest = &r;
  }
  if (nearest != nullptr) {
    for (const std::string& name : Cifar10Files())
      if (digests[name] != nearest->file_sha256.at(name))
        throw DataError(source + ": " + name + " is damaged: its SHA-256 " + Hex12(digests[name]) + " is not " +
                        Hex12(nearest->file_sha256.at(name)) + " (" + nearest->id +
                        " release): refused; fetch it again");
  }
  const Cifar10Release* official = ReleaseById("official");
  if (archive != nullptr) {
    throw DataError(source + ": matches no pinned CIFAR-10 release: its SHA-256 is " + Hex12(archive->archive_sha256) +
                    " (" + std::to_string(archive->archive_bytes) + " bytes), the official archive's " +
                    Hex12(official->archive_sha256) + " (" + std::to_string(official->archive_bytes) +
                    " bytes): a damaged download or another archive; fetch it again");
  }
  throw DataError(source + ": " + Cifar10Files().front() +
                  " matches no pinned CIFAR-10 release: the official release is verified through its "
                  "archive: give --from the cifar-10-binary.tar.gz itself");
}

std::string Now() {
  const std::time_t t = std::time(nullptr);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return stamp;
}

void WriteManifest(const fs::path& dest, const Cifar10Release& release, const std::string& source,
                   const std::string& installed, const std::map<std::string, WrittenFile>& files,
                   const UnpackedArchive* archive) {
  nlohmann::json m = {{"dataset", "cifar10"},
                      {"release", release.id},
                      {"description", release.description},
                      {"source", source},
                      {"installed", installed}};
  if (archive != nullptr) m["archive"] = {{"bytes", archive->archive_bytes}, {"sha256", archive->archive_sha256}};
  for (const auto& [name, f] : files) m["files"][name] = {{"bytes", f.bytes}, {"sha256", f.sha256}};
  const std::string text = m.dump(2) + "\n";
  std::size_t at = 0;
  WriteNewFile(dest, kManifestFile, [&](char* buffer, std::size_t capacity) -> std::int64_t {
    const std::size_t n = std::min(capacity, text.size() - at);
    std::memcpy(buffer, text.data() + at, n);
    at += n;
    return static_cast<std::int64_t>(n);
  });
}

// The manifest of an install, or null when there is none or it is not ours.
nlohmann::json ReadManifest(const fs::path& folder) {
  const fs::path file = folder / kManifestFile;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || fs::file_size(file, ec) > (64 << 10)) return nullptr;
  std::ifstream in(file);
  const nlohmann::json m = nlohmann::json::parse(in, nullptr, false);
  if (!m.is_object() || m.value("dataset", "") != "cifar10" || !m.contains("files") || !m["files"].is_object())
    return nullptr;
  return m;
}

void SyncFolder(const fs::path& folder) {
  const FileDescriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() >= 0) ::fsync(dir.get());
}

// A folder whose files are `release`'s; `how` adds where they came from.
FolderCheck Verified(const fs::path& folder, const Cifar10Release& release, const std::string& how) {
  FolderCheck check;
  check.state = FolderCheck::State::kVerified;
  check.folder = folder;
  check.release = release.id;
  check.detail = "verified: " + release.description + how;
  return check;
}

}  // namespace

FolderCheck CheckCifar10Folder(const fs::path& folder) {
  FolderCheck check;
  check.folder = folder;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    check.detail = "not there";
    return check;
  }
  std::map<std::string, std::string> digests;
  for (const std::string& name : Cifar10Files()) {
    const fs::path file = folder / name;
    if (!fs::exists(file, ec)) {
      check.detail = "has no " + name;
      return check;
    }
    const std::uint64_t size = fs::file_size(file, ec);
    if (ec || size != kCifar10FileBytes) {
      check.state = FolderCheck::State::kDamaged;
      check.detail = name + " is " + (ec ? "unreadable" : std::to_string(size) + " bytes, not 30730000");
      return check;
    }
    digests[name] = Sha256OfFile(file);
    if (digests[name].empty()) {
      check.state = FolderCheck::State::kDamaged;
      check.detail = name + " cannot be read";
      return check;
    }
  }
  if (const Cifar10Release* r = ReleaseOfFiles(digests)) return Verified(folder, *r, "");
  const nlohmann::json manifest = ReadManifest(folder);
  const Cifar10Release* release = manifest.is_null() ? nullptr : ReleaseById(manifest.value("release", ""));
  if (release == nullptr) {
    check.state = FolderCheck::State::kUnverified;
    check.detail =
        "not verified: the sizes are right, but the files match no pinned release and no trainbench install "
        "recorded them";
    return check;
  }
  for (const std::string& name : Cifar10Files()) {
    const nlohmann::json& f = manifest["files"].value(name, nlohmann::json::object());
    if (!f.is_object() || f.value("sha256", "") != digests[name]) {
      check.state = FolderCheck::State::kDamaged;
      check.detail = name + " changed since it was installed (its SHA-256 is " + Hex12(digests[name]) + ")";
      return check;
    }
  }
  return Verified(folder, *release,
                  "; installed " + manifest.value("installed", "") + " from " + manifest.value("source", ""));
}

namespace {

// Where a fetch's files come from: an archive (downloaded into `part`, or
// the one --from names) or a folder of the files (--from).
struct FetchSource {
  fs::path archive;
  fs::path part;  // a download in progress, kept for the next fetch to resume
  std::string source;
};

FetchSource Obtain(const FetchRequest& request, const fs::path& home,
                   const std::function<ByteProgress(const char*)>& stage) {
  FetchSource got;
  std::error_code ec;
  if (request.from.empty()) {
    got.part = home / (std::string(kCifar10Archive) + ".part");
    got.source = request.url;
    try {
      DownloadTo(request.url, got.part, kLargestDownload, kDownloadAttempts, stage("download"));
    } catch (const DownloadError&) {
      // What arrived stays for the next fetch to resume; nothing, nothing.
      if (fs::file_size(got.part, ec) == 0) fs::remove(got.part, ec);
      throw;
    }
    got.archive = got.part;
  } else if (fs::is_directory(request.from, ec)) {
    got.source = fs::absolute(request.from).lexically_normal().string();
  } else if (fs::exists(request.from, ec)) {
    got.archive = request.from;
    got.source = fs::absolute(request.from).lexically_normal().string();
  } else {
    throw DataError(request.from.string() +
                    ": not found: --from takes cifar-10-binary.tar.gz or a folder of its files");
  }
  return got;
}

// Into place: an earlier install (ours) aside, the new one in, the old gone;
// the earlier one back where the new one cannot go.
void MoveIntoPlace(const fs::path& home, const fs::path& scratch, const fs::path& target, bool present) {
  std::error_code ec;
  if (!present) {
    fs::rename(scratch, target, ec);
    if (ec) throw DataError(target.string() + ": cannot install: " + ec.message());
    return;
  }
  ScratchFolder old(home, std::string(".") + kCifar10Folder + ".old-");
  fs::remove(old.path());
  fs::rename(target, old.path(), ec);
  if (ec) throw DataError(target.string() + ": cannot move the earlier install aside: " + ec.message());
  fs::rename(scratch, target, ec);
  if (ec) {
    std::error_code back;
    fs::rename(old.path(), target, back);
    throw DataError(target.string() + ": cannot install: " + ec.message());
  }
}

// The files unpacked or copied into `scratch`, identified as a pinned
// release, their labels checked and the manifest written; the release and
// when it was installed.
std::pair<const Cifar10Release*, std::string> Install(const FetchRequest& request, const FetchSource& from,
                                                      const fs::path& scratch,
                                                      const std::function<ByteProgress(const char*)>& stage) {
  std::map<std::string, WrittenFile> files;
  UnpackedArchive unpacked;
  const std::string name = from.archive.empty() ? from.source : from.archive.string();
  if (!from.archive.empty()) {
    unpacked = UnpackCifar10Archive(from.archive, scratch, stage("unpack"));
    files = unpacked.files;
  } else {
    files = CopyFolder(request.from, scratch, stage("copy"));
  }
  const Cifar10Release& release = Identify(name, files, from.archive.empty() ? nullptr : &unpacked);
  for (const Split split : {Split::kTrain, Split::kTest}) {
    try {
      CheckLabels(scratch, split);
    } catch (const DataError& e) {
      throw DataError(name + ": " + std::string(e.what()).substr(scratch.string().size() + 1));
    }
  }
  const std::string installed = Now();
  WriteManifest(scratch, release, from.source, installed, files, from.archive.empty() ? nullptr : &unpacked);
  return {&release, installed};
}

}  // namespace

FolderCheck FetchCifar10(const FetchRequest& request, const FetchProgress& progress) {
  const fs::path& home = request.data_home;
  if (home.empty()) throw DataError("no data folder: neither XDG_DATA_HOME nor HOME is an absolute path: give --dir");
  const fs::path target = home / kCifar10Folder;
  std::error_code ec;
  fs::create_directories(home, ec);
  if (ec) throw DataError(home.string() + ": cannot make the data folder: " + ec.message());
  const FetchLock lock(home);

  const bool present = fs::exists(fs::symlink_status(target, ec));
  const bool ours = present && !ReadManifest(target).is_null();
  if (present) {
    const FolderCheck check = CheckCifar10Folder(target);
    if (check.state == FolderCheck::State::kVerified && !request.force) return check;
    if (!ours)
      throw DataError(target.string() + ": already there and not installed by trainbench (" + check.detail +
                      "): move it away, or fetch into another --dir");
  }
  const std::function<ByteProgress(const char*)> stage = [&progress](const char* name) -> ByteProgress {
    return [&progress, name](std::uint64_t done, std::uint64_t total) {
      if (progress) progress(name, done, total);
    };
  };
  const FetchSource from = Obtain(request, home, stage);
  ScratchFolder scratch(home, std::string(".") + kCifar10Folder + ".partial-");
  std::pair<const Cifar10Release*, std::string> installed;
  try {
    installed = Install(request, from, scratch.path(), stage);
    // mkdtemp's folder is the owner's alone; the install is as any new folder.
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::chmod(scratch.path().c_str(), 0777 & ~mask);
    SyncFolder(scratch.path());
    MoveIntoPlace(home, scratch.path(), target, present);
    scratch.Keep();
    SyncFolder(home);
  } catch (const DataError&) {
    // A download that does not verify is not resumed next time.
    if (!from.part.empty()) fs::remove(from.part, ec);
    throw;
  }
  if (!from.part.empty()) fs::remove(from.part, ec);
  // What was just verified file by file, said as `data list` will say it.
  return Verified(target, *installed.first, "; installed " + installed.second + " from " + from.source);
}

}  // namespace trainbench::data
