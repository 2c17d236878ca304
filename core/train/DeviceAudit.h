#pragma once
// The device audit: every tensor a training step touches (parameters,
// buffers, a TorchScript module's tensor attributes, optimizer state) judged
// against the device the run targets, as the model will be once the trainer
// has moved it there. No LibTorch types here: the CLI and the GUI include it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/ModelFileFacts.h"
#include "config/RunConfig.h"

namespace tb {

struct AuditEntry {
    std::string path;           // dotted, e.g. "blocks.3.pe.position_scaling"
    std::string kind;           // parameter | buffer | attribute | optimizer_state
    std::string dtype;          // "float32", "int64", ...
    std::string device;         // where it is (or will be) once the model is on the target
    std::string expectedDevice; // the target
    bool ok = true;
    std::string cause;          // why it is elsewhere (empty when ok)
};

struct DeviceAuditReport {
    std::string target;  // "cpu", "cuda:0"
    bool moved = false;  // the target exists here and the model was really moved; else judged
    std::string model;   // "gpt", "llama", "torchscript model.pt"
    std::vector<AuditEntry> tensors;
    int flagged() const;
    // {"tensors": [{"path", "kind", "dtype", "device", "expected_device", "ok", "cause"}], "flagged": N,
    //  "target", "moved"}
    std::string toJson() const;
};

// Builds the model the config describes (a TorchScript model is loaded from
// model.path), moves it to `device` (empty: the config's device; "auto" as the
// trainer resolves it) where that device exists here, and audits it. A device
// that does not exist here (cuda:0 on a laptop) is judged: parameters and
// buffers follow the move, anything else stays where it is. Throws InputError
// for a config or model file that cannot be used, or a device name that is not one.
DeviceAuditReport auditDevices(const RunConfig& config, const std::string& device = {});

// Where a device mismatch happened: the first module (in registration order)
// whose own tensors are not on the device of the activations.
struct DeviceMeeting {
    std::string module;       // "blocks.1.pe" ("" for the model itself)
    std::string tensor;       // "blocks.1.pe.position_scaling"
    std::string tensorDevice; // "meta"
    std::string inputDevice;  // "cpu"
    bool reproduced = false;  // re-running the forward raised the mismatch again
    std::string text() const; // one sentence for a finding
};

// The facts for the preflight (loads the model and runs one tiny forward on
// the CPU). Empty (nullopt) for the built-in models, which are built to the dataset's vocabulary.
std::optional<ModelFileFacts> inspectModelFile(const RunConfig& config);

} // namespace tb
