#include "cifar10.h"

#include <fstream>

namespace trainbench::data {
namespace fs = std::filesystem;

namespace {
int64_t CheckedRecordCount(const fs::path& file) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw DataError(file.string() + ": cannot read: " + ec.message());
  if (size == 0 || size % kRecordBytes != 0) {
    throw DataError(file.string() + ": " + std::to_string(size) +
                    " bytes is not a whole number of 3073-byte CIFAR-10 records "
                    "(truncated or not a CIFAR-10 binary file)");
  }
  return static_cast<int64_t>(size / kRecordBytes);
}

// A record's label byte, refused outside 0-9 with the file and record named.
void CheckLabel(const std::string& name, int64_t record, uint8_t label) {
  if (label >= kNumClasses) {
    throw DataError(name + ": record " + std::to_string(record) + " has label " + std::to_string(label) +
                    ", outside 0-9 (corrupt file?)");
  }
}
}  // namespace

std::vector<fs::path> SplitFiles(const fs::path& dir, Split split) {
  // Whether `f` exists; a folder that cannot be searched or a symlink loop
  // is the user's to fix, and said so, not a raw filesystem error.
  auto exists = [](const fs::path& f) {
    std::error_code ec;
    const bool found = fs::exists(f, ec);
    if (ec) throw DataError(f.string() + ": cannot read: " + ec.message());
    return found;
  };
  std::vector<fs::path> files;
  if (split == Split::kTest) {
    files.push_back(dir / "test_batch.bin");
  } else {
    for (int i = 1; i <= kTrainFiles; ++i) {
      fs::path f = dir / ("data_batch_" + std::to_string(i) + ".bin");
      if (i > 1 && !exists(f)) break;
      files.push_back(f);
    }
  }
  if (!exists(files.front())) {
    throw DataError(files.front().string() +
                    ": not found; fetch CIFAR-10 with `trainbench data fetch cifar10`, or point dataset.path "
                    "(or TRAINBENCH_DATA) at the folder holding its binary files (cifar-10-batches-bin)");
  }
  return files;
}

int64_t CountRecords(const fs::path& dir, Split split) {
  int64_t n = 0;
  for (const auto& f : SplitFiles(dir, split)) n += CheckedRecordCount(f);
  return n;
}

void AppendFile(const fs::path& file, int64_t limit, ImageSet* out) {
  const int64_t records = std::min(CheckedRecordCount(file), limit);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(file.string() + ": cannot open");
  std::vector<uint8_t> buffer(static_cast<size_t>(records * kRecordBytes));
  in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()));
  if (in.gcount() != static_cast<std::streamsize>(buffer.size()))
    throw DataError(file.string() + ": short read (file changed or truncated while reading)");
  DecodeRecords(buffer.data(), buffer.size(), file.string(), records, out);
}

void DecodeRecords(const uint8_t* data, size_t size, const std::string& name, int64_t limit, ImageSet* out) {
  if (size == 0 || size % kRecordBytes != 0) {
    throw DataError(name + ": " + std::to_string(size) +
                    " bytes is not a whole number of 3073-byte CIFAR-10 records "
                    "(truncated or not a CIFAR-10 binary file)");
  }
  const int64_t records = std::min(static_cast<int64_t>(size / kRecordBytes), std::max<int64_t>(limit, 0));
  const size_t base = out->pixels.size();
  out->pixels.resize(base + static_cast<size_t>(records * kImageBytes));
  out->labels.reserve(out->labels.size() + static_cast<size_t>(records));
  for (int64_t r = 0; r < records; ++r) {
    const uint8_t* rec = data + r * kRecordBytes;
    CheckLabel(name, r, rec[0]);
    out->labels.push_back(rec[0]);
    std::copy(rec + 1, rec + kRecordBytes, out->pixels.begin() + static_cast<long>(base + r * kImageBytes));
  }
  out->count += records;
}

void CheckLabels(const fs::path& dir, Split split, std::optional<int64_t> limit) {
  int64_t remaining = limit.value_or(INT64_MAX);
  constexpr int64_t kChunk = 1024;  // records read at a time (3 MB)
  std::vector<uint8_t> buffer(static_cast<size_t>(kChunk * kRecordBytes));
  for (const auto& file : SplitFiles(dir, split)) {
    if (remaining <= 0) break;
    const int64_t records = std::min(CheckedRecordCount(file), remaining);
    std::ifstream in(file, std::ios::binary);
    if (!in) throw DataError(file.string() + ": cannot open (check its permissions)");
    for (int64_t first = 0; first < records; first += kChunk) {
      const int64_t n = std::min(kChunk, records - first);
      in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(n * kRecordBytes));
      if (in.gcount() != static_cast<std::streamsize>(n * kRecordBytes))
        throw DataError(file.string() + ": short read (file changed or truncated while reading)");
      for (int64_t r = 0; r < n; ++r)
        CheckLabel(file.string(), first + r, buffer[static_cast<size_t>(r * kRecordBytes)]);
    }
    remaining -= records;
  }
}

ImageSet LoadSplit(const fs::path& dir, Split split, std::optional<int64_t> limit) {
  ImageSet set;
  int64_t remaining = limit.value_or(INT64_MAX);
  for (const auto& f : SplitFiles(dir, split)) {
    if (remaining <= 0) break;
    const int64_t before = set.count;
    AppendFile(f, remaining, &set);
    remaining -= set.count - before;
  }
  return set;
}

}  // namespace trainbench::data
