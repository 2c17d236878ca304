#include "train/DeviceAudit.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <nlohmann/json.hpp>

#include "train/Datasets.h"
#include "train/ScriptedModel.h"
#include "train/Trainer.h"
#include "train/TrainStep.h"

namespace tb {
namespace {

// The target as the trainer names it ("auto" resolved, "cuda" -> "cuda:0"),
// and whether it exists here.
std::pair<std::string, bool> resolveTarget(const RunConfig& config, const std::string& device)
{
    RunConfig c = config;
    if (!device.empty()) c.device = device;
    for (const auto& issue : validateConfig(c, false)) {
        if (issue.path == "device") throw InputError((device.empty() ? "device: " : "--device: ") + issue.message);
    }
    if (c.device == "auto") return {resolveDevice("auto"), true};
    if (c.device == "cpu") return {"cpu", true};
    const std::string target = c.device == "cuda" ? "cuda:0" : c.device;
    const int index = std::stoi(target.substr(5));
    const bool exists = torch::cuda::is_available() && index < static_cast<int>(torch::cuda::device_count());
    return {target, exists};
}

// The largest token id the dataset feeds the model.
std::int64_t maxTokenId(const RunConfig& config)
{
    if (config.data.source != "text") return datasetVocabSize(config) - 1;
    const auto largest = [](const char* data, std::size_t size, unsigned char sofar) {
        for (std::size_t i = 0; i < size && sofar < 255; ++i) sofar = std::max(sofar, static_cast<unsigned char>(data[i]));
        return sofar;
    };
    unsigned char most = 0;
    if (config.data.path.empty()) {
        const auto text = bundledSampleText();
        return largest(text.data(), text.size(), 0);
    }
    std::ifstream in(resolvedDataPath(config), std::ios::binary);
    std::vector<char> buffer(1 << 20);
    while (in && most < 255) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        most = largest(buffer.data(), static_cast<std::size_t>(in.gcount()), most);
    }
    return most;
}

std::shared_ptr<CausalLmImpl> buildModel(const RunConfig& config)
{
    if (auto issues = validateConfig(config, true); !issues.empty()) throw ConfigError("config", std::move(issues));
    torch::manual_seed(config.train.seed);
    const auto options = modelSpecFor(config, datasetVocabSize(config), effectiveSeqLen(config));
    std::shared_ptr<CausalLmImpl> model;
    if (config.model.type == "hf") {
        // Where tensors live is all the audit reads: a folder's 7B model is
        // built without its weights' values (no fp32 copy, no random draws).
        const WeightsFromFile noValues(torch::kFloat);
        model = makeModel(options);
    } else {
        model = makeModel(options);
    }
    // A quantized base is held as its run holds it (no values for a folder's).
    const QuantizeSpec quantize{quantFormatOf(config.model.quantize == "none" ? "" : config.model.quantize), config.model.doubleQuant};
    if (quantize.active() && config.model.type == "hf") {
        for (auto& [name, layer] : quantizableLinears(*model)) {
            layer->setQuantizedBase(quantizedPlaceholder(layer->outFeatures(), layer->inFeatures(), quantize));
        }
    } else {
        quantizeModelBase(*model, quantize);
    }
    model->freezeBaseForLora();
    return model;
}

} // namespace

int DeviceAuditReport::flagged() const
{
    return static_cast<int>(std::count_if(tensors.begin(), tensors.end(), [](const AuditEntry& e) { return !e.ok; }));
}

std::string DeviceAuditReport::toJson() const
{
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : tensors) {
        list.push_back({{"path", e.path},
                        {"kind", e.kind},
                        {"dtype", e.dtype},
                        {"device", e.device},
                        {"expected_device", e.expectedDevice},
                        {"ok", e.ok},
                        {"cause", e.cause}});
    }
    return nlohmann::json{{"tensors", list}, {"flagged", flagged()}, {"target", target}, {"moved", moved}, {"model", model}}
        .dump(2);
}

std::string DeviceMeeting::text() const
{
    const std::string where = module.empty() ? "the model itself" : "module " + module;
    return "The first place where two devices meet is " + where + ": " + tensor + " is on " + tensorDevice
        + ", the activations on " + inputDevice + "."
        + (reproduced ? "" : " (Re-running that forward did not raise the error again.)");
}

DeviceAuditReport auditDevices(const RunConfig& config, const std::string& device)
{
    const auto [target, exists] = resolveTarget(config, device);
    auto model = buildModel(config);
    DeviceAuditReport report;
    report.target = target;
    report.model = config.model.type == "torchscript"
        ? "torchscript " + std::filesystem::path(config.model.path).filename().string()
        : config.model.type;
    if (exists) {
        moveModel(*model, torch::Device(target));
        report.moved = true;
    }
    report.tensors = auditModel(*model, target, report.moved, optimizerStateOf(config));
    return report;
}

std::optional<ModelFileFacts> inspectModelFile(const RunConfig& config)
{
    if (config.model.type != "torchscript") return std::nullopt;
    // The GUI asks on every edit: keep the last answer while the model file
    // and the data are the same files, unchanged.
    const auto stamp = [](const std::string& path) {
        std::error_code ec;
        const auto size = std::filesystem::file_size(path, ec);
        const auto time = std::filesystem::last_write_time(path, ec).time_since_epoch().count();
        return path + "|" + std::to_string(ec ? -1 : static_cast<long long>(size)) + "|" + std::to_string(time);
    };
    const std::string key = stamp(resolvedModelPath(config)) + "|" + config.data.source + "|"
        + (config.data.path.empty() ? std::string() : stamp(resolvedDataPath(config)));
    static std::mutex mutex;
    static std::pair<std::string, ModelFileFacts> last;
    {
        std::lock_guard lock(mutex);
        if (last.first == key) return last.second;
    }
    ModelFileFacts facts;
    try {
        facts.maxTokenId = maxTokenId(config);
        ModelOptions options;
        options.type = config.model.type;
        options.scriptPath = resolvedModelPath(config);
        ScriptedLmImpl model(options);
        model.eval();
        torch::NoGradGuard noGrad;
        try {
            const auto logits = model.forward(torch::tensor({std::int64_t{0}, facts.maxTokenId}).reshape({1, 2}));
            facts.vocabSize = logits.size(-1);
        } catch (const InputError&) {
            throw;
        } catch (const std::exception& e) {
            // A forward that cannot take token ids is unusable; other failures
            // (a device mismatch, a forward that needs a GPU) are the audit's
            // and the run's to report.
            const std::string text = e.what();
            if (text.find("index out of range") != std::string::npos || text.find("out of bounds") != std::string::npos) {
                facts.lookupOutOfRange = true;
                facts.lookupError = errorSummary(text);
            }
            for (const char* signature : {"is missing value for argument", "Expected a value of type", "expected at most"}) {
                if (text.find(signature) != std::string::npos) {
                    facts.loadError = "model.path: the TorchScript model's forward does not take one tensor of token "
                                      "ids: " + errorSummary(text);
                    break;
                }
            }
        }
    } catch (const InputError& e) {
        facts.loadError = e.what();
    }
    std::lock_guard lock(mutex);
    last = {key, facts};
    return facts;
}

} // namespace tb
