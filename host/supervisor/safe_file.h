#pragma once
// Files trainbench creates in folders others may write to (an output folder
// on a shared server, $TMPDIR): never through a link planted there.

#include <filesystem>
#include <string>

namespace trainbench {

/// Creates `path` afresh for writing and returns its descriptor (close it).
/// A leftover regular file there is removed first (an interrupted write's);
/// a symbolic link there is refused, not followed: std::runtime_error naming
/// the path, as for any other failure. Hard links to the old file are cut,
/// never truncated. Thread-safe.
int CreateFileNoFollow(const std::filesystem::path& path, int mode = 0644);

/// Throws std::runtime_error naming `dir` when it is a symbolic link; creates
/// it (mode 0755, less the umask) when missing.
void MakeRealDirectory(const std::filesystem::path& dir);

/// A new private folder (0700) under $TMPDIR (else /tmp), named
/// PREFIX-XXXXXX by mkdtemp: nobody else can have planted anything in it.
std::filesystem::path MakePrivateTempDirectory(const std::string& prefix);

}  // namespace trainbench
