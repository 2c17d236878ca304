#include "train/ScriptedModel.h"

#include <functional>

#include "common/Errors.h"

namespace tb {
namespace {

std::string deviceText(const torch::Device& d) { return d.str(); }

std::string dtypeText(const torch::Tensor& t)
{
    switch (t.scalar_type()) {
    case torch::kFloat: return "float32";
    case torch::kDouble: return "float64";
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kLong: return "int64";
    case torch::kInt: return "int32";
    case torch::kShort: return "int16";
    case torch::kChar: return "int8";
    case torch::kByte: return "uint8";
    case torch::kBool: return "bool";
    default: return std::string(c10::toString(t.scalar_type()));
    }
}

std::string join(const std::string& prefix, const std::string& name) { return prefix.empty() ? name : prefix + "." + name; }

// A registered tensor of the model (parameter or buffer), or a tensor held by
// a TorchScript attribute (also inside lists, tuples and dicts).
struct ModelTensor {
    std::string module; // dotted path of the module that owns it
    std::string path;   // dotted path of the tensor
    std::string kind;   // parameter | buffer | attribute
    torch::Tensor tensor;
};

void walkValue(const c10::IValue& v, const std::string& module, const std::string& path, int depth,
               std::vector<ModelTensor>& out)
{
    if (depth > 6) return;
    if (v.isTensor()) {
        out.push_back({module, path, "attribute", v.toTensor()});
    } else if (v.isList()) {
        const auto list = v.toList();
        for (std::size_t i = 0; i < list.size(); ++i) walkValue(list.get(i), module, path + "[" + std::to_string(i) + "]", depth + 1, out);
    } else if (v.isTuple()) {
        const auto& elements = v.toTupleRef().elements();
        for (std::size_t i = 0; i < elements.size(); ++i) walkValue(elements[i], module, path + "[" + std::to_string(i) + "]", depth + 1, out);
    } else if (v.isGenericDict()) {
        for (const auto& item : v.toGenericDict()) {
            const auto& key = item.key();
            const std::string name = key.isString() ? key.toStringRef()
                                     : key.isInt()  ? std::to_string(key.toInt())
                                                    : std::string("?");
            walkValue(item.value(), module, path + "[" + name + "]", depth + 1, out);
        }
    }
}

// Every tensor of a scripted module in slot (registration) order, submodules
// where they were registered.
void walkScript(const torch::jit::Module& module, const std::string& prefix, std::vector<ModelTensor>& out)
{
    const auto object = module._ivalue();
    const auto type = object->type();
    for (std::size_t i = 0; i < type->numAttributes(); ++i) {
        const std::string name = type->getAttributeName(i);
        const auto value = object->getSlot(i);
        const std::string path = join(prefix, name);
        if (type->getAttribute(i)->is_module()) {
            walkScript(torch::jit::Module(value.toObject()), path, out);
        } else if (type->is_parameter(i) && value.isTensor()) {
            out.push_back({prefix, path, "parameter", value.toTensor()});
        } else if (type->is_buffer(i) && value.isTensor()) {
            out.push_back({prefix, path, "buffer", value.toTensor()});
        } else {
            walkValue(value, prefix, path, 0, out);
        }
    }
}

void walkModule(torch::nn::Module& module, const std::string& prefix, std::vector<ModelTensor>& out)
{
    for (auto& p : module.named_parameters(false)) {
        if (p.value().defined()) out.push_back({prefix, join(prefix, p.key()), "parameter", p.value()});
    }
    for (auto& b : module.named_buffers(false)) {
        if (b.value().defined()) out.push_back({prefix, join(prefix, b.key()), "buffer", b.value()});
    }
    for (auto& child : module.named_children()) walkModule(*child.value(), join(prefix, child.key()), out);
}

std::vector<ModelTensor> modelTensors(CausalLmImpl& model)
{
    std::vector<ModelTensor> out;
    if (auto* scripted = dynamic_cast<ScriptedLmImpl*>(&model)) walkScript(scripted->script(), "", out);
    else walkModule(model, "", out);
    return out;
}

// Registers a scripted module's parameters and buffers (the same tensors) on
// a plain module, recursively, under the same names.
void mirror(torch::nn::Module& into, const torch::jit::Module& from)
{
    for (const auto& p : from.named_parameters(false)) into.register_parameter(p.name, p.value, p.value.requires_grad());
    for (const auto& b : from.named_buffers(false)) into.register_buffer(b.name, b.value);
    for (const auto& child : from.named_children()) {
        auto node = std::make_shared<torch::nn::Module>(child.name);
        mirror(*node, child.value);
        into.register_module(child.name, node);
    }
}

// The first line that says something (the interpreter's errors start with a blank one).
std::string firstSayingLine(const std::string& text)
{
    std::size_t start = 0;
    while (start < text.size()) {
        const auto end = std::min(text.find('\n', start), text.size());
        const auto line = text.substr(start, end - start);
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
            start = end + 1;
            continue;
        }
        // A damaged archive can trip one of LibTorch's internal checks
        // ("type.present() INTERNAL ASSERT FAILED at ...parser.cpp"): say
        // what it means, not the check's source.
        if (line.find("INTERNAL ASSERT FAILED") != std::string::npos) {
            return "its TorchScript code does not parse: the file is damaged";
        }
        return line;
    }
    return "no reason given";
}

} // namespace

