// Trainer's checkpoints: the folder made ready before step 1, step-N.pt written
// through a .partial file and renamed, the newest train.keep_checkpoints kept,
// and a checkpoint (of this or an older LibTorch) loaded to resume.
#include "train/TrainerImpl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/Errors.h"
#include "common/Files.h"

namespace tb {
namespace {

// 2: parameters named as in Hugging Face checkpoints, no buffers stored.
constexpr std::int64_t kCheckpointFormat = 2;

// Optimizer state is read onto the CPU; move it to the parameters' device so a
// checkpoint from a GPU resumes on the CPU and the other way round.
void moveOptimizerState(torch::optim::Optimizer& optimizer, const torch::Device& device)
{
    for (auto& [key, state] : optimizer.state()) {
        if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
            adam->exp_avg(adam->exp_avg().to(device));
            adam->exp_avg_sq(adam->exp_avg_sq().to(device));
            if (adam->max_exp_avg_sq().defined()) adam->max_exp_avg_sq(adam->max_exp_avg_sq().to(device));
        } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
            if (sgd->momentum_buffer().defined()) sgd->momentum_buffer(sgd->momentum_buffer().to(device));
        }
    }
}

// Reads the optimizer state LibTorch's Optimizer::save wrote, whichever
// LibTorch wrote it. Its own load matches each parameter to its state through
// the parameter's address as text, which 1.13 writes in hex and 2.x in decimal;
// 2.x parses the keys as decimal, so it cannot read a 1.13 checkpoint's state
// (every key becomes 0). Here the saved keys are matched as text, parameter by
// parameter in group order, as both versions wrote them.
template <typename State>
void loadOptimizerState(torch::optim::Optimizer& optimizer, torch::serialize::InputArchive& archive,
                        const std::string& path)
{
    const auto refuse = [&](const std::string& why) {
        throw InputError("checkpoint " + path + " does not fit this run: its optimizer state " + why);
    };
    torch::serialize::InputArchive states, groups;
    archive.read("state", states);
    archive.read("param_groups", groups);
    torch::Tensor count;
    groups.read("param_groups/size", count);
    auto& ours = optimizer.param_groups();
    if (count.item<std::int64_t>() != static_cast<std::int64_t>(ours.size())) {
        refuse("has " + std::to_string(count.item<std::int64_t>()) + " parameter groups, this run has "
               + std::to_string(ours.size()));
    }
    for (std::size_t i = 0; i < ours.size(); ++i) {
        torch::serialize::InputArchive group;
        groups.read("param_groups/" + std::to_string(i), group);
        torch::Tensor size;
        group.read("params/size", size);
        const auto& params = ours[i].params();
        if (size.item<std::int64_t>() != static_cast<std::int64_t>(params.size())) {
            refuse("group " + std::to_string(i) + " has " + std::to_string(size.item<std::int64_t>())
                   + " parameters, this run's has " + std::to_string(params.size()));
        }
        for (std::size_t j = 0; j < params.size(); ++j) {
            c10::IValue key;
            group.read("params/" + std::to_string(j), key);
            torch::serialize::InputArchive saved;
            if (!states.try_read(key.toStringRef(), saved)) continue; // no step taken on it yet
            auto state = std::make_unique<State>();
            state->serialize(saved);
            compat::setOptimizerState(optimizer, params[j], std::move(state));
        }
    }
}

} // namespace

// Before step 1: the checkpoint folder exists and can be written (a run
// that would lose its weights at the end is refused now), and a stale
// .partial from a killed write is gone.
void Trainer::Impl::prepareCheckpointDir() const
{
    namespace fs = std::filesystem;
    if (options.checkpointDir.empty()) return;
    const auto& dir = options.checkpointDir;
    const auto refuse = [&](const std::string& reason) {
        throw InputError("cannot write checkpoints to " + dir + " (" + reason
                         + "); make the folder writable or put the database (--db) somewhere writable");
    };
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) refuse(ec.message());
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (entry.path().extension() == ".partial") fs::remove(entry.path(), ec);
    }
    const auto probe = (fs::path(dir) / ".write-test").string();
    {
        std::ofstream out(probe, std::ios::binary | std::ios::trunc);
        if (!out || !(out << "x") || !out.flush()) refuse(std::strerror(errno));
    }
    fs::remove(probe, ec);
}

