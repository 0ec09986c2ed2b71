#pragma once
// Reader for the official CIFAR-10 binary format. No LibTorch: the host uses
// it to check a dataset before any worker starts.
//
// A file is a plain sequence of 3,073-byte records: one label byte (0-9), then
// the 32x32 red, green and blue planes, each row-major from the top row.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainbench::data {

inline constexpr int64_t kImageBytes = 3 * 32 * 32;
inline constexpr int64_t kRecordBytes = 1 + kImageBytes;
inline constexpr int kNumClasses = 10;
inline constexpr int kTrainFiles = 5;

/// A data file that is missing, unreadable or malformed; what() names the file.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Images in CHW uint8 planes, one label per image.
struct ImageSet {
  int64_t count = 0;
  int64_t image_size = 32;  ///< height and width (CIFAR-10: 32)
  int64_t num_classes = kNumClasses;
  std::vector<uint8_t> pixels;  ///< count * ImageBytes()
  std::vector<int32_t> labels;  ///< count, each below num_classes
  int64_t ImageBytes() const { return 3 * image_size * image_size; }
};

enum class Split { kTrain, kTest };

/// The files of a split in `dir`: data_batch_1.bin.. (those present, in order,
/// stopping at the first missing) or test_batch.bin. Throws DataError when the
/// first file is missing.
std::vector<std::filesystem::path> SplitFiles(const std::filesystem::path& dir, Split split);

/// Checks the size of every file of the split without reading it and returns
/// the number of records. Throws DataError for a missing or wrong-size file.
int64_t CountRecords(const std::filesystem::path& dir, Split split);

/// Reads the label of each of the first `limit` records (all when unset) of
/// a split, without keeping the images: what a run would find wrong in the
/// files, found before any worker starts. Throws DataError naming the file
/// and record (a label outside 0-9, an unreadable or short file).
void CheckLabels(const std::filesystem::path& dir, Split split, std::optional<int64_t> limit = std::nullopt);

/// Reads up to `limit` records (all when unset) of a split. Throws DataError
/// for a missing, truncated or wrong-size file or a label outside 0-9.
ImageSet LoadSplit(const std::filesystem::path& dir, Split split, std::optional<int64_t> limit = std::nullopt);

/// Reads up to `limit` records of one file, appending to `out`.
void AppendFile(const std::filesystem::path& file, int64_t limit, ImageSet* out);

/// Decodes up to `limit` whole records from `size` bytes of file contents
/// named `name` (for messages), appending to `out`. Throws DataError for a
/// size that is not a whole number of records or a label outside 0-9.
void DecodeRecords(const uint8_t* data, size_t size, const std::string& name, int64_t limit, ImageSet* out);

}  // namespace trainbench::data
