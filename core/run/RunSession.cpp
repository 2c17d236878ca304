#include "run/RunSession.h"

#include "run/SystemSampler.h"
#include "diagnose/TargetPlan.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/Version.h"
#include "diagnose/ErrorExplainer.h"
#include "gpu/Discovery.h"
#include "memory/DerivedStep.h"
#include "memory/Estimator.h"
#include "memory/MemoryPlan.h"
#include "store/MetricWriter.h"
#include "store/Sqlite.h"
#include "train/DerivedPlan.h"

namespace tb {
namespace {

RunStatus statusOf(TrainResult::Status s)
{
    switch (s) {
    case TrainResult::Status::Finished: return RunStatus::Finished;
    case TrainResult::Status::Cancelled: return RunStatus::Cancelled;
    case TrainResult::Status::Failed: return RunStatus::Failed;
    }
    return RunStatus::Failed;
}

// "run:12" or "12" -> 12; anything else is a path.
std::optional<std::int64_t> runReference(const std::string& text)
{
    const std::string digits = text.rfind("run:", 0) == 0 ? text.substr(4) : text;
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoll(digits);
}

std::optional<double> known(double v)
{
    if (v < 0) return std::nullopt;
    return v;
}

std::string estimateJson(const MemoryEstimate& e)
{
    nlohmann::json components = nlohmann::json::object();
    for (const auto& t : e.terms) components[t.name] = t.bytes;
    return nlohmann::json{{"peak_bytes", e.peakBytes},
                          {"tensor_peak_bytes", e.tensorPeakBytes},
                          {"peak_phase", e.peakPhase},
                          {"components", components},
                          {"notes", e.notes}}
        .dump();
}

std::string mib(std::int64_t bytes)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
    return text;
}

} // namespace

// A launch's own step (the check before it, the estimate it records), derived
// once per traced config in this process.
static std::shared_ptr<const DerivedStep> launchStep(const RunConfig& traced)
{
    static std::mutex mutex;
    static std::map<std::string, std::shared_ptr<const DerivedStep>> steps;
    const auto key = derivedStepKey(traced);
    {
        std::lock_guard<std::mutex> lock(mutex);
        if (const auto it = steps.find(key); it != steps.end()) return it->second;
    }
    auto step = std::make_shared<const DerivedStep>(deriveStep(traced));
    std::lock_guard<std::mutex> lock(mutex);
    if (steps.size() >= 8) steps.clear(); // (a few configs a process launches)
    steps[key] = step;
    return step;
}

MemoryEstimate launchEstimate(const RunConfig& config, const std::string& device, std::optional<ComputeCapability> cc)
{
    const bool gpu = device.rfind("cuda", 0) == 0;
    const TargetPlan plan = planOnTarget(config, gpu, cc, std::max(1, config.train.worldSize));
    const auto at = [&](const MemoryPlan& p) { return p.at(config.train.batchSize, effectiveSeqLen(config), plan.setup); };
    try {
        // Its own step's plan, as estimate, fit, the form and the Memory
        // planner give it (recorded at small widths in seconds, before the
        // first step).
        auto traced = config;
        traced.train.precision = plan.setup.precision;
        return at(MemoryPlan(launchStep(traced), plan.arch));
    } catch (const std::exception& e) {
        // None, said so (no warning is raised against a missing estimate).
        MemoryEstimate none;
        none.notes.push_back(std::string("its own step's plan could not be derived (") + e.what() + "): no estimate");
        return none;
    }
}

std::string memoryEstimateWarning(std::int64_t estimatedBytes, std::int64_t measuredBytes, const std::string& phase,
                                  int step)
{
    if (estimatedBytes <= 0 || static_cast<double>(measuredBytes) <= 1.1 * static_cast<double>(estimatedBytes)) return {};
    char percent[32];
    std::snprintf(percent, sizeof percent, "%.0f%%",
                  100.0 * (static_cast<double>(measuredBytes) / static_cast<double>(estimatedBytes) - 1.0));
    return "step " + std::to_string(step) + ": the measured peak " + mib(measuredBytes) + " during "
        + (phase.empty() ? std::string("the step") : phase) + " exceeds the memory planner's estimate "
        + mib(estimatedBytes) + " by " + percent + "; plan this setup with that much more headroom";
}

