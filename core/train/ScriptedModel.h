#pragma once
// A user's TorchScript causal LM (model.type "torchscript") as one of the
// trainer's models, and the torch-side pieces of the device audit.
//
// The scripted module's parameters and buffers are registered, under the same
// dotted names, on a tree of plain modules mirroring its submodules; they are
// the same tensors, so the trainer's .to(device), optimizer and checkpoints
// act on the scripted module's own weights. Tensor attributes that are neither
// parameter nor buffer are not registered: moving the model leaves them where
// they are, exactly as it does in PyTorch. That is what the audit reports.

#include <optional>
#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/torch.h>

#include "train/DeviceAudit.h"
#include "train/Layers.h"

namespace tb {

// Loads a saved TorchScript module where its tensors were saved (the CPU when
// that was a GPU this machine lacks; a meta tensor stays meta). Throws InputError naming the
// file and what to do when it is not one or has no forward method.
torch::jit::Module loadScriptedModule(const std::string& path);

class ScriptedLmImpl : public CausalLmImpl {
public:
    // Loads options.scriptPath.
    explicit ScriptedLmImpl(const ModelOptions& options);
    ScriptedLmImpl(const ModelOptions& options, torch::jit::Module module);
    // tokens [B, T] int64 -> logits [B, T, vocab]; a tuple's first element is
    // taken as the logits. Throws InputError for any other result.
    torch::Tensor forward(const torch::Tensor& tokens) override;
    void train(bool on = true) override;
    torch::jit::Module& script() { return m_script; }

private:
    torch::jit::Module m_script;
};

// The audit of a built model: `moved` says whether it was really moved to
// `target` (then every tensor is judged where it is) or is judged as it would
// be after the move (parameters and buffers follow it, nothing else does).
// Optimizer state is listed per trainable parameter as the trainer creates it:
// beside its parameter.
// `optimizer` names the state it keeps: optimizerStateOf(config), or "none".
std::vector<AuditEntry> auditModel(CausalLmImpl& model, const std::string& target, bool moved,
                                   const std::string& optimizer);
// "adamw" (exp_avg, exp_avg_sq), "sgd" (momentum_buffer) or "none" (SGD without momentum).
std::string optimizerStateOf(const RunConfig& config);

// Moves every parameter and buffer to `device` one by one (a meta tensor, which
// has no data to copy, stays where it is). Returns the paths that could not move
// with the reason.
std::vector<std::pair<std::string, std::string>> moveModel(CausalLmImpl& model, const torch::Device& device);

// After a device mismatch: re-runs the forward on `inputs` (no gradients) and
// names the first module whose own tensors are not on the inputs' device.
std::optional<DeviceMeeting> locateDeviceMeeting(CausalLmImpl& model, const torch::Tensor& inputs);

// Whether an error text is a device mismatch between tensors.
bool isDeviceMismatchText(const std::string& message);

// A TorchScript interpreter error ("The following operation failed in the
// TorchScript interpreter. Traceback ...") reduced to its last line, the
// error itself ("RuntimeError: Expected all tensors ..."); other texts'
// first line.
std::string errorSummary(const std::string& message);

} // namespace tb
