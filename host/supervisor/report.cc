#include "report.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "results.h"
#include "safe_file.h"
#include "text_escape.h"
#include "trainbench/protocol/error.h"
#include "worker_client.h"

extern char** environ;

namespace trainbench {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Row {
  std::string run, model, device, status;
  size_t run_number = 1;  // 1-based, in the order the files were given (the figure's legend numbers them)
  double params = 0, sps = 0, epoch = 0, accuracy = -1;
  bool projected = false;
  json speedup;
  std::optional<double> sps_half_ci, time_to_train, speedup_time, mfu;  // absent in older files
  std::optional<double> joules_per_sample, energy_ratio;
  std::optional<int64_t> peak_memory, peak_allocated;  // bytes; absent in older files
  std::string energy_reason;                           // why there is no energy figure, when the record says
  std::optional<std::vector<double>> speedup_ci;
  std::vector<std::vector<double>> accuracy_curve;  // [train seconds, epochs, accuracy]
};

std::vector<Row> Rows(const std::vector<LoadedResults>& runs) {
  std::vector<Row> rows;
  for (size_t k = 0; k < runs.size(); ++k) {
    const LoadedResults& r = runs[k];
    for (const auto& c : r.cells) {
      Row row;
      row.run = r.label;
      row.run_number = k + 1;
      row.model = c.model;
      row.device = c.device;
      row.status = c.status;
      row.params = static_cast<double>(c.params.value_or(0));
      row.sps = c.samples_per_second.value_or(0.0);
      row.epoch = c.median_epoch_seconds();
      row.accuracy = c.final_accuracy().value_or(-1.0);
      row.projected = c.projected.value_or(false);
      row.speedup = c.speedup ? json(*c.speedup) : json();
      if (c.samples_per_second_ci95 && c.samples_per_second_ci95->size() == 2)
        row.sps_half_ci = ((*c.samples_per_second_ci95)[1] - (*c.samples_per_second_ci95)[0]) / 2;
      row.time_to_train = c.time_to_train_seconds;
      row.speedup_time = c.speedup_time_to_train;
      row.mfu = c.mfu;
      row.joules_per_sample = c.joules_per_sample;
      row.energy_ratio = c.energy_ratio;
      row.energy_reason = c.energy_reason.value_or("");
      if (c.peak_memory_bytes && *c.peak_memory_bytes > 0) row.peak_memory = c.peak_memory_bytes;
      if (c.peak_allocated_bytes && *c.peak_allocated_bytes >= 0) row.peak_allocated = c.peak_allocated_bytes;
      row.speedup_ci = c.speedup_ci95;
      row.accuracy_curve = c.accuracy_curve.value_or(std::vector<std::vector<double>>{});
      rows.push_back(row);
    }
  }
  return rows;
}

// "7.52 GiB (3.40 GiB)": what the process held at most and, where known,
// what its tensors held; "-" where the record has neither.
std::string MemoryText(const std::optional<int64_t>& held, const std::optional<int64_t>& tensors) {
  if (!held) return "-";
  return GiBText(*held) + (tensors ? " (" + GiBText(*tensors) + ")" : "");
}

// A cell's bar in the figure: model and device, and its run's number when
// several runs are compared.
std::string BarLabel(const Row& r, size_t runs) {
  return r.model + " " + r.device + (runs > 1 ? " #" + std::to_string(r.run_number) : "");
}

std::string Quote(const std::string& s) {
  // One argument for gnuplot's string syntax. Names come from results files,
  // which anyone may have written: a newline would end the string and start
  // a command (a line beginning with '!' is a shell escape), so every
  // control character becomes a '?'.
  std::string out = "'";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\'')
      out += "''";
    else if (u < 0x20 || u == 0x7f)
      out += '?';
    else
      out += c;
  }
  return out + "'";
}

