#include "cifar10.h"

#include <gtest/gtest.h>

#include <array>
#include <fstream>

#include "test_env.h"

namespace trainbench::data {
namespace {

namespace fs = std::filesystem;

TEST(Cifar10, ReadsTheMiniSet) {
  ImageSet train = LoadSplit(trainbench::testing::MiniData(), Split::kTrain);
  ASSERT_EQ(train.count, 2000);
  ASSERT_EQ(train.pixels.size(), 2000u * 3072u);
  std::array<int, 10> per_class{};
  for (uint8_t l : train.labels) ++per_class.at(l);
  for (int c : per_class) {  // shared/data/README.md: 182-223 per class
    EXPECT_GE(c, 182);
    EXPECT_LE(c, 223);
  }
  ImageSet test = LoadSplit(trainbench::testing::MiniData(), Split::kTest, 100);
  EXPECT_EQ(test.count, 100);
  EXPECT_EQ(CountRecords(trainbench::testing::MiniData(), Split::kTest), 500);
}

class Cifar10Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("cifar_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes `records` records with label `label`, plus `extra` stray bytes.
  void Write(const std::string& name, int records, uint8_t label, int extra = 0) {
    std::ofstream out(dir_ / name, std::ios::binary);
    std::vector<char> record(kRecordBytes, 7);
    record[0] = static_cast<char>(label);
    for (int i = 0; i < records; ++i) out.write(record.data(), kRecordBytes);
    for (int i = 0; i < extra; ++i) out.put('x');
  }
  fs::path dir_;
};

TEST_F(Cifar10Files, TruncatedFileIsAnError) {
  Write("data_batch_1.bin", 3, 1, /*extra=*/100);
  try {
    LoadSplit(dir_, Split::kTrain);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data_batch_1.bin: 9319 bytes is not a whole number"), std::string::npos)
        << e.what();
  }
}

TEST_F(Cifar10Files, EmptyFileIsAnError) {
  Write("test_batch.bin", 0, 0);
  EXPECT_THROW(CountRecords(dir_, Split::kTest), DataError);
}

TEST_F(Cifar10Files, LabelOutsideRangeIsAnError) {
  Write("data_batch_1.bin", 2, 10);
  try {
    LoadSplit(dir_, Split::kTrain);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("record 0 has label 10, outside 0-9"), std::string::npos) << e.what();
  }
}

TEST_F(Cifar10Files, LabelsAreCheckedBeforeAnyWorkerReadsThem) {
  Write("data_batch_1.bin", 1500, 3);
  {
    // Record 1200 (past the first 1,024-record chunk) says 200.
    std::fstream f(dir_ / "data_batch_1.bin", std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(1200 * kRecordBytes);
    f.put(static_cast<char>(200));
  }
  Write("test_batch.bin", 10, 1);
  EXPECT_NO_THROW(CheckLabels(dir_, Split::kTest));
  EXPECT_NO_THROW(CheckLabels(dir_, Split::kTrain, 1200));  // only the records a run uses
  try {
    CheckLabels(dir_, Split::kTrain);
    FAIL() << "label 200 passed";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data_batch_1.bin: record 1200 has label 200, outside 0-9"), std::string::npos)
        << e.what();
  }
}

TEST_F(Cifar10Files, MissingFileSaysWhatToDo) {
  try {
    CountRecords(dir_, Split::kTest);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("test_batch.bin: not found"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TRAINBENCH_DATA"), std::string::npos) << e.what();
  }
}

TEST_F(Cifar10Files, TrainingFilesAreReadInOrderUpToTheLimit) {
  Write("data_batch_1.bin", 3, 1);
  Write("data_batch_2.bin", 4, 2);
  Write("data_batch_4.bin", 5, 4);  // after a gap: not read
  ImageSet all = LoadSplit(dir_, Split::kTrain);
  EXPECT_EQ(all.count, 7);
  EXPECT_EQ(all.labels.back(), 2);
  ImageSet some = LoadSplit(dir_, Split::kTrain, 5);
  EXPECT_EQ(some.count, 5);
  EXPECT_EQ(some.labels[4], 2);
}

}  // namespace
}  // namespace trainbench::data