PreflightError::PreflightError(std::vector<Finding> findings)
    : InputError([&] {
          std::string text = "preflight found errors; the run was not started:\n";
          for (const auto& f : findings) {
              if (f.severity == Severity::Error) text += findingText(f);
          }
          return text + "Fix the config, or launch anyway with --force (the override is stored with the run).";
      }()),
      m_findings(std::move(findings))
{
}

LocalMachine localMachine()
{
    LocalMachine m;
    const TorchCudaInfo info = torchCudaInfo();
    m.torchBuiltWithCuda = info.builtWithCuda;
    m.torchCudaDevices = info.deviceCount;
    if (info.deviceCount > 0) m.devices = makeNvidiaDriver()->devices();
    m.hostMemoryBytes = hostMemoryBytes();
    return m;
}

std::vector<Finding> launchPreflight(const RunConfig& config) { return launchPreflight(config, localMachine()); }

std::vector<Finding> launchPreflight(const RunConfig& config, const LocalMachine& local,
                                     std::function<std::shared_ptr<const DerivedStep>(const RunConfig&)> derivePlan)
{
    PreflightTarget target;
    target.local = local;
    target.derivePlan = derivePlan ? std::move(derivePlan) : launchStep;
    target.model = inspectModelFile(config);
    // A data file that vanished since the config was checked fails the run itself.
    return runPreflight(config, target, false);
}

std::vector<Finding> explainFailure(const std::string& message, const RunConfig* config, const std::string& device)
{
    auto findings = ErrorExplainer::bundled().explain(message);
    auto& primary = findings.front();
    const auto total = primary.numbers.find("total_bytes");
    if (config && plannableModel(*config) && primary.kind == "cuda_oom" && device.rfind("cuda", 0) == 0 && total != primary.numbers.end()) {
        // The planner's answer for the GPU it ran on, within the memory the message reports.
        // The config as a GPU runs it ("auto" precision resolved there), as preflight and the planner plan it.
        const auto setup = planOnTarget(*config, true, std::nullopt).setup;
        const auto budget = static_cast<std::int64_t>(total->second);
        ExplainContext context;
        context.configuredBatch = config->train.batchSize;
        // The planner's answer (its own step's), or none (unknown) where its
        // step cannot be derived.
        try {
            context.largestFittingBatch = memoryPlanOf(*config, architectureFor(*config), setup.precision)
                                              .largestBatch(effectiveSeqLen(*config), setup, budget);
        } catch (const std::exception&) {
            context.largestFittingBatch = -1;
        }
        addPlannerAnswer(primary, context);
    }
    return findings;
}

RunSession::RunSession(RunConfig config, SessionOptions options)
    : m_config(std::move(config)), m_options(std::move(options))
{
    // Files are checked when the trainer reads them, inside the run, so a data
    // file that vanished since the config was validated ends as a failed run.
    if (auto issues = validateConfig(m_config, false); !issues.empty()) {
        throw ConfigError(m_config.name, std::move(issues));
    }
    // Data parallel: the run records its world size.
    const int world = m_options.dist.active() ? m_options.dist.worldSize : 1;
    if (m_config.train.worldSize != 1 && m_config.train.worldSize != world) {
        throw InputError(m_options.dist.active()
                             ? "train.world_size is " + std::to_string(m_config.train.worldSize) + " but WORLD_SIZE is "
                                   + std::to_string(world) + ": start as many processes as the config says, or change train.world_size"
                             : "train.world_size is " + std::to_string(m_config.train.worldSize)
                                   + ": a data-parallel run starts one process per rank; launch it with 'trainbench-cli train "
                                     "--nproc " + std::to_string(m_config.train.worldSize) + "' (or torchrun, srun), or set train.world_size to 1");
    }
    m_config.train.worldSize = world;
    // Store the data path absolute, so the run can be resumed from any folder.
    if (!m_config.data.path.empty()) m_config.data.path = resolvedDataPath(m_config);
    if (!m_config.train.initFrom.empty() && !runReference(m_config.train.initFrom)) {
        std::filesystem::path p(m_config.train.initFrom);
        if (p.is_relative() && !m_config.baseDir.empty()) p = std::filesystem::path(m_config.baseDir) / p;
        m_config.train.initFrom = p.lexically_normal().string();
    }
    // Known failures are stopped before launch unless the user overrides.
    m_preflight = launchPreflight(m_config);
    if (hasErrors(m_preflight) && !m_options.force) throw PreflightError(m_preflight);
    if (auto problem = planningOnlyFieldsProblem(m_config); !problem.empty()) throw InputError(problem);
    m_config.baseDir.clear();
    // Fail on a device that does not exist before a run record is created.
    (void)resolvePrecision(m_config.train.precision, deviceCapability(resolveDevice(m_config.device)));
    m_dbPath = m_options.dbPath.empty() ? RunStore::defaultPath() : m_options.dbPath;
    m_store = std::make_unique<RunStore>(m_dbPath);
    resolveInitFrom();
}

