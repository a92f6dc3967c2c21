#include "pipeline/survey.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <numbers>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "core/config_error.h"
#include "core/json_params.h"
#include "core/number_text.h"
#include "data/collectives/processes.h"
#include "io/run_config.h"
#include "io/survey_catalog.h"
#include "io/tng/tng_reader.h"
#include "pipeline/plan.h"

namespace ifusim {
namespace {

namespace fs = std::filesystem;

using Row = CatalogRow;

// FNV-1a, 64 bits, of the config's canonical dump (nlohmann::json keeps object keys sorted):
// equal hashes mean the same resolved run.
std::string config_hash(const nlohmann::json& document) {
  std::uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : document.dump()) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The orientations: presets ("face-on", "edge-on") and Euler angles in a list, or
// {"random": N, "seed": S}: N rotations uniform over the sphere of directions (alpha and gamma
// uniform, beta = asin(2u - 1), the Tait-Bryan angles of orient's Rz Ry Rx).
std::vector<std::pair<std::string, nlohmann::json>> orientations(const nlohmann::json& section,
                                                                 JsonParams& survey) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  const std::string key = survey.key_path("orientations");
  if (section.is_object()) {
    JsonParams random(section, key);
    const long long n = random.integer("random");
    random.require(n >= 1 && n <= 100000, "random", "an integer from 1 to 100000", n);
    const long long seed = random.integer("seed", 0);
    random.finish();
    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
    const int digits = static_cast<int>(std::to_string(n - 1).size());
    for (long long i = 0; i < n; ++i) {
      const double alpha = 360.0 * uniform();
      const double beta = std::asin(2.0 * uniform() - 1.0) * 180.0 / std::numbers::pi;
      const double gamma = 360.0 * uniform();
      char name[32];
      std::snprintf(name, sizeof name, "random_%0*lld", digits, i);
      out.push_back({name, {{"alpha_deg", alpha}, {"beta_deg", beta}, {"gamma_deg", gamma}}});
    }
    return out;
  }
  if (!section.is_array() || section.empty())
    throw ConfigError(key +
                      ": expected a non-empty list of orientations (\"face-on\", \"edge-on\", "
                      "{\"alpha_deg\": ...}) or {\"random\": N, \"seed\": S}");
  for (std::size_t i = 0; i < section.size(); ++i) {
    const nlohmann::json& o = section[i];
    const std::string path = key + "[" + std::to_string(i) + "]";
    if (o.is_string() && (o == "face-on" || o == "edge-on")) {
      out.push_back({o.get<std::string>(), o});
    } else if (o.is_object()) {
      JsonParams angles(o, path);
      const double a = angles.number("alpha_deg", 0.0), b = angles.number("beta_deg", 0.0),
                   g = angles.number("gamma_deg", 0.0);
      angles.finish();
      out.push_back({"euler_" + number_text(a) + "_" + number_text(b) + "_" + number_text(g), o});
    } else {
      throw ConfigError(path + ": expected \"face-on\", \"edge-on\" or Euler angles, got " +
                        o.dump());
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (out[i].first == out[j].first)
        throw ConfigError(key + ": orientation " + out[i].first + " is listed twice");
  return out;
}

// The subhalos: a list of ids, or cuts on the catalog's stellar mass and SFR keeping the
// `max_count` most massive.
std::vector<SubhaloSummary> select_subhalos(JsonParams& survey,
                                            const std::vector<SubhaloSummary>& catalog,
                                            const std::string& snapshot_dir) {
  const bool by_id = survey.has("subhalos"), by_cut = survey.has("select");
  if (by_id == by_cut)
    throw ConfigError(survey.key_path("subhalos") +
                      ": expected exactly one of \"subhalos\" (a list of ids) and \"select\" "
                      "(cuts on the catalog)");
  std::vector<SubhaloSummary> out;
  if (by_id) {
    const nlohmann::json& ids = survey.raw("subhalos");
    if (!ids.is_array() || ids.empty())
      throw ConfigError(survey.key_path("subhalos") + ": expected a non-empty list of ids");
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<long long>() < 0 ||
          id.get<long long>() >= static_cast<long long>(catalog.size()))
        throw ConfigError(survey.key_path("subhalos") + ": " + id.dump() +
                          " is not a subhalo id of " + snapshot_dir + " (0 to " +
                          std::to_string(catalog.size()) + " - 1)");
      const auto& s = catalog[id.get<std::size_t>()];
      if (std::none_of(out.begin(), out.end(), [&](auto& o) { return o.id == s.id; }))
        out.push_back(s);
    }
    return out;
  }
  JsonParams cut = survey.object("select");
  const double inf = std::numeric_limits<double>::infinity();
  const double m_lo = cut.number("min_stellar_mass_msun", 0.0);
  const double m_hi = cut.number("max_stellar_mass_msun", inf);
  const double sfr_lo = cut.number("min_sfr_msun_per_yr", -inf);
  const double sfr_hi = cut.number("max_sfr_msun_per_yr", inf);
  const long long max_count = cut.integer("max_count", static_cast<long long>(catalog.size()));
  cut.require(max_count >= 1, "max_count", "an integer >= 1", max_count);
  cut.finish();
  for (const auto& s : catalog)
    if (s.star_rows > 0 && s.stellar_mass_msun >= m_lo && s.stellar_mass_msun <= m_hi &&
        s.sfr_msun_per_yr >= sfr_lo && s.sfr_msun_per_yr <= sfr_hi)
      out.push_back(s);
  if (out.empty())
    throw ConfigError(cut.path() + ": no subhalo of the " + std::to_string(catalog.size()) +
                      " in " + snapshot_dir +
                      "'s group catalog has stars and passes the cuts (stellar mass in [" +
                      number_text(m_lo) + ", " + number_text(m_hi) + "] Msun, SFR in [" +
                      number_text(sfr_lo) + ", " + number_text(sfr_hi) + "] Msun/yr)");
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.stellar_mass_msun > b.stellar_mass_msun;
  });
  if (out.size() > static_cast<std::size_t>(max_count))
    out.resize(static_cast<std::size_t>(max_count));
  return out;
}

}  // namespace