// Keeps the newest train.keep_checkpoints step-*.pt files of this run.
void Trainer::Impl::pruneCheckpoints() const
{
    namespace fs = std::filesystem;
    const int keep = config.train.keepCheckpoints;
    if (keep <= 0) return;
    std::vector<fs::path> found;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(options.checkpointDir, ec)) {
        const auto name = entry.path().filename().string();
        if (name.rfind("step-", 0) == 0 && entry.path().extension() == ".pt") found.push_back(entry.path());
    }
    std::sort(found.begin(), found.end()); // zero-padded step numbers sort by step
    for (std::size_t i = 0; i + keep < found.size(); ++i) fs::remove(found[i], ec);
}

std::string Trainer::Impl::saveCheckpoint(int step, const TrainerCallbacks& callbacks)
{
    namespace fs = std::filesystem;
    if (options.checkpointDir.empty()) return {};
    fs::create_directories(options.checkpointDir);
    std::ostringstream name;
    name << "step-" << std::setw(7) << std::setfill('0') << step << ".pt";
    const auto path = (fs::path(options.checkpointDir) / name.str()).string();
    torch::serialize::OutputArchive archive;
    archive.write("format", torch::tensor(kCheckpointFormat));
    archive.write("step", torch::tensor(static_cast<std::int64_t>(step)));
    for (const auto& p : model->named_parameters()) archive.write("model." + p.key(), p.value().detach().cpu());
    // A quantized base is stored as it is held, so that an export or a sample
    // of the run reads the very weights it trained on. Other buffers (RoPE and
    // sinusoid tables) are derived from the config: not stored.
    for (const auto& [name, t] : quantizedBaseTensors(*model)) archive.write("model." + name, t);
    torch::serialize::OutputArchive optimizerArchive;
    optimizer->save(optimizerArchive);
    archive.write("optimizer", optimizerArchive);
    auto cpuGen = compat::defaultGenerator(torch::Device(torch::kCPU));
    archive.write("rng.cpu", compat::generatorState(cpuGen));
    archive.write("rng.data", compat::generatorState(dataGen));
    if (torchDevice.is_cuda()) {
        auto cudaGen = compat::defaultGenerator(torchDevice);
        archive.write("rng.cuda", compat::generatorState(cudaGen));
    }
    archive.write("scaler", torch::tensor({scaler.currentScale(), static_cast<double>(scaler.goodSteps())},
                                          torch::kDouble));
    // Write, fsync, then rename: a kill or power cut during the write never
    // leaves a torn checkpoint, and a failed write (disk full) leaves the
    // last good one as it was.
    std::string reason;
    try {
        // Not save_to(filename): LibTorch's file writer throws from its
        // destructor when a write fails (disk full) and the process
        // aborts. Through a function the errors stay ours.
        reason = writeFileAtomicallyWith(path, [&](int fd) {
            int error = 0;
            archive.save_to([&](const void* data, std::size_t size) -> std::size_t {
                if (error == 0) error = writeAll(fd, data, size);
                return size; // the archive carries on; the error is reported after
            });
            return error;
        });
    } catch (const c10::Error& e) {
        reason = firstLine(e.what_without_backtrace());
    }
    if (!reason.empty()) {
        throw RunError("could not write the checkpoint for step " + std::to_string(step) + " (" + reason + ")"
                       + (lastCheckpoint.empty() ? std::string() : "; the last good checkpoint is " + lastCheckpoint)
                       + ". Free disk space or move the database, then resume the run");
    }
    std::error_code ec;
    const auto bytes = static_cast<std::int64_t>(fs::file_size(path, ec));
    lastCheckpoint = path;
    pruneCheckpoints();
    if (callbacks.onCheckpoint) callbacks.onCheckpoint(step, path, bytes);
    return path;
}

