#pragma once
// Removes a folder and what it holds, for tests' scratch folders. Not
// std::filesystem::remove_all: in a program linked to PyTorch's wheel,
// libtorch.so exports its own copies of std::filesystem's functions (nm -D),
// and its remove_all calls through a null pointer when the folder has files
// in it (the crash of every autotuning test until 2026-12-02, and of the
// FakePowercap tests' TearDown on the GPU machine until 2026-12-03).
#include <ftw.h>

#include <cstdio>
#include <filesystem>

namespace trainbench::testing {

inline void RemoveTree(const std::filesystem::path& dir) {
  ::nftw(
      dir.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

}  // namespace trainbench::testing