torch::jit::Module loadScriptedModule(const std::string& path)
{
    const auto refuse = [&](const std::string& why) {
        throw InputError("model.path: " + path + " " + why
                         + ". Save a scripted causal LM with torch.jit.save(torch.jit.script(model), \"model.pt\"); "
                           "its forward takes int64 token ids [batch, seq] and returns logits [batch, seq, vocab]");
    };
    torch::jit::Module module;
    try {
        // Where it was saved: a meta tensor stays meta (mapped to the CPU it
        // would silently become uninitialised memory). Tensors saved on a GPU
        // this machine lacks come to the CPU instead.
        try {
            module = torch::jit::load(path);
        } catch (const c10::Error& e) {
            if (std::string(e.what()).find("CUDA") == std::string::npos) throw;
            module = torch::jit::load(path, torch::Device(torch::kCPU));
        }
    } catch (const c10::Error& e) {
        refuse("cannot be loaded as a TorchScript module (" + firstSayingLine(e.what_without_backtrace()) + ")");
    } catch (const std::exception& e) {
        refuse("cannot be loaded as a TorchScript module (" + firstSayingLine(e.what()) + ")");
    }
    if (!module.find_method("forward")) refuse("has no forward method");
    return module;
}

ScriptedLmImpl::ScriptedLmImpl(const ModelOptions& options) : ScriptedLmImpl(options, loadScriptedModule(options.scriptPath)) {}

ScriptedLmImpl::ScriptedLmImpl(const ModelOptions& options, torch::jit::Module module)
    : CausalLmImpl(options), m_script(std::move(module))
{
    mirror(*this, m_script);
}

torch::Tensor ScriptedLmImpl::forward(const torch::Tensor& tokens)
{
    auto out = m_script.forward({tokens});
    if (out.isTuple() && !out.toTupleRef().elements().empty()) out = out.toTupleRef().elements()[0];
    const auto refuse = [&](const std::string& got) {
        throw InputError("model.path: the TorchScript model's forward returned " + got + " for token ids "
                         + c10::str(tokens.sizes()) + "; a causal LM returns logits [batch, seq, vocab]");
    };
    if (!out.isTensor()) refuse("a " + out.tagKind());
    auto logits = out.toTensor();
    if (logits.dim() != 3 || logits.size(0) != tokens.size(0) || logits.size(1) != tokens.size(1)) {
        refuse("a tensor of shape " + c10::str(logits.sizes()));
    }
    return logits;
}

void ScriptedLmImpl::train(bool on)
{
    CausalLmImpl::train(on);
    m_script.train(on);
}

std::vector<std::pair<std::string, std::string>> moveModel(CausalLmImpl& model, const torch::Device& device)
{
    std::vector<std::pair<std::string, std::string>> failed;
    torch::NoGradGuard noGrad;
    for (auto& t : modelTensors(model)) {
        if (t.kind == "attribute" || t.tensor.device() == device) continue;
        try {
            t.tensor.set_data(t.tensor.to(device));
        } catch (const c10::Error& e) {
            failed.emplace_back(t.path, firstSayingLine(e.what_without_backtrace()));
        }
    }
    return failed;
}