void Trainer::Impl::openCheckpoint(const std::string& path)
{
    resumeArchive = std::make_unique<torch::serialize::InputArchive>();
    try {
        // Onto the CPU whatever device wrote it; parameters are copied to theirs below.
        resumeArchive->load_from(path, torch::Device(torch::kCPU));
    } catch (const c10::Error& e) {
        resumeArchive.reset();
        throw InputError("checkpoint " + path + " cannot be read (" + firstLine(e.what_without_backtrace())
                         + "); it may be truncated or not a Trainbench checkpoint");
    }
}

bool Trainer::Impl::loadCheckpointQuantizedBase()
{
    if (!resumeArchive) return false;
    std::map<std::string, torch::Tensor> parts;
    for (const auto& [name, layer] : quantizableLinears(*model)) {
        for (const char* part : {".weight_quant_state", ".weight_data", ".weight_absmax", ".weight_quant_map",
                                 ".weight_nested_absmax", ".weight_nested_quant_map"}) {
            torch::Tensor t;
            if (resumeArchive->try_read("model." + name + part, t)) parts[name + part] = t;
        }
    }
    if (parts.empty()) return false; // a checkpoint without it: the folder is quantized again
    torch::NoGradGuard noGrad;
    try {
        loadQuantizedBase(*model, parts);
    } catch (const c10::Error& e) {
        throw InputError("the checkpoint's quantized base does not fit this model (" + firstLine(e.what_without_backtrace())
                         + "); was the model folder or model.quantize changed since the run began?");
    }
    return true;
}

void Trainer::Impl::loadCheckpoint(const std::string& path)
{
    if (!resumeArchive) openCheckpoint(path);
    const auto held = std::move(resumeArchive);
    auto& archive = *held;
    // A fresh tensor per key: InputArchive::read into a defined tensor resizes it in place.
    const auto read = [&](const char* key) {
        torch::Tensor t;
        archive.read(key, t);
        return t;
    };
    try {
        const auto format = read("format").item<std::int64_t>();
        if (format != kCheckpointFormat) {
            throw InputError("checkpoint " + path + " has format " + std::to_string(format)
                             + ", this Trainbench reads format " + std::to_string(kCheckpointFormat));
        }
        startStep = static_cast<int>(read("step").item<std::int64_t>());
        torch::NoGradGuard noGrad;
        for (auto& p : model->named_parameters()) {
            torch::Tensor saved;
            archive.read("model." + p.key(), saved);
            if (saved.sizes() != p.value().sizes()) {
                throw InputError("checkpoint " + path + " does not match this model: " + p.key() + " has shape "
                                 + c10::str(saved.sizes()) + ", the config builds " + c10::str(p.value().sizes()));
            }
            p.value().copy_(saved);
        }
        torch::serialize::InputArchive optimizerArchive;
        archive.read("optimizer", optimizerArchive);
        if (config.optim.optimizer == "sgd") {
            loadOptimizerState<torch::optim::SGDParamState>(*optimizer, optimizerArchive, path);
        } else {
            loadOptimizerState<torch::optim::AdamWParamState>(*optimizer, optimizerArchive, path);
        }
        moveOptimizerState(*optimizer, torchDevice);
        auto cpuGen = compat::defaultGenerator(torch::Device(torch::kCPU));
        compat::setGeneratorState(cpuGen, read("rng.cpu"));
        compat::setGeneratorState(dataGen, read("rng.data"));
        torch::Tensor cudaState;
        if (torchDevice.is_cuda() && archive.try_read("rng.cuda", cudaState)) {
            auto cudaGen = compat::defaultGenerator(torchDevice);
            compat::setGeneratorState(cudaGen, cudaState);
        }
        const auto scale = read("scaler");
        scaler.setScale(scale[0].item<double>(), static_cast<int>(scale[1].item<double>()));
    } catch (const c10::Error& e) {
        throw InputError("checkpoint " + path + " does not fit this run (" + firstLine(e.what_without_backtrace())
                         + ")");
    }
}

} // namespace tb