void RunSession::resolveInitFrom()
{
    const auto& from = m_config.train.initFrom;
    if (from.empty()) return;
    if (const auto id = runReference(from)) {
        const std::string label = "train.init_from: run " + std::to_string(*id);
        if (!m_store->run(*id)) throw InputError(label + " does not exist in " + m_dbPath + "; 'trainbench-cli runs' lists the runs");
        const auto checkpoint = m_store->latestCheckpoint(*id);
        if (!checkpoint) throw InputError(label + " has no checkpoint to start from");
        m_initFromPath = checkpoint->path;
        m_initFromLabel = "run " + std::to_string(*id) + " at step " + std::to_string(checkpoint->step) + " ("
            + checkpoint->path + ")";
        return;
    }
    std::error_code ec;
    if (!std::filesystem::exists(from, ec)) {
        throw InputError("train.init_from: " + from + " does not exist; give a run id (\"run:12\"), a checkpoint, a "
                         ".safetensors file, a folder with model.safetensors, or (model.type \"hf\") a model folder "
                         "or a PEFT adapter folder");
    }
    m_initFromPath = from;
    m_initFromLabel = from;
}

std::string resumeRefusal(RunStore& store, std::int64_t runId)
{
    const std::string label = "run " + std::to_string(runId);
    const auto record = store.run(runId);
    if (!record) return label + " does not exist in " + store.path() + "; 'trainbench-cli runs' lists the runs";
    if (record->status == RunStatus::Finished) return label + " already finished; there is nothing to resume";
    if (!store.latestCheckpoint(runId)) {
        return label + " has no checkpoint to resume from (it stopped before its first checkpoint; set "
                       "train.checkpoint_every to checkpoint more often). Start it again instead";
    }
    return {};
}

std::unique_ptr<RunSession> RunSession::resume(std::int64_t runId, SessionOptions options)
{
    std::unique_ptr<RunSession> session(new RunSession());
    session->m_options = std::move(options);
    session->m_dbPath = session->m_options.dbPath.empty() ? RunStore::defaultPath() : session->m_options.dbPath;
    session->m_store = std::make_unique<RunStore>(session->m_dbPath);
    if (const std::string refusal = resumeRefusal(*session->m_store, runId); !refusal.empty()) throw InputError(refusal);
    const auto record = session->m_store->run(runId);
    const std::string label = "run " + std::to_string(runId);
    const auto checkpoint = session->m_store->latestCheckpoint(runId);
    session->m_config = parseConfig(record->configJson, label + "'s stored config");
    // Last: of two processes resuming this run, exactly one gets past here.
    session->m_store->claimRun(runId);
    session->m_runId = runId;
    session->m_resumeCheckpoint = checkpoint->path;
    session->m_resumeStep = checkpoint->step;
    return session;
}

RunSession::~RunSession() = default;

void RunSession::requestCancel()
{
    m_cancel.store(true);
    std::lock_guard<std::mutex> lock(m_trainerMutex);
    if (m_trainer) m_trainer->requestCancel();
}