SurveyPlan plan_survey(const nlohmann::json& document, const std::string& config_path) {
  if (!document.is_object() || !document.contains("survey"))
    throw ConfigError("survey: section missing (the snapshot, the subhalos and orientations)");
  JsonParams survey(document.at("survey"), "survey");
  SurveyPlan plan;
  plan.config_path = config_path;
  plan.snapshot_dir = resolve_path(survey.string("snapshot_dir"), config_path);
  if (!fs::is_directory(plan.snapshot_dir))
    throw ConfigError("survey.snapshot_dir: " + plan.snapshot_dir + " is not a directory");
  const long long snapshot = survey.integer("snapshot");
  survey.require(snapshot >= 0 && snapshot <= 999, "snapshot", "an integer from 0 to 999",
                 snapshot);
  plan.snapshot = static_cast<int>(snapshot);
  const auto catalog = read_subhalo_catalog(plan.snapshot_dir, plan.snapshot);
  auto selected = select_subhalos(survey, catalog, plan.snapshot_dir);
  const auto views = orientations(
      survey.has("orientations") ? survey.raw("orientations") : nlohmann::json::array({"face-on"}),
      survey);
  survey.finish();
  std::stable_sort(selected.begin(), selected.end(),
                   [](const auto& a, const auto& b) { return a.star_rows > b.star_rows; });

  // Each task: the config without `survey`, its input the subhalo (the input's other keys, such
  // as stream_block_stars, kept), its orientation the task's.
  nlohmann::json base = document;
  base.erase("survey");
  // Each task sets its orientation inside `galaxy`, which must then be an object.
  if (base.contains("galaxy") && !base["galaxy"].is_object())
    throw ConfigError(config_path + ": galaxy: expected a JSON object, got " +
                      base["galaxy"].dump());
  nlohmann::json input = base.contains("input") && base["input"].is_object()
                             ? base["input"]
                             : nlohmann::json::object();
  for (const char* key : {"file", "synthetic", "format", "snapshot", "subhalo"}) input.erase(key);
  input["file"] = plan.snapshot_dir;
  input["snapshot"] = plan.snapshot;
  for (const auto& s : selected)
    for (const auto& [name, orientation] : views) {
      SurveyTask t;
      t.subhalo_id = s.id;
      t.star_rows = s.star_rows;
      t.gas_rows = s.gas_rows;
      t.orientation = name;
      t.run_document = base;
      t.run_document["input"] = input;
      t.run_document["input"]["subhalo"] = s.id;
      t.run_document["galaxy"]["orientation"] = orientation;
      try {
        parse_run_config(t.run_document, config_path);
      } catch (const ConfigError& e) {
        throw ConfigError(config_path + ": " + e.what());
      }
      t.config_hash = config_hash(t.run_document);
      plan.tasks.push_back(std::move(t));
    }
  return plan;
}

