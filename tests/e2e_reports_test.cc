// End to end, reports: comparisons, the figure, and results files that are too large or hostile.
#include "e2e.h"

namespace trainbench {
namespace {

TEST_F(EndToEnd, ReportComparesRunsAndDrawsTheFigure) {
  // The study's first H200 run, kept as it was (docs/results/h200.md has the latest).
  const std::string a = (SourceDir() / "docs/results/raw/h200-paper-10k-run1.results.json").string();
  const std::string b = (SourceDir() / "docs/results/raw/h200-paper-synthetic50k-run1.results.json").string();
  const std::string png = (dir_ / "figure.png").string();
  // The plot needs gnuplot (scripts/setup.sh installs it; CI has it).
  const bool have_gnuplot = std::system("command -v gnuplot >/dev/null 2>&1") == 0;
  const Outcome md = Trainbench("report " + a + " " + b + (have_gnuplot ? " --plot " + png : ""));
  ASSERT_EQ(md.exit_code, 0) << md.output;
  EXPECT_NE(
      md.output.find(
          "| paper@vm (NVIDIA H200) | resnet50 | 23.53M | cuda | 8606.0 | 1.19 s | - | 40.9% | 13.47x | - | - | - | - "
          "| ok |"),
      std::string::npos)
      << md.output;
  EXPECT_NE(md.output.find("paper-synthetic50k@vm"), std::string::npos);
  // Energy where it was measured (NVML on the H200), the ratio where both sides have it.
  const std::string measured = (SourceDir() / "docs/results/raw/h200-measures-energy.results.json").string();
  const Outcome energy = Trainbench("report " + measured);
  EXPECT_NE(energy.output.find("| 0.002951 | 2.42x | ok |"), std::string::npos) << energy.output;
  if (have_gnuplot) {
    std::ifstream image(png, std::ios::binary);
    char magic[4] = {};
    image.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  } else {
    std::printf("gnuplot not installed here: the PNG is not checked\n");
  }
  const Outcome csv = Trainbench("report --format csv " + a);
  EXPECT_EQ(csv.output.rfind("run,model,params,device,samples_per_second,epoch_seconds_median,projected,test_accuracy,"
                             "speedup,status,time_to_train_seconds,speedup_time_to_train,mfu,joules_per_sample,"
                             "energy_ratio,peak_memory_bytes,peak_allocated_bytes\n",
                             0),
            0u)
      << csv.output;
  // Without gnuplot: the table still prints, then a one-line error that says what to install.
  const std::string command = "PATH=/nonexistent " + (BinDir() / "trainbench").string() + " report " + a + " --plot " +
                              (dir_ / "x.svg").string() + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find("gnuplot not found: install it (Debian/Ubuntu: apt-get install gnuplot-nox)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("| resnet18 |"), std::string::npos) << out;
}

// A results file larger than any run writes is refused before it is parsed
// (2.8 GB once took `report` past 8 GB of memory).
TEST_F(EndToEnd, ReportRefusesAResultsFileLargerThanItsLimit) {
  const fs::path huge = dir_ / "huge.results.json";
  std::ofstream(huge) << "{";
  fs::resize_file(huge, std::uintmax_t{300} << 20);  // sparse: no disk used
  const Outcome o = Trainbench("report " + huge.string());
  EXPECT_NE(o.exit_code, 0) << o.output;
  EXPECT_NE(o.output.find(huge.string() + ": 300 MiB, larger than any results.json trainbench writes (the limit is "
                                          "256 MiB): not read"),
            std::string::npos)
      << o.output;
}

TEST_F(EndToEnd, NamesInAResultsFileNeverReachAShellThroughThePlot) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  std::ifstream in(SourceDir() / "docs/results/raw/h200-paper-10k-run1.results.json");
  json doc = json::parse(in);
  const fs::path pwned = dir_ / "pwned";
  const std::string escape = "\n!touch " + pwned.string() + "\n";
  doc["experiment"]["name"] = "x" + escape;
  doc["experiment"]["measurement"]["baseline"] = "cpu" + escape;
  for (auto& cell : doc["cells"]) {
    cell["model"] = cell["model"].get<std::string>() + escape;
    cell["device"] = cell["device"].get<std::string>() + "'" + escape;
  }
  const fs::path file = dir_ / "hostile.results.json";
  std::ofstream(file) << doc.dump();
  const Outcome o = Trainbench("report " + file.string() + " --plot " + (dir_ / "figure.svg").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  EXPECT_FALSE(fs::exists(pwned)) << "a name in a results file ran a shell command";
  EXPECT_TRUE(fs::exists(dir_ / "figure.svg"));
}

// A link planted where the plot goes (a shared results folder): replaced by
// the plot, its target never written.
TEST_F(EndToEnd, ThePlotNeverWritesThroughALink) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) GTEST_SKIP() << "gnuplot not installed";
  const fs::path victim = dir_ / "victim.txt";
  std::ofstream(victim) << "keep me";
  fs::create_symlink(victim, dir_ / "figure.svg");
  const fs::path file = SourceDir() / "docs/results/raw/h200-paper-10k-run1.results.json";
  const Outcome o = Trainbench("report " + file.string() + " --plot " + (dir_ / "figure.svg").string());
  EXPECT_EQ(o.exit_code, 0) << o.output;
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
  EXPECT_FALSE(fs::is_symlink(dir_ / "figure.svg"));
  EXPECT_GT(fs::file_size(dir_ / "figure.svg"), 1000u);
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find("figure.svg.tmp"), std::string::npos) << entry.path();
}

}  // namespace
}  // namespace trainbench