namespace {

// Store writes at the end of a run must not be lost to a lock held for a few
// seconds by another process.
constexpr std::chrono::seconds kStoreGiveUp{60};

// The metrics a step stores, by the names the store, the plots and `runs` read.
std::vector<std::pair<std::string, double>> storedValues(const StepMetrics& s, bool measureMemory)
{
    std::vector<std::pair<std::string, double>> values{
        {"loss", s.loss}, {"lr", s.lr}, {"grad_norm", s.gradNorm}, {"tokens_per_s", s.tokensPerSecond}, {"step_ms", s.stepMs}};
    if (measureMemory) {
        values.emplace_back("mem_current_bytes", static_cast<double>(s.memCurrentBytes));
        values.emplace_back("mem_peak_bytes", static_cast<double>(s.memPeakBytes));
    }
    if (s.lossScale > 0) values.emplace_back("loss_scale", s.lossScale);
    if (!s.rankPeakBytes.empty()) {
        // Data parallel: every rank's peak (mem_peak_bytes is the largest).
        for (std::size_t r = 0; r < s.rankPeakBytes.size(); ++r) {
            values.emplace_back("mem_peak_bytes_rank" + std::to_string(r), static_cast<double>(s.rankPeakBytes[r]));
        }
        values.emplace_back("comm_wait_ms", s.commWaitMs);
    }
    return values;
}

} // namespace

void RunSession::recordPreflight(SessionOutcome& outcome)
{
    if (m_preflight.empty()) return;
    const bool overridden = hasErrors(m_preflight);
    try {
        retryWhileBusy([&] {
            m_store->addFindings({m_runId, "preflight", wallClockNow(), overridden, findingsToJson(m_preflight, false)});
            if (overridden) {
                m_store->addEvent({m_runId, wallClockNow(), "warning", "preflight_override",
                                   "launched past preflight errors (forced)"});
            }
        }, kStoreGiveUp);
    } catch (const std::exception&) {
        outcome.lostValues += 1;
    }
}

TrainerOptions RunSession::trainerOptions(const SessionCallbacks& callbacks)
{
    TrainerOptions to;
    to.checkpointDir = m_store->runFolder(m_runId);
    to.resumeFrom = m_resumeCheckpoint;
    to.initFrom = m_initFromPath;
    to.measureMemory = m_options.measureMemory && !m_options.bare;
    to.dist = m_options.dist;
    to.dist.timeoutSeconds = m_config.train.distTimeoutS;
    to.distOverlap = m_options.distOverlap;
    to.forceLossScaling = m_options.forceLossScaling;
    to.injectNonFiniteGradientAtStep = m_options.injectNonFiniteGradientAtStep;
    to.injectRank = m_options.injectRank;
    // Tokenizing the data: progress goes to the front end only; the summary
    // and any skipped lines are the run's events.
    to.data.cancel = &m_cancel;
    to.data.onEvent = [&](const std::string& severity, const std::string& kind, const std::string& message) {
        if (severity != "progress") {
            retryWhileBusy([&] { m_store->addEvent({m_runId, wallClockNow(), severity, kind, message}); }, kStoreGiveUp);
        }
        if (callbacks.onEvent) callbacks.onEvent({severity, kind, message});
    };
    return to;
}