std::string describe_survey(const SurveyPlan& plan) {
  std::vector<const SurveyTask*> subhalos;  // one task of each subhalo, largest first
  for (const auto& t : plan.tasks)
    if (subhalos.empty() || subhalos.back()->subhalo_id != t.subhalo_id) subhalos.push_back(&t);
  const std::size_t n = subhalos.size();
  const std::size_t cubes_per_subhalo = n > 0 ? plan.tasks.size() / n : 0;
  std::ostringstream out;
  out << "survey of snapshot " << plan.snapshot << " in " << plan.snapshot_dir << ": " << n
      << " subhalos x " << cubes_per_subhalo << " orientations = " << plan.tasks.size()
      << " cubes\n";
  for (const bool stars : {true, false}) {
    auto rows = [stars](const SurveyTask* t) { return stars ? t->star_rows : t->gas_rows; };
    std::vector<std::size_t> sorted;
    std::size_t total = 0;
    for (const SurveyTask* t : subhalos) {
      sorted.push_back(rows(t));
      total += rows(t);
    }
    std::sort(sorted.begin(), sorted.end());
    out << (stars ? "star rows (SubhaloLenType[4]): " : "gas rows (SubhaloLenType[0]): ") << total
        << " in all, largest " << (n > 0 ? sorted.back() : 0) << ", median "
        << (n > 0 ? sorted[n / 2] : 0) << "; read by the cubes: " << total * cubes_per_subhalo
        << "\n";
  }
  return out.str();
}