std::vector<AuditEntry> auditModel(CausalLmImpl& model, const std::string& target, bool moved, const std::string& optimizer)
{
    std::vector<AuditEntry> out;
    std::vector<AuditEntry> state;
    const std::string registerIt = "Register it as a parameter (learned) or a buffer (state, constants) so that "
                                   "moving the model moves it";
    for (const auto& t : modelTensors(model)) {
        AuditEntry e;
        e.path = t.path;
        e.kind = t.kind;
        e.dtype = dtypeText(t.tensor);
        e.expectedDevice = target;
        const std::string now = deviceText(t.tensor.device());
        const bool meta = t.tensor.is_meta();
        if (t.kind == "attribute") {
            e.device = now;
            e.ok = false;
            if (meta) {
                e.cause = "created on the meta device, so it holds no data and nothing can move it. Create it with "
                          "real data (and register it) or load it before training";
            } else if (t.path.find('[') != std::string::npos) {
                e.cause = "state kept in a container attribute (a dict, list or tuple), which nothing moves: it is on "
                    + now + (now == target ? " now, but stays there when the model moves to another device"
                                           : ", not on " + target)
                    + ". Create carried state on the inputs' device (device=x.device) or keep it in a registered buffer";
            } else if (now != target) {
                e.cause = "a plain tensor attribute, neither parameter nor buffer: moving the model to " + target
                    + " leaves it on " + now + ". " + registerIt;
            } else {
                e.cause = "a plain tensor attribute, neither parameter nor buffer: it is on " + now
                    + " now, but moving the model to another device (a GPU) will leave it here. " + registerIt;
            }
        } else {
            // Parameters and buffers follow the move; a meta tensor cannot.
            e.device = moved || meta ? now : target;
            e.ok = e.device == target;
            if (meta) {
                e.cause = "a meta tensor holds no data: it was created on the meta device (an offloaded or "
                          "device_map load, or an init on meta) and never loaded, so it cannot move to " + target
                    + ". Load the weights, or do not offload";
            } else if (!e.ok) {
                e.cause = "the move to " + target + " left it on " + now;
            }
        }
        if (t.kind == "parameter" && t.tensor.requires_grad() && optimizer != "none") {
            // The trainer builds the optimizer after the move; its state is
            // created beside each parameter at the first step (and a resumed
            // state is moved to the parameter's device).
            const std::vector<std::string> names = optimizer == "adamw" ? std::vector<std::string>{"exp_avg", "exp_avg_sq"}
                                                                        : std::vector<std::string>{"momentum_buffer"};
            for (const auto& name : names) {
                AuditEntry s;
                s.path = t.path + "." + name;
                s.kind = "optimizer_state";
                s.dtype = e.dtype;
                s.device = e.device;
                s.expectedDevice = target;
                s.ok = e.ok;
                if (!s.ok) s.cause = "created beside its parameter " + t.path + ", which is on " + e.device;
                state.push_back(std::move(s));
            }
        }
        out.push_back(std::move(e));
    }
    out.insert(out.end(), state.begin(), state.end());
    return out;
}

std::string optimizerStateOf(const RunConfig& config)
{
    if (config.optim.optimizer != "sgd") return "adamw";
    return config.optim.momentum > 0 ? "sgd" : "none";
}

bool isDeviceMismatchText(const std::string& message)
{
    for (const char* marker : {"Expected all tensors to be on the same device", "found at least two devices",
                               "different from other tensors on", "to be on the same device"}) {
        if (message.find(marker) != std::string::npos) return true;
    }
    return message.find("expected device") != std::string::npos && message.find("but got") != std::string::npos;
}

std::string errorSummary(const std::string& message)
{
    if (message.find("TorchScript interpreter") == std::string::npos) return firstSayingLine(message);
    std::size_t end = message.find_last_not_of(" \t\r\n");
    if (end == std::string::npos) return firstSayingLine(message);
    const auto start = message.rfind('\n', end);
    return message.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
}

std::optional<DeviceMeeting> locateDeviceMeeting(CausalLmImpl& model, const torch::Tensor& inputs)
{
    DeviceMeeting meeting;
    meeting.inputDevice = deviceText(inputs.device());
    try {
        torch::NoGradGuard noGrad;
        model.forward(inputs);
    } catch (const std::exception& e) {
        meeting.reproduced = isDeviceMismatchText(e.what());
    }
    for (const auto& t : modelTensors(model)) {
        if (t.tensor.device() == inputs.device()) continue;
        meeting.module = t.module;
        meeting.tensor = t.path;
        meeting.tensorDevice = deviceText(t.tensor.device());
        return meeting;
    }
    return std::nullopt;
}

} // namespace tb