TrainerCallbacks RunSession::storingCallbacks(MetricWriter& writer, SessionOutcome& outcome, const SessionCallbacks& callbacks)
{
    // The memory check's warning is said once per run.
    auto estimateWarned = std::make_shared<bool>(false);
    // CPU and host memory, and the GPU's use where the run trains on one, every 2 s.
    const std::string device = resolveDevice(m_config.device);
    int cudaIndex = -1;
    if (device.rfind("cuda", 0) == 0) cudaIndex = device.size() > 5 ? std::atoi(device.c_str() + 5) : 0;
    auto sampler = std::make_shared<SystemSampler>(cudaIndex);
    TrainerCallbacks tc;
    tc.onStep = [this, &writer, &outcome, &callbacks, estimateWarned, sampler](const StepMetrics& step) {
        StepMetrics s = step;
        s.system = sampler->sampleIfDue();
        // One step's values in one transaction: a follower (here or
        // over ssh) assembles steps from them and must not see half.
        if (m_options.recordMetrics) {
            auto values = storedValues(s, m_options.measureMemory);
            values.insert(values.end(), s.system.begin(), s.system.end());
            writer.addMetrics(s.step, values);
        }
        writer.setStepsDone(s.step);
        if (s.memPeakBytes > outcome.measuredPeakBytes) {
            outcome.measuredPeakBytes = s.memPeakBytes;
            outcome.measuredPeakPhase = s.memPeakPhase;
        }
        // Every run checks the planner: a measured peak more than 10%
        // over the estimate is reported once, with the phase.
        if (m_estimate && !*estimateWarned) {
            const auto warning = memoryEstimateWarning(m_estimate->probePeakBytes(), s.memPeakBytes, s.memPeakPhase, s.step);
            if (!warning.empty()) {
                *estimateWarned = true;
                const TrainerEvent e{"warning", "memory_estimate", warning};
                writer.addEvent(e.severity, e.kind, e.message);
                if (callbacks.onEvent) callbacks.onEvent(e);
            }
        }
        if (callbacks.onStep) callbacks.onStep(s);
    };
    tc.onEval = [&writer, &callbacks](const EvalMetrics& e) {
        writer.addMetric(e.step, "val_loss", e.valLoss);
        if (e.valAccuracy >= 0) writer.addMetric(e.step, "val_accuracy", e.valAccuracy);
        if (callbacks.onEval) callbacks.onEval(e);
    };
    tc.onEvent = [&writer, &callbacks](const TrainerEvent& e) {
        writer.addEvent(e.severity, e.kind, e.message);
        if (callbacks.onEvent) callbacks.onEvent(e);
    };
    tc.onCheckpoint = [this, &writer, &callbacks](int step, const std::string& path, std::int64_t bytes) {
        // Metrics up to this step must be stored before the checkpoint is
        // announced, so a resume from it never lacks earlier metrics.
        writer.flush();
        retryWhileBusy([&] {
            m_store->addArtifact({m_runId, "checkpoint", step, path, bytes, wallClockNow()});
            m_store->dropMissingArtifacts(m_runId);
        }, kStoreGiveUp);
        const TrainerEvent e{"info", "checkpoint", "checkpoint saved at step " + std::to_string(step) + ": " + path};
        writer.addEvent(e.severity, e.kind, e.message);
        if (callbacks.onEvent) callbacks.onEvent(e);
    };
    return tc;
}