namespace {

// Messages between the processes of a survey run by mpirun.
constexpr int kTagResult = 1;  // worker -> 0: its last row (JSON), "" at first; asks for a task
constexpr int kTagTask = 2;    // 0 -> worker: a task's index, "" when there is none left

// One task: its run, into out_dir/<id>/<orientation>/, and its catalog row.
Row run_task(const SurveyPlan& plan, std::size_t i, const std::string& out_dir,
             const RunOptions& options) {
  const SurveyTask& t = plan.tasks[i];
  const std::string relative = std::to_string(t.subhalo_id) + "/" + t.orientation;
  spdlog::info("survey {}/{}: subhalo {} {}", i + 1, plan.tasks.size(), t.subhalo_id,
               t.orientation);
  Row row = {
      std::to_string(t.subhalo_id), t.orientation, "failed", "", "", "", "", "", t.config_hash, ""};
  const auto start = std::chrono::steady_clock::now();
  try {
    RunOptions o = options;
    o.output_dir = (fs::path(out_dir) / relative).string();
    o.write_outputs = true;
    const RunReport run = run_pipeline(parse_run_config(t.run_document, plan.config_path), o);
    for (const char* name : {"cube.fits", "cube.h5"})
      if (row[3].empty() && std::find(run.files.begin(), run.files.end(), name) != run.files.end())
        row[3] = relative + "/" + name;
    row[2] = "done";
    row[5] = run.summary.at("n_stars").dump();
    row[6] = run.summary.at("n_gas").dump();
    row[9] = catalog_files_record(fs::path(out_dir) / relative, run.files);
  } catch (const std::exception& e) {
    // Bad data (or a run that cannot be made) fails this cube only.
    spdlog::warn("survey: subhalo {} {} failed: {}", t.subhalo_id, t.orientation, e.what());
    row[7] = e.what();
  }
  row[4] =
      number_text(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return row;
}

// The catalog and the tasks still to make, on the process that writes the catalog.
class SurveyLedger {
 public:
  SurveyLedger(const SurveyPlan& plan, const std::string& out_dir, SurveyReport& report)
      : report_(report) {
    report_.catalog_path = (fs::path(out_dir) / "catalog.csv").string();
    rows_ = read_survey_catalog(report_.catalog_path);
    for (std::size_t i = 0; i < plan.tasks.size(); ++i) {
      const Row* r = find(plan.tasks[i].subhalo_id, plan.tasks[i].orientation);
      if (r && (*r)[2] == "done" && (*r)[8] == plan.tasks[i].config_hash) {
        const std::string problem = catalog_files_problem(out_dir, *r);
        if (problem.empty()) {
          ++report_.skipped;
          continue;
        }
        spdlog::warn("survey: subhalo {} {} is done in the catalog, but {}: making it again",
                     plan.tasks[i].subhalo_id, plan.tasks[i].orientation, problem);
      }
      todo_.push_back(i);
    }
  }

  // The next task, largest galaxy first, if any is left.
  std::optional<std::size_t> next() {
    std::lock_guard lock(mutex_);
    if (todo_.empty()) return std::nullopt;
    const std::size_t i = todo_.front();
    todo_.pop_front();
    return i;
  }

  // A finished task's row: into the catalog, which is replaced at once.
  void record(const Row& row) {
    std::lock_guard lock(mutex_);
    ++(row[2] == "done" ? report_.done : report_.failed);
    if (Row* r = find(std::stoll(row[0]), row[1]))
      *r = row;
    else
      rows_.push_back(row);
    write_survey_catalog(report_.catalog_path, rows_);
  }

 private:
  Row* find(long long id, const std::string& orientation) {
    for (auto& r : rows_)
      if (r[0] == std::to_string(id) && r[1] == orientation) return &r;
    return nullptr;
  }

  SurveyReport& report_;
  std::vector<Row> rows_;
  std::deque<std::size_t> todo_;
  std::mutex mutex_;
};

}  // namespace

SurveyReport run_survey(const SurveyPlan& plan, const std::string& out_dir,
                        const RunOptions& options) {
  // The run settings every cube shares (stage parameters, templates, devices) are checked once,
  // before any cube: an error there stops the survey instead of failing every row.
  if (!plan.tasks.empty()) try {
      plan_pipeline(parse_run_config(plan.tasks.front().run_document, plan.config_path), options);
    } catch (const ConfigError& e) {
      throw ConfigError(plan.config_path + ": " + e.what());
    }
  fs::create_directories(out_dir);
  SurveyReport report;
  report.catalog_path = (fs::path(out_dir) / "catalog.csv").string();

  if (processes::rank() > 0) {
    // A worker: asks process 0 for tasks, sending back each one's row, until none is left.
    std::string last_row;
    for (;;) {
      processes::send(0, kTagResult, last_row);
      int from = 0;
      const std::string task = processes::receive(kTagTask, &from);
      if (task.empty()) return report;
      const Row row = run_task(plan, std::stoul(task), out_dir, options);
      ++(row[2] == "done" ? report.done : report.failed);
      last_row = nlohmann::json(row).dump();
    }
  }

  // Process 0 (or the only one) keeps the catalog and makes cubes too; with other processes,
  // it makes them on a thread while this one hands out tasks, dynamically, largest first.
  SurveyLedger ledger(plan, out_dir, report);
  std::exception_ptr failure;
  std::thread local([&] {
    try {
      while (const auto i = ledger.next()) ledger.record(run_task(plan, *i, out_dir, options));
    } catch (...) {
      failure = std::current_exception();
    }
  });
  for (int active = processes::size() - 1; active > 0;) {
    int from = 0;
    const std::string row = processes::receive(kTagResult, &from);
    if (!row.empty()) ledger.record(nlohmann::json::parse(row).get<Row>());
    const auto i = ledger.next();
    processes::send(from, kTagTask, i ? std::to_string(*i) : "");
    if (!i) --active;
  }
  local.join();
  if (failure) std::rethrow_exception(failure);
  return report;
}

}  // namespace ifusim
