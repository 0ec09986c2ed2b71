#include "safe_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace trainbench {
namespace fs = std::filesystem;

namespace {
[[noreturn]] void Refuse(const fs::path& path, const std::string& what) {
  throw std::runtime_error(path.string() + ": " + what);
}
}  // namespace

int CreateFileNoFollow(const fs::path& path, int mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      Refuse(path, "is a symbolic link; trainbench never writes through one (planted?): remove it and run again");
    }
    // An unlinked name cannot pass writes on to another file (a hard link's
    // other names keep the old contents).
    if (S_ISREG(st.st_mode) && ::unlink(path.c_str()) != 0 && errno != ENOENT)
      Refuse(path, std::string("cannot replace: ") + std::strerror(errno));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    const int error = errno;
    if (error == EEXIST || error == ELOOP)
      Refuse(path, "appeared while trainbench was creating it (another process writes there?); not followed");
    Refuse(path, std::string("cannot write: ") + std::strerror(error) + " (check permissions and free space)");
  }
  return fd;
}

void MakeRealDirectory(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      Refuse(dir, "is a symbolic link; trainbench never writes through one (planted?): remove it and run again");
    if (!S_ISDIR(st.st_mode)) Refuse(dir, "is not a folder: remove it or choose another --out");
    return;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) Refuse(dir, "cannot create the folder: " + ec.message());
}

fs::path MakePrivateTempDirectory(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  const fs::path base = tmp != nullptr && *tmp != '\0' ? fs::path(tmp) : fs::path("/tmp");
  std::string pattern = (base / (prefix + "-XXXXXX")).string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr)
    Refuse(base, std::string("cannot create a private temporary folder: ") + std::strerror(errno) +
                     " (set TMPDIR to a writable folder)");
  return fs::path(buffer.data());
}

}  // namespace trainbench