// Runs `gnuplot SCRIPT` with stderr to `log`; its exit code (-1 when it
// could not start or died).
int RunGnuplot(const fs::path& script, const fs::path& log) {
  const int log_fd = CreateFileNoFollow(log, 0600);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  std::string program = "gnuplot", file = script.string();
  char* argv[] = {program.data(), file.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(log_fd);
  if (spawned != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

LoadedResults LoadOne(const std::string& file) {
  std::error_code ec;
  if (const std::uintmax_t size = fs::file_size(file, ec); !ec && size > kMaxResultsFileBytes) {
    throw std::runtime_error(
        fmt::format("{}: {} MiB, larger than any results.json trainbench writes (the limit is {} "
                    "MiB): not read",
                    file, size >> 20, kMaxResultsFileBytes >> 20));
  }
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file + ": cannot read");
  json doc = json::parse(in, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("cells") || !doc.contains("experiment")) {
    throw std::runtime_error(file + ": not a trainbench results.json (no 'cells' or 'experiment')");
  }
  if (!doc["experiment"].is_object()) throw std::runtime_error(file + ": 'experiment' is not a mapping");
  const json system = doc.contains("system") && doc["system"].is_object() ? doc["system"] : json::object();
  const std::string host = system.value("hostname", "");
  std::string label = doc["experiment"].value("name", fs::path(file).parent_path().filename().string());
  if (!host.empty()) label += "@" + host;
  if (system.contains("gpu") && system["gpu"].is_object()) label += " (" + system["gpu"].value("name", "GPU") + ")";
  std::vector<protocol::CellRecord> cells;
  if (!doc["cells"].is_array()) throw std::runtime_error(file + ": 'cells' is not a list");
  try {
    // Records of older versions load: absent fields stay unset.
    for (const auto& c : doc["cells"]) cells.push_back(protocol::CellRecordFromJson(c));
  } catch (const protocol::ProtocolError& e) {
    throw std::runtime_error(file + ": " + e.what());
  }
  return {label, std::move(doc), std::move(cells)};
}

}  // namespace

std::vector<LoadedResults> LoadResults(const std::vector<std::string>& files) {
  std::vector<LoadedResults> runs;
  for (const auto& file : files) {
    try {
      runs.push_back(LoadOne(file));
    } catch (const json::exception& e) {
      // The library's own words, without its "[json.exception.type_error.302]".
      std::string what = e.what();
      if (const auto bracket = what.find("] "); what.rfind("[json.", 0) == 0 && bracket != std::string::npos)
        what = what.substr(bracket + 2);
      throw std::runtime_error(file + ": not a trainbench results.json (" + what +
                               "); give a results.json that trainbench run wrote");
    }
  }
  return runs;
}

namespace {

// A cell's settings as its record has them: the resolved configuration
// (with the recorded environment), else, for older records, the options;
// and what its rules chose (path_taken), where it says.
json SettingsOf(const protocol::CellRecord& c) {
  json settings = c.config.is_object()
                      ? c.config
                      : json{{"model", {{"options", c.model_options}}}, {"device", {{"options", c.device_options}}}};
  if (c.path_taken) settings["path_taken"] = *c.path_taken;
  // What the device says took effect (the CPU's threads and vector
  // instructions), beside the variables that asked for it.
  if (c.hardware.is_object()) {
    for (const char* key : {"threads_used", "cpu_capability"})
      if (c.hardware.contains(key)) settings["effective"][key] = c.hardware[key];
  }
  return settings;
}

}  // namespace

std::string SettingsThatDiffer(const std::vector<LoadedResults>& runs) {
  // The first run's cells against the same model and device label in each
  // other run: what was measured differently.
  std::ostringstream out;
  if (runs.size() < 2) return "";
  for (const auto& first : runs[0].cells) {
    for (size_t k = 1; k < runs.size(); ++k) {
      for (const auto& other : runs[k].cells) {
        if (other.model != first.model || other.device != first.device) continue;
        const json a = SettingsOf(first), b = SettingsOf(other);
        std::string listed;
        for (const std::string& key : DifferingSettings(a, b)) {
          // Where each run's data lay is not a difference in what ran.
          if (key == "dataset.path") continue;
          listed += fmt::format("{}{} ({} / {})", listed.empty() ? "" : ", ", key, SettingValue(a, key),
                                SettingValue(b, key));
        }
        if (!listed.empty()) {
          if (out.tellp() == 0) out << "\nSettings that differ between compared cells (run #1 / the other):\n\n";
          out << fmt::format("- {} on {}, #1 and #{}: {}\n", Printable(first.model), Printable(first.device), k + 1,
                             Printable(listed));
        }
        break;
      }
    }
  }
  return out.str();
}

std::string ReportMarkdown(const std::vector<LoadedResults>& runs) {
  std::ostringstream out;
  // "speedup" is of the steady-state rate; "speedup (time)" of the time to
  // train the whole cell (setup, warm-up, evaluation included), the study's.
  // "J/sample" is measured energy (NVML, RAPL), "-" where none could be
  // read; "energy ratio" the baseline's J/sample over the cell's. "peak
  // memory": what the cell's process held at most (a GPU allocator's cache
  // included; a CPU's resident set), and in brackets the most its tensors
  // held, where the device tells it.
  out << "| run | model | params | device | samples/s | epoch (median) | time to train | test acc | speedup | "
         "speedup (time) | mfu | J/sample | energy ratio | status | peak memory (tensors) |\n"
      << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto optional = [](const std::optional<double>& v, const char* format) {
    return v ? fmt::format(fmt::runtime(format), *v) : std::string("-");
  };
  for (const Row& r : Rows(runs)) {
    const bool ok = r.status == "ok";
    std::string sps = ok ? fmt::format("{:.1f}", r.sps) : "-";
    if (ok && r.sps_half_ci) sps += fmt::format(" ± {:.1f}", *r.sps_half_ci);
    out << fmt::format("| {} | {} | {:.2f}M | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                       MarkdownCell(r.run), MarkdownCell(r.model), r.params / 1e6, MarkdownCell(r.device), sps,
                       ok ? fmt::format("{:.2f} s{}", r.epoch, r.projected ? " (projected)" : "") : "-",
                       ok ? optional(r.time_to_train, "{:.1f} s") : "-",
                       ok && r.accuracy >= 0 ? fmt::format("{:.1f}%", 100 * r.accuracy) : "-",
                       r.speedup.is_number() ? fmt::format("{:.2f}x", r.speedup.get<double>()) : "-",
                       optional(r.speedup_time, "{:.2f}x"), ok && r.mfu ? fmt::format("{:.1f}%", 100 * *r.mfu) : "-",
                       ok ? optional(r.joules_per_sample, "{:.4g}") : "-", optional(r.energy_ratio, "{:.2f}x"),
                       MarkdownCell(r.status), MemoryText(r.peak_memory, r.peak_allocated));
  }
  out << SettingsThatDiffer(runs);
  return out.str();
}

std::string ReportCsv(const std::vector<LoadedResults>& runs) {
  std::ostringstream out;
  // Columns are only ever added at the end.
  out << "run,model,params,device,samples_per_second,epoch_seconds_median,projected,test_accuracy,speedup,status,"
         "time_to_train_seconds,speedup_time_to_train,mfu,joules_per_sample,energy_ratio,peak_memory_bytes,"
         "peak_allocated_bytes\n";
  auto optional = [](const std::optional<double>& v) { return v ? fmt::format("{}", *v) : std::string(); };
  for (const Row& r : Rows(runs)) {
    out << CsvText(r.run) << "," << CsvText(r.model) << "," << r.params << "," << CsvText(r.device) << "," << r.sps
        << "," << r.epoch << "," << (r.projected ? "true" : "false") << ","
        << (r.accuracy >= 0 ? std::to_string(r.accuracy) : "") << ","
        << (r.speedup.is_number() ? std::to_string(r.speedup.get<double>()) : "") << "," << CsvText(r.status) << ","
        << optional(r.time_to_train) << "," << optional(r.speedup_time) << "," << optional(r.mfu) << ","
        << optional(r.joules_per_sample) << "," << optional(r.energy_ratio) << ","
        << (r.peak_memory ? std::to_string(*r.peak_memory) : "") << ","
        << (r.peak_allocated ? std::to_string(*r.peak_allocated) : "") << "\n";
  }
  return out.str();
}

namespace {

// The device the speedups are against, named on the axis (the first run's).
std::string BaselineOf(const std::vector<LoadedResults>& runs) {
  if (!runs.empty() && runs[0].doc["experiment"].contains("measurement") &&
      runs[0].doc["experiment"]["measurement"].is_object() &&
      runs[0].doc["experiment"]["measurement"].value("baseline", json()).is_string())
    return runs[0].doc["experiment"]["measurement"]["baseline"].get<std::string>();
  return "the baseline device";
}

// Panel 1: speedup against model size, one line per run and device (the
// study's figure), each point with its 95% interval.
void SpeedupPanel(std::ofstream& script, const fs::path& dir, const std::vector<Row>& rows,
                  const std::string& baseline) {
  script << "set multiplot layout 2,2\n"
         << "set title 'Speedup against model size'\nset xlabel 'trainable parameters'\n"
         << "set ylabel " << Quote("speedup over " + baseline + " (x; bars: 95% interval)") << "\n"
         << "set logscale x\nset format x '%.0s%c'\nset yrange [0:*]\nset grid\n"
         << "set key below\nset offsets graph 0.1, graph 0.1, graph 0.1, 0\nset bmargin 8\n";
  std::map<std::string, std::vector<const Row*>> by_series;
  for (const Row& r : rows) {
    if (r.status == "ok" && r.speedup.is_number()) by_series[r.run + " / " + r.device].push_back(&r);
  }
  std::ofstream speedups(dir / "speedup.dat");
  size_t block = 0;
  std::string plot;
  for (auto& [name, points] : by_series) {
    std::sort(points.begin(), points.end(), [](const Row* a, const Row* b) { return a->params < b->params; });
    for (const Row* p : points) {
      // Projected cells (a budget cut their epochs) are marked in their label.
      const double value = p->speedup.get<double>();
      const bool ci = p->speedup_ci && p->speedup_ci->size() == 2;
      speedups << p->params << " " << value << " " << json(p->model + (p->projected ? " (projected)" : "")).dump()
               << " " << (ci ? (*p->speedup_ci)[0] : value) << " " << (ci ? (*p->speedup_ci)[1] : value) << "\n";
    }
    speedups << "\n\n";
    plot += fmt::format(
        "{}{} index {} using 1:2 with linespoints pointtype 7 title {}, '' index {} using 1:2:4:5 with yerrorbars "
        "pointtype 0 notitle, '' index {} using 1:2:3 with labels offset 0,1 notitle",
        plot.empty() ? "plot " : ", ", Quote((dir / "speedup.dat").string()), block,
        Quote("#" + std::to_string(points.front()->run_number) + " " + name), block, block);
    ++block;
  }
  script << (plot.empty()
                 ? "set label 'no speedups (only the baseline device ran)' at graph 0.5,0.5 center\nplot 1 notitle\n"
                 : plot + ", 1 with lines dashtype 2 linecolor 'gray' title " + Quote("1x: as fast as " + baseline) +
                       "\n");
  script << "unset label\nunset format\nunset yrange\n";
}

// Panel 2: throughput, one bar per cell.
void ThroughputPanel(std::ofstream& script, const fs::path& dir, const std::vector<Row>& rows, size_t runs) {
  script
      << "unset logscale x\nset title 'Throughput per cell'\nset xlabel ''\nset ylabel 'samples/s'\n"
      << "set logscale y\nset style fill solid 0.7\nset boxwidth 0.7\nset xtics rotate by -45 font ',9'\nset key off\n";
  std::ofstream bars(dir / "throughput.dat");
  size_t i = 0;
  for (const Row& r : rows) {
    if (r.status != "ok") continue;
    bars << i++ << " " << r.sps << " " << json(BarLabel(r, runs)).dump() << "\n";
  }
  script << "plot " << Quote((dir / "throughput.dat").string()) << " using 1:2:xtic(3) with boxes\n";
}

// Panel 3: the race the study implies, test accuracy against training
// time, a line per cell that recorded its evaluations (accuracy_curve).
void AccuracyPanel(std::ofstream& script, const fs::path& dir, const std::vector<Row>& rows, size_t runs) {
  std::ofstream curves(dir / "accuracy.dat");
  std::string race;
  size_t curve_block = 0;
  for (const Row& r : rows) {
    if (r.status != "ok" || r.accuracy_curve.empty()) continue;
    for (const auto& point : r.accuracy_curve)
      if (point.size() == 3) curves << point[0] << " " << 100 * point[2] << "\n";
    curves << "\n\n";
    race += fmt::format("{}{} index {} using 1:2 with linespoints pointtype 7 pointsize 0.5 title {}",
                        race.empty() ? "plot " : ", ", Quote((dir / "accuracy.dat").string()), curve_block++,
                        Quote(r.model + " " + r.device + (runs > 1 ? " (" + r.run + ")" : "")));
  }
  script << "unset logscale y\nset xtics rotate by 0 font ''\nset xrange [0:*]\nset bmargin 4\n"
            "set key inside right bottom font ',8' opaque\nset title 'Test accuracy against training "
            "time'\nset xlabel 'training seconds (evaluation excluded)'\nset ylabel 'test accuracy (%)'\n"
         << (race.empty() ? "set label 'no accuracy curves (results of an older version)' at graph 0.5,0.5 center\n"
                            "plot 1 notitle\n"
                          : race + "\n")
         << "unset label\n";
}

// Panel 4: energy per sample of each cell, measured (NVML, RAPL) or said
// not to be.
void EnergyPanel(std::ofstream& script, const fs::path& dir, const std::vector<Row>& rows, size_t runs) {
  std::ofstream energy(dir / "energy.dat");
  size_t bars_drawn = 0;
  std::string unmeasured;
  for (const Row& r : rows) {
    if (r.status != "ok") continue;
    if (!r.joules_per_sample) {
      if (unmeasured.empty() && !r.energy_reason.empty()) unmeasured = r.energy_reason;
      continue;
    }
    energy << bars_drawn++ << " " << *r.joules_per_sample << " " << json(BarLabel(r, runs)).dump() << "\n";
  }
  script << "unset xrange\nset bmargin 8\n"
         << "set title 'Energy per training sample'\nset xlabel ''\nset ylabel 'joules per sample'\nset key off\n"
         << "set logscale y\nset style fill solid 0.7\nset boxwidth 0.7\nset xtics rotate by -45 font ',9'\n";
  if (bars_drawn == 0) {
    script << "unset logscale y\nset label "
           << Quote("energy not measured" + (unmeasured.empty() ? std::string(" (results of an older version)")
                                                                : ": " + unmeasured.substr(0, 80)))
           << " at graph 0.5,0.5 center\nplot 1 notitle\n";
  } else {
    script << "plot " << Quote((dir / "energy.dat").string()) << " using 1:2:xtic(3) with boxes\n";
  }
  script << "unset multiplot\n";
}

}  // namespace

void PlotReport(const std::vector<LoadedResults>& runs, const std::string& output) {
  const std::string ext = fs::path(output).extension().string();
  if (ext != ".png" && ext != ".svg") throw std::runtime_error(output + ": the plot must be a .png or .svg file");
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    throw std::runtime_error("gnuplot not found: install it (Debian/Ubuntu: apt-get install gnuplot-nox) to draw " +
                             output + "; the table above needs nothing");
  }
  // A folder of our own (0700, a fresh name): nothing planted in it.
  const fs::path dir = MakePrivateTempDirectory("trainbench-report");
  struct RemoveDir {
    fs::path dir;
    ~RemoveDir() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove_dir{dir};
  // gnuplot draws in the private folder; the drawing is then put in place
  // without following a link planted at `output`.
  const fs::path drawn = dir / ("plot" + ext);
  {
    std::ofstream script(dir / "plot.gp");
    script << (ext == ".png" ? "set terminal pngcairo size 1400,1100 noenhanced\n"
                             : "set terminal svg size 1400,1100 noenhanced\n");
    script << "set output " << Quote(drawn.string()) << "\n";
    const std::vector<Row> rows = Rows(runs);
    SpeedupPanel(script, dir, rows, BaselineOf(runs));
    ThroughputPanel(script, dir, rows, runs.size());
    AccuracyPanel(script, dir, rows, runs.size());
    EnergyPanel(script, dir, rows, runs.size());
  }
  // gnuplot without a shell between: no file name is ever a command.
  const int rc = RunGnuplot(dir / "plot.gp", dir / "gnuplot.log");
  std::error_code ec;
  if (rc != 0 || !fs::exists(drawn, ec) || fs::file_size(drawn, ec) == 0) {
    std::ifstream log(dir / "gnuplot.log");
    std::string first;
    std::getline(log, first);
    throw std::runtime_error("gnuplot failed to draw " + output + ": " + first);
  }
  // Put in place as results are: a new file beside it (never through a link
  // planted there), renamed over it.
  std::ifstream drawing(drawn, std::ios::binary);
  WriteFileAtomically(output, std::string(std::istreambuf_iterator<char>(drawing), {}));
}

}  // namespace trainbench
