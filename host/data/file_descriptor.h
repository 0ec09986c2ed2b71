#pragma once
// A file descriptor closed when it goes out of scope.

#include <unistd.h>

namespace trainbench::data {

/// Owns `fd` (which may be -1: nothing to close). Not copyable.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace trainbench::data