SessionOutcome RunSession::run(const SessionCallbacks& callbacks)
{
    SessionOutcome outcome;
    outcome.dbPath = m_dbPath;
    outcome.config = m_config;
    outcome.totalSteps = m_config.train.steps;
    const bool resuming = m_runId != 0;
    if (!resuming) {
        m_runId = m_store->createRun({m_config.name, configToJson(m_config), m_config.device, m_config.train.precision,
                                      kAppVersion, torchVersion(), m_config.train.steps, true});
    }
    outcome.runId = m_runId;
    if (!resuming) recordPreflight(outcome);
    // Every failure is explained the same way and kept with the run.
    const auto explain = [&](const std::string& message, const std::string& device,
                             const std::optional<DeviceMeeting>& meeting) {
        outcome.failureFindings = explainFailure(message, &m_config, device);
        auto& primary = outcome.failureFindings.front();
        if (meeting && (primary.kind == "device_mismatch" || primary.kind == "meta_tensor")) {
            // The run-time locator's answer: the first module where two devices meet.
            primary.cause += " " + meeting->text();
            primary.text["module"] = meeting->module;
            primary.text["tensor"] = meeting->tensor;
            primary.text["tensor_device"] = meeting->tensorDevice;
            primary.text["activations_device"] = meeting->inputDevice;
        }
        try {
            retryWhileBusy([&] {
                m_store->addFindings({m_runId, "failure", wallClockNow(), false, findingsToJson(outcome.failureFindings, false)});
            }, kStoreGiveUp);
        } catch (const std::exception&) {
            outcome.lostValues += 1;
        }
    };

    const auto fail = [&](const std::string& kind, const std::string& message, int stepsDone) {
        // The run exists now, so a failure is recorded, not just thrown.
        outcome.status = RunStatus::Failed;
        outcome.message = message;
        try {
            retryWhileBusy([&] {
                m_store->addEvent({m_runId, wallClockNow(), "error", kind, message});
                m_store->markEnded(m_runId, RunStatus::Failed, {stepsDone, std::nullopt, std::nullopt, std::nullopt, message});
            }, kStoreGiveUp);
        } catch (const std::exception& e) {
            outcome.message += " (and the run could not be marked failed: " + std::string(e.what()) + ")";
        }
        explain(message, m_config.device, std::nullopt);
        if (callbacks.onEvent) callbacks.onEvent({"error", kind, message});
        return outcome;
    };

    std::unique_ptr<Trainer> trainer;
    try {
        const TrainerOptions to = trainerOptions(callbacks);
        RunConfig config = m_config;
        if (m_options.bare) config.train.logEvery = config.train.steps;
        trainer = std::make_unique<Trainer>(config, to);
    } catch (const std::exception& e) {
        return fail("setup", e.what(), resuming ? m_resumeStep : 0);
    }

    // m_trainer is cleared on every way out of this function.
    struct TrainerSlot {
        RunSession& session;
        TrainerSlot(RunSession& s, Trainer* t) : session(s)
        {
            std::lock_guard<std::mutex> lock(session.m_trainerMutex);
            session.m_trainer = t;
            if (session.m_cancel.load()) t->requestCancel();
        }
        ~TrainerSlot()
        {
            std::lock_guard<std::mutex> lock(session.m_trainerMutex);
            session.m_trainer = nullptr;
        }
    } slot(*this, trainer.get());

    TrainResult result;
    std::string writerError;
    std::int64_t lost = 0;
    try {
        // Only now that the resumed run is really under way are the metrics
        // after its checkpoint dropped (that many steps will be re-run).
        if (resuming) m_store->truncateMetricsAfter(m_runId, m_resumeStep);
        m_store->markRunning(m_runId, m_config.train.steps, trainer->device(), trainer->precision());
        if (!m_options.bare && plannableModel(m_config)) {
            m_estimate = launchEstimate(m_config, trainer->device(), trainer->computeCapability());
            // (None where a LoRA step could not be derived: nothing recorded, no warning.)
            if (m_estimate->peakBytes > 0) {
                m_store->setEstimate(m_runId, m_estimate->probePeakBytes(), estimateJson(*m_estimate));
                outcome.estimatedPeakBytes = m_estimate->probePeakBytes();
            } else {
                m_estimate.reset();
            }
        }
        if (callbacks.onStarted) callbacks.onStarted(m_runId, trainer->datasetDescription());
        if (!m_initFromLabel.empty()) {
            const TrainerEvent e{"info", "init_from", "model weights initialised from " + m_initFromLabel};
            m_store->addEvent({m_runId, wallClockNow(), e.severity, e.kind, e.message});
            if (callbacks.onEvent) callbacks.onEvent(e);
        }
        if (m_options.bare) {
            // The benchmark baseline: nothing but training, then the store at the end.
            TrainerCallbacks tc;
            tc.onCheckpoint = [&](int step, const std::string& path, std::int64_t bytes) {
                retryWhileBusy([&] {
                    m_store->addArtifact({m_runId, "checkpoint", step, path, bytes, wallClockNow()});
                    m_store->dropMissingArtifacts(m_runId);
                }, kStoreGiveUp);
            };
            result = trainer->run(tc);
        } else {
            MetricWriter writer(m_dbPath, m_runId);
            result = trainer->run(storingCallbacks(writer, outcome, callbacks));
            writer.setStepsDone(result.stepsDone);
            writer.flush();
            writerError = writer.error();
            lost = writer.lostValues();
        }
    } catch (const std::exception& e) {
        // The store failed under the run (not the trainer, which reports its
        // own failures in its result): never leave the run "running".
        return fail("store", e.what(), result.stepsDone);
    }
    outcome.status = statusOf(result.status);
    outcome.stepsDone = result.stepsDone;
    outcome.finalLoss = result.finalLoss;
    outcome.finalValLoss = result.finalValLoss;
    outcome.finalValAccuracy = result.finalValAccuracy;
    outcome.message = result.message;
    outcome.checkpoint = result.lastCheckpoint;
    outcome.steadyTokensPerSecond = result.steadyTokensPerSecond;
    outcome.lostValues = lost;
    if (!writerError.empty()) outcome.message += "; metrics incomplete: " + writerError;
    if (outcome.status == RunStatus::Failed) explain(result.message, trainer->device(), result.deviceMeeting);
    try {
        retryWhileBusy([&] {
            m_store->markEnded(m_runId, outcome.status,
                               {result.stepsDone, result.stepsDone > 0 ? std::optional<double>(result.finalLoss) : std::nullopt,
                                known(result.finalValLoss), known(result.finalValAccuracy), outcome.message});
        }, kStoreGiveUp);
    } catch (const std::exception& e) {
        outcome.lostValues += 1;
        outcome.message += "; the run's end could not be stored (" + std::string(e.what()) + ")";
    }
    return outcome;
}

} // namespace tb
